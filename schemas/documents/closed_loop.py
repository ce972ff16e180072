"""`iotape replay fidelity ORIGINAL JOBDIR` of a dependent or afap replay: what
replayer/run/closedloop.py reports and `--json` prints (docs/replay.md)."""

from __future__ import annotations

from schemas.documents._document import Part


class Latency(Part):
    """Latency percentiles in ms over a stream's data requests (reads, writes,
    discards; flushes apart): all of them, and the reads and the writes apart."""

    requests: int
    p50_ms: float | None
    p99_ms: float | None
    read_p50_ms: float | None = None
    write_p50_ms: float | None = None


class Side(Part):
    """One run of a stream: the original, the replay or the truth."""

    requests: int
    span_s: float  # first issue to last completion
    iops: float | None  # requests / span_s
    latency: Latency


class TruthError(Part):
    """The replay against the application's own run on the target, in % of the truth
    ((replay - truth) / truth)."""

    iops_error_pct: float | None
    p50_error_pct: float | None


class StreamFigures(Part):
    original: Side
    replay: Side
    # replay IOPS / original IOPS: > 1 the target ran the application faster.
    speed_up: float | None
    truth: Side | None = None
    error: TruthError | None = None


class ClosedLoopReport(Part):
    original: str
    jobdir: str
    timing: str  # "dependent" or "afap"
    think_scale: float | None
    truth: str | None
    # From the run's summary: requests issued before one they waited for had
    # completed (iotape-lanes counts them; 0 unless the replay is wrong).
    issued_before_predecessor: int | None
    # log writes that went in the write before them (group commit; None: not counted)
    group_commit_taken: int | None = None
    # a log writer's timer writes: [made, logged writes they took whole] (None: no timer)
    timer_writes: list[int] | None = None
    # requests of jobs on their own clock past their logs (None: no such job)
    clock_requests: int | None = None
    latency_sources: dict[str, str]  # what each side's latency measures
    not_reported: str  # the open-loop figures left out, and why
    overall: StreamFigures
    streams: dict[str, StreamFigures]
