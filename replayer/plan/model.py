"""What a replay plan is made of, as it passes between the planning modules; plan.json,
which `replay run`, `replay fidelity` and the hosts read, is
schemas/documents/plan.py's `ReplayPlan`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from replayer.plan import fitloc
from replayer.plan.options import PlanOptions
from replayer.plan.scale import Scaling
from replayer.plan.source import Source
from replayer.plan.targetmap import Owner, Target
from schemas.documents.plan import HostEntry, JobEntry, ReplayPlan

# An exact job's iolog entries, column by column: (t_us, action, offset, length).
Entries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class HostAddress(NamedTuple):
    """Where a `--host NAME=ADDRESS[:PORT]` runs `fio --server`."""

    address: str
    port: int


@dataclass
class Slice:
    """One stream's requests of one device for one database (or storage group's
    log) and copy, remapped into its target's range: what a plan makes jobs of."""

    name: str
    target: str
    stream: str
    owner: Owner
    writes: bool
    records: np.ndarray
    t_ns: np.ndarray
    offset: np.ndarray  # remapped, relative to `base`
    nbytes: np.ndarray
    base: int
    size: int


@dataclass
class Job:
    name: str
    target: str
    stream: str
    owner: Owner
    options: dict[str, str]
    requests: int
    writes: bool
    entries: Entries | None = None  # exact mode only
    segment: int | None = None  # exact: which piece of its stream's requests this job is
    busy_us: np.ndarray | None = None  # exact, for lanes: each entry's latency in the trace
    in_flight: int = 1  # exact, for lanes: the most requests its submitter had outstanding


@dataclass
class Window:
    """Consecutive pieces run by one fio process."""

    index: int
    jobs: list[Job]
    start_us: int  # set-up budget: the first piece's entry this long after launch
    launch_us: int  # when its fio starts, in trace microseconds (may be < 0)

    @property
    def jobfile(self) -> str:
        return "replay.fio" if self.index == 0 else f"replay.w{self.index:04d}.fio"


@dataclass
class Arrangement:
    """How a plan's jobs run, once every chunk is planned (sinks.py)."""

    jobs: list[Job]
    windows: list[Window]
    # iolog times' zero: fio's start plus the set-up budget (one process), the
    # stamped monotonic base (windows), None in synthetic mode.
    start_us: int | None
    per_segment: int  # exact: requests per piece, 0 for whole streams
    layout: str  # exact: "pieces" or "lanes" (exact.arrange); synthetic: "pieces"
    reach: dict[str, int]  # per target, the end of the furthest byte any job may touch


@dataclass(kw_only=True)
class Plan:
    """Everything a plan writes (build.py), its jobs as arranged."""

    opts: PlanOptions
    src: Source  # the trace as a whole (a skeleton of it where read in chunks)
    requests: int  # the trace's requests
    mode: str  # "exact" or "synthetic"
    mode_reason: str | None  # why auto chose synthetic
    jobs: list[Job]
    windows: list[Window]
    start_us: int | None  # Arrangement.start_us
    per_segment: int  # exact: requests per piece, 0 for whole streams
    scaling: Scaling | None
    probed: dict[str, Target]
    spans: dict[tuple[str, Owner], tuple[int, int]]  # (path, owner) -> (base, size)
    window_ns: int  # synthetic: the fitting window
    models: dict[str, fitloc.Model]  # synthetic: each job stem's locality model
    hosts: dict[str, HostAddress]
    layout: str = "pieces"  # exact: "pieces" or "lanes" (exact.arrange)
    reach: dict[str, int]  # Arrangement.reach
    mapping: dict[str, Any] | None = None  # plan.json "mapping" (mapping.record)


# plan.json: its one definition is schemas/documents/plan.py.
Manifest = ReplayPlan
# What `plan` returns: the manifest's JSON values and the job files' text (for --dry-run).
PlanResult = dict[str, Any]

__all__ = ["HostEntry", "JobEntry", "Manifest", "PlanResult", "ReplayPlan"]
