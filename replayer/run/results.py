"""The shape of what `replay run` returns and writes to JOBDIR/results/summary.json."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class IoStats(TypedDict):
    ios: int
    iops: float
    mean_ms: float
    p99_ms: float


class JobRow(TypedDict):
    """One fio job's figures, per direction it did any I/O in."""

    job: str
    runtime_ms: int | None
    read: NotRequired[IoStats]
    write: NotRequired[IoStats]
    trim: NotRequired[IoStats]
    sync: NotRequired[IoStats]


class HostStart(TypedDict, total=False):
    """A host's start and issue error, from fio's per-I/O logs (hosts/fidelity.py)."""

    planned: int
    logged: int
    paired: int
    source: str
    start_epoch_ns: int
    issue_error_ms: dict[str, float]
    start_after_launch_ms: float
    offset_ms: float


class HostRun(TypedDict):
    jobs: list[JobRow]
    start: HostStart | None


class AnchorRun(TypedDict):
    record: str
    jobs: list[JobRow]


class Relabel(TypedDict):
    relabelled: int
    requests: int


class RunSummary(TypedDict):
    jobdir: str
    mode: str
    jobs: list[JobRow]
    runner: NotRequired[str]  # "fio" or "iotape-lanes" (runner.py)
    # iotape-lanes only: how late it issued requests against their times (p50 ... max).
    issue_late_ms: NotRequired[dict[str, float]]
    record: NotRequired[str]
    relabel: NotRequired[Relabel]
    anchor: NotRequired[AnchorRun]
    hosts: NotRequired[dict[str, HostRun]]  # a multi-host run
    launch_epoch_ns: NotRequired[int]
