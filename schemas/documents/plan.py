"""plan.json, the replay plan: what `iotape replay plan` writes into JOBDIR and
`replay run`, `replay fidelity`, the hosts and the store's ingest read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from base.errors import IotapeError
from schemas.documents._document import Document, Part
from schemas.formats import REPLAY_PLAN

# A number a writer may give as an int (a scale of 1, 40 mailboxes): kept as given.
Number = int | float


class Scaling(Part):
    """How the plan scales the trace's mailboxes, databases and copies; the storage
    groups only where they are in play (replayer/plan/scale.py)."""

    mailboxes: Number
    databases: int
    copies: int
    from_mailboxes: Number
    from_databases: int
    from_copies: int
    storage_groups: int | None = None
    from_storage_groups: int | None = None


class TargetEntry(Part):
    path: str
    kind: str
    writes: bool
    block_size: int
    size: int | None
    create_bytes: int | None
    reach_bytes: int


class WindowEntry(Part):
    jobfile: str
    launch_us: int
    jobs: int


class JobEntry(Part):
    name: str
    target: str
    stream: str
    db: int | None  # None: a storage group's log
    requests: int
    group: int | None = None  # the storage group (a plan with storage groups only)


class GroupEntry(Part):
    group: int
    databases: list[int]


class LayoutEntry(Part):
    """Databases and storage groups (a plan with storage groups only)."""

    databases: int
    storage_groups: int
    groups: list[GroupEntry]


class HostEntry(Part):
    name: str
    address: str
    port: int
    jobfile: str
    jobs: list[str]
    targets: list[str]
    iologs: list[str]
    iologs_sha256: str | None


class CalibratedJob(Part):
    """A job's short thinks at the target's CPU (replayer/plan/thinkcal.py)."""

    comm: str  # its thread's name
    matched: str | None  # "comm", "pattern" (digits aside) or None: not calibrated
    why: str | None  # why not
    factor: float | None  # the target's CPU think mean over the source's
    source_cpu_think_us: list[float]  # [count, mean, p50] in the source trace
    target_cpu_think_us: list[float]  # in the calibration trace
    thinks: int  # thinks under the spin line so scaled
    think_s: list[float]  # their think time in all, before and after
    long_thinks_kept: int  # relative thinks at or over the line, as recorded
    # --cycle-cpu target (replayer/plan/cpucycle.py): the CPU a cycle, [count, mean,
    # p50] us in each trace; the `cpu US` of its log (None: not spent, `why`); of its
    # thinks, those left a sleep
    target_cycle_cpu_us: list[float] | None = None
    source_cycle_cpu_us: list[float] | None = None
    cpu_us: float | None = None
    thinks_slept: int | None = None


class TimerJob(Part):
    """A job's log writer's timer, learnt from the --think-calibrate trace
    (replayer/plan/timerwrites.py): its rest where it writes by it, else why not."""

    comm: str  # its thread's name
    rest_us: int | None  # the `lazy REST_US` of its log; None: none
    why: str | None
    target_writes: list[float]  # [writes, timer writes, share] of its role in the target trace
    source_writes: list[float]  # the same in the plan's trace


class ClockJob(Part):
    """A job whose role is on a clock in the --think-calibrate trace
    (replayer/plan/clockjobs.py): its period where it goes on, else why not."""

    comm: str
    period_us: int | None  # the `clock PERIOD_US LO HI` of its log; None: none
    why: str | None
    target_requests: int  # its role's requests on the clock in the target trace
    target_sequential: float | None  # their share each where the one before ended


class DependencyEntry(Part):
    """A stream's inferred dependencies (a dependent or afap plan only:
    replayer/plan/deps.py)."""

    stream: str
    submitter: str  # what a submitter is in the trace: "tid", "pid" or "stream"
    submitters: int
    requests: int
    with_predecessor: int
    depth: int  # the most requests a submitter had in flight
    think_us: dict[str, float]  # p10, p50, p90, p99 of the think times
    flush_orderings: int  # flush/FUA requests' waits on writes of other submitters
    cross_candidates: int | None  # issued right after another submitter's completion
    cross_by_chance: int | None = None  # how many independent submitters would show
    # issued as soon BEFORE another submitter's completion: the sign test's other
    # side (crossedges.ordered): about as many as the candidates, no edge
    cross_mirror: int | None = None
    # whose thread's previous completion was of another stream (each stream is chained apart)
    other_stream_predecessors: int = 0
    # requests that also wait for another thread's request (crossedges.cross_edges)
    cross_edges: int = 0
    # of them, a think time over 2 ms that no evidence explained (crossedges._long_think)
    long_think_edges: int = 0
    # of them, from the trace's wake records (replayer/plan/wakeedges.py): exact, not
    # inferred; the rest (cross_edges - wake_edges) were inferred from timing
    wake_edges: int = 0
    # whether the trace carried wake records (`iotape record --wakes`)
    wakes_recorded: bool = False
    # dependent only (replayer/plan/demand.py): "demand" where long thinks of a
    # thread that waits for others, ended by a timer or a poll (no prompt wake),
    # are replayed as its short think after their demand; "recorded" keeps them
    long_thinks: str | None = None
    demand_thinks: int = 0  # think times so replaced
    demand_woken: int = 0  # of them, anchored at a demand wake (woken, then a timer)
    demand_think_s: list[float] | None = None  # their think time in all, before and after
    # dependent only (replayer/plan/schedsplit.py): "net" where each think time is
    # replayed less the submitter's run-queue wait inside it (a trace with sched
    # records), "recorded" keeps them; None in other plans
    run_queue: str | None = None
    sched_recorded: bool = False  # whether the trace carried sched records
    run_queue_thinks: int = 0  # think times so shortened
    run_queue_think_s: list[float] | None = None  # their think time in all, before and after
    # dependent only (replayer/plan/groupcommit.py): "join" where a log writer's
    # writes are marked for iotape-lanes to take with the write before them when
    # their committers have committed (group commit on a faster device),
    # "recorded" keeps each write; None in other plans
    group_commit: str | None = None
    group_commit_writes: int = 0  # writes so marked
    # dependent with --think-calibrate only (replayer/plan/thinkcal.py): per job
    think_calibration: list[CalibratedJob] | None = None
    # dependent with --think-calibrate, --timer-writes target (timerwrites.py): per job
    timer_writes: list[TimerJob] | None = None
    # dependent with --think-calibrate, --clock-jobs target (clockjobs.py): per job
    # whose role is on a clock there
    clock_jobs: list[ClockJob] | None = None


class PlacementEntry(Part):
    """Where a source device's stream went: the range its first replica (database 0's
    or the first storage group's, copy 0) fills; every owner's range is laid out
    alike, each in its own equal share of its target."""

    device: int
    stream: str
    target: str
    base: int  # the range's first byte on the target
    size: int  # the range's bytes
    block: int  # the target's logical block size
    packed_at: int | None = None  # compact: where the device's packed extents start
    # fit, wrap, scale: the device's own region of the range, [first byte within the
    # range, bytes] (several devices in one range each get one; steps._regions);
    # absent in plans before regions, which laid every device over the whole range
    region: list[int] | None = None
    # Each owner's share of the stream's requests (scale.factor: 1 every one, 2 two
    # copies, 0.5 a seeded half): the first is this range's.
    shares: list[float]


class DeviceMapEntry(Part):
    device: int
    name: str
    end_bytes: int  # the furthest byte the trace reaches on it (wrap and scale map from it)
    # compact: the touched extents [first byte, bytes], granule-aligned, in offset order
    extents: list[list[int]] | None = None


class MappingEntry(Part):
    """How the plan moved each original request's offset (replayer/plan/mapping.py):
    what `replay fidelity` pairs through and the plan's locality prediction replays."""

    version: int  # mapping.VERSION: a reader refuses one it does not know
    mode: str  # --remap: fit, wrap, scale or compact
    granule_bytes: int | None = None  # compact's granule
    devices: list[DeviceMapEntry]
    placements: list[PlacementEntry]


class ReplayPlan(Document):
    """plan.json. Fields after `jobs` are written only where they apply."""

    FORMAT = REPLAY_PLAN
    WHAT = "replay plan"

    format: str = REPLAY_PLAN.id
    version: int = REPLAY_PLAN.version
    trace: str
    mode: str  # "exact" or "synthetic"
    mode_reason: str | None
    jobfile: str | None  # None: a multi-host plan (one job file per host)
    anchor: str | None
    duration_s: float
    time_scale: Number
    requests_per_job: int | None
    remap: str
    scaling: Scaling | None
    targets: list[TargetEntry]
    windows: list[WindowEntry] | None
    jobs: list[JobEntry]
    layout: LayoutEntry | None = None  # a plan with storage groups only
    exact_layout: str | None = None  # "lanes" (a plan of lanes only: v2 iologs)
    # A plan of lanes: the trace's 0 in its logs, in us after fio's start (fio's
    # set-up budget), and where iotape-lanes puts it after its own start (`replay
    # run` tells it to run that much ahead: iotape-lanes --ahead-us). Absent: a
    # plan from before them, which iotape-lanes runs at fio's times.
    start_us: int | None = None
    lanes_start_us: int | None = None
    hosts: list[HostEntry] = Field(default_factory=list)  # a multi-host plan only
    # A dependent or afap plan only (`--timing`; absent: recorded, today's plans).
    timing: str | None = None
    think_scale: Number | None = None
    think_calibration: str | None = None  # the --think-calibrate trace
    runner: str | None = None  # "iotape-lanes": fio cannot run it
    dependencies: list[DependencyEntry] | None = None
    # Where the plan moved the offsets (a recorded plan; absent: one from before it).
    mapping: MappingEntry | None = None
    # What the remap keeps: locality of the original and the remapped trace
    # (replayer/run/predict.py; written by `replay plan` for a remap other than fit).
    prediction: dict[str, Any] | None = None

    @property
    def lanes(self) -> bool:
        return self.exact_layout == "lanes"

    def parameters(self) -> dict[str, Any]:
        """What of the plan a replay's run keeps in its parameters (the store)."""
        keep = ("trace", "mode", "jobfile", "anchor", "duration_s", "time_scale", "remap")
        out = {k: v for k, v in self.data().items() if k in keep}
        out["scaling"] = (
            self.scaling.model_dump(mode="json", exclude_unset=True) if (self.scaling) else None
        )
        out["targets"] = [t.model_dump(mode="json") for t in self.targets]
        if self.layout is not None:
            out["layout"] = self.layout.model_dump(mode="json")
        if self.exact_layout is not None:
            out["exact_layout"] = self.exact_layout
        if self.timing is not None:
            out["timing"] = self.timing
            out["think_scale"] = self.think_scale
        return out

    @property
    def closed_loop(self) -> bool:
        """A dependent or afap plan: iotape-lanes runs it, never fio."""
        return self.timing in ("dependent", "afap")


def load(path: Path) -> ReplayPlan:
    """plan.json at `path`, checked: its job files are files of JOBDIR."""
    man = ReplayPlan.read(path)
    if man.hosts:
        for k, h in enumerate(man.hosts):
            if h.jobfile != f"hosts/{h.name}.fio":
                raise IotapeError(
                    f"{path}: field 'hosts.{k}.jobfile': {h.jobfile!r} is not hosts/{h.name}.fio"
                )
    elif man.jobfile is None or "/" in man.jobfile or man.jobfile in ("", ".", ".."):
        raise IotapeError(
            f"{path}: field 'jobfile': {man.jobfile!r} is not a file name in {Path(path).parent}"
        )
    return man
