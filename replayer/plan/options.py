"""What `iotape replay plan` was asked for, and the mode that follows from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class PlanOptions:
    trace: Path
    jobdir: Path | None = None
    mode: str = "auto"
    mailboxes: float | None = None
    databases: int | None = None
    copies: int | None = None
    from_mailboxes: float | None = None
    from_databases: int | None = None
    from_copies: int | None = None
    storage_groups: int | None = None  # None: the trace's databases per group kept
    from_storage_groups: int | None = None
    time_scale: float = 1.0
    remap: str = "fit"
    remap_unit: int = 1 << 20  # --remap compact: the granule, bytes (compact.GRANULE)
    targets: list[str] = field(default_factory=list)
    dry_run: bool = False
    force: bool = False
    window_s: float = 1.0
    locality: str = "auto"  # synthetic: zipf, zoned, or auto (the better in simulation)
    exact_limit: int = 2_000_000
    # fio ioengine. Lanes too run psync by default: the one 60 s pair against
    # libaio (4 in flight a lane, lanes.ASYNC_DEPTH) favoured psync (docs/replay.md).
    engine: str = "psync"
    segment: int = 32
    # A trace of more than MAX_JOBS pieces: one fio process whose pieces get
    # longer (False), or windows of fio processes (True, --windows; see WINDOW_JOBS).
    windows: bool = False
    # Exact mode: "pieces" (short jobs, each started at an absolute time), "lanes"
    # (long jobs whose every request waits until an absolute millisecond: lanes.py)
    # or "auto" (lanes where pieces would pass fio's job limit: exact.use_lanes).
    layout: str = "auto"
    # Lanes: "auto" (a busy submitter with more than one request in flight to one
    # async lane, the rest to synchronous lanes), "sync" or "async": lanes.py.
    lane_io: str = "auto"
    create_file: int | None = None  # bytes: create each target file that does not exist
    destroy: list[str] = field(default_factory=list)  # --destroy-data-on
    hosts: list[str] = field(default_factory=list)  # --host NAME=ADDRESS[:PORT] (hosts/spec.py)
    # recorded (open loop, each request at its time), dependent (closed loop: after
    # its predecessors' completion plus think time x think_scale) or afap: dependent.py.
    timing: str = "recorded"
    think_scale: float = 1.0
    # dependent: long thinks of threads that wait for others replayed on demand
    # ("demand") or as recorded ("recorded"): demand.py.
    long_thinks: str = "demand"
    # dependent: each think time less the submitter's run-queue wait inside it
    # where the trace has sched records ("net"), or as recorded: schedsplit.py.
    run_queue: str = "net"
    # dependent: a log writer's writes marked for group commit at run time
    # (groupcommit.py): join, or recorded (every write as it was)
    group_commit: str = "join"
    # dependent: a short recording of the same application on the target, whose
    # CPU per cycle the short thinks are replayed at: thinkcal.py.
    think_calibrate: Path | None = None
    # dependent, with think_calibrate: a log writer's writes by its timer on the
    # target replayed ("target") or only the trace's ("recorded"): timerwrites.py.
    timer_writes: str = "target"
    # ... and threads on their own clock there go on until the others finish
    # ("target") or only as the trace has them ("recorded"): clockjobs.py.
    clock_jobs: str = "target"
    # ... and each synchronous thread's CPU a cycle there spent by its job
    # ("target"), or its thinks replayed as times ("recorded"): cpucycle.py.
    cycle_cpu: str = "recorded"


SYNTHETIC_LOSES = (
    "not reproduced: the request order, each request's own offset, size and time "
    "(fio draws them per window), the issue times within a window, discards; "
    "kept: per-window rate, read/write and size mix, depth, flushes, and each "
    "stream's footprint, sequential share and LRU hit-ratio curve as fitted "
    "(check them with `iotape replay fidelity`)"
)


def choose_mode(opts: PlanOptions, n: int, chunked: bool = False) -> tuple[str, str | None]:
    """(mode, why auto chose synthetic): auto replays exactly whenever the trace is
    within --exact-limit, the most requests whose iologs fio is asked to hold, or
    whenever the exact plan would be lanes (`chunked`: fio reads their logs a
    chunk at a time, so its memory does not grow with the trace)."""
    if opts.mode != "auto" or n <= opts.exact_limit or chunked:
        return ("exact" if opts.mode == "auto" else opts.mode), None
    return "synthetic", (
        f"auto chose synthetic mode: {n} requests > --exact-limit {opts.exact_limit} "
        "(fio holds every iolog entry of pieces in memory; raise --exact-limit to "
        "replay exactly); " + SYNTHETIC_LOSES
    )
