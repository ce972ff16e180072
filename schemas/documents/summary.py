"""JOBDIR/results/summary.json, the replay summary: what `iotape replay run` returns
and keeps (replayer/run/execute.py, replayer/hosts/run.py); the store's ingest reads
it for the re-recorded trace, the anchor's run, the hosts' starts and the runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from schemas.documents._document import Document, Part
from schemas.formats import REPLAY_SUMMARY

Number = int | float

# Who replayed the plan (replayer/run/runner.py): its JSON output is fio's shape either way.
Runner = Literal["fio", "iotape-lanes"]


class IoStats(Part):
    ios: int
    iops: Number
    mean_ms: float
    p99_ms: float


class JobRow(Part):
    """One fio job's figures, per direction it did any I/O in."""

    job: str
    runtime_ms: int | None
    read: IoStats | None = None
    write: IoStats | None = None
    trim: IoStats | None = None
    sync: IoStats | None = None


class HostStart(Part):
    """A host's start and issue error, from fio's per-I/O logs (hosts/fidelity.py)."""

    planned: int | None = None
    logged: int | None = None
    paired: int | None = None
    source: str | None = None
    start_epoch_ns: int | None = None
    issue_error_ms: dict[str, float] | None = None
    start_after_launch_ms: float | None = None
    offset_ms: float | None = None


class HostRun(Part):
    jobs: list[JobRow]
    start: HostStart | None


class AnchorRun(Part):
    record: str
    jobs: list[JobRow]


class Relabel(Part):
    relabelled: int
    requests: int


class ReplaySummary(Document):
    """summary.json. Fields after `jobs` are written only where they apply."""

    FORMAT = REPLAY_SUMMARY
    WHAT = "replay summary"
    PLURAL = "replay summaries"

    format: str = REPLAY_SUMMARY.id
    version: int = REPLAY_SUMMARY.version
    jobdir: str
    mode: str
    runner: Runner
    jobs: list[JobRow]
    # iotape-lanes only: how late it issued requests against their times (p50 ... max).
    issue_late_ms: dict[str, float] | None = None
    record: str | None = None  # the re-recorded trace (`replay run --record`)
    relabel: Relabel | None = None
    anchor: AnchorRun | None = None
    hosts: dict[str, HostRun] | None = None  # a multi-host run
    launch_epoch_ns: int | None = None
    # A dependent or afap plan only: requests issued before a request they waited
    # for had completed, as iotape-lanes counted them (0 unless it is wrong).
    issued_before_predecessor: int | None = None
    # A dependent plan with `--group-commit join`: log writes that went in the
    # write before them (iotape-lanes' `group_commit.taken`); None where not counted.
    group_commit_taken: int | None = None
    # A dependent plan whose log writer has a timer (`lazy REST_US`, the target's
    # recording: replayer/plan/timerwrites.py): [writes the timer made, logged
    # writes they took whole] (iotape-lanes' `lazy_writes`); None where none.
    timer_writes: list[int] | None = None
    # ... and with a job on its own clock there (`clock PERIOD_US LO HI`:
    # replayer/plan/clockjobs.py): the requests it made past its log
    # (iotape-lanes' `clock_jobs.requests`); None where none.
    clock_requests: int | None = None


def _unversioned(doc: dict[str, Any]) -> dict[str, Any]:
    """A summary from before it had a format and version: iotape-lanes, the one other
    runner, came with the "runner" key, so a summary without it was fio's."""
    return {"format": REPLAY_SUMMARY.id, "version": REPLAY_SUMMARY.version, "runner": "fio"} | doc


ReplaySummary.UPGRADES = {None: _unversioned}


def load(path: Path) -> ReplaySummary:
    return ReplaySummary.read(path)
