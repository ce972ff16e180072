"""The tiering simulator's documents: what `simulate` returns (analyzer/tiering), as
`iotape analyze tiering --json` prints it and GET /runs/{run}/tiering answers it
(schemas/documents/api.py adds the runs). TypedDicts, as api.py says why; the keys
in the order the simulator writes them.
"""

from __future__ import annotations

from typing import NotRequired

from typing_extensions import TypedDict


class SimulationParams(TypedDict):
    """The simulation's parameters (analyzer/tiering/params.py Params), the fast tier's
    capacity filled in."""

    policy: str
    unit: int
    capacity: int
    stats_interval_s: float
    migrate_interval_s: float
    half_life_s: float | None
    history_s: float | None
    budget_bytes: int | None
    headroom: float
    max_io_bytes: int | None
    count_writes: bool
    report_interval_s: float | None
    preset: str | None


class Ratios(TypedDict):
    """Hits / all, of all requests, reads and writes; None where there were none."""

    all: float | None
    read: float | None
    write: float | None


class HitRatio(TypedDict):
    count: Ratios
    bytes: Ratios
    requests: int
    hit_requests: int
    bytes_total: int
    bytes_hit: int
    migrated_bytes: int
    migrated_share: float | None  # of host I/O


class Timeline(TypedDict):
    """Per report interval (one list element each)."""

    interval_s: float
    t_s: list[float]
    requests: list[int]
    hit_ratio_count: list[float | None]
    hit_ratio_bytes: list[float | None]
    hit_ratio_count_read: list[float | None]
    hit_ratio_bytes_read: list[float | None]
    hit_ratio_count_write: list[float | None]
    hit_ratio_bytes_write: list[float | None]
    host_bytes: list[int]
    promotions: list[int]
    demotions: list[int]
    migrated_bytes: list[int]
    migrated_share: list[float | None]


class SkewPoint(TypedDict):
    capacity_share: float  # of the footprint, hottest units first
    io_share: float  # of the accesses
    bytes_share: float


class Skew(TypedDict):
    footprint_bytes: int
    units: int
    curve: list[SkewPoint]
    capacity_for_80pct_io: int
    capacity_for_100pct_io: int
    capacity_for_80pct_bytes: int
    capacity_for_100pct_bytes: int


class SweepPoint(TypedDict):
    capacity_bytes: int
    units: int  # the tier in whole units, less the headroom
    hit_ratio_count: float | None
    hit_ratio_bytes: float | None


class Sweep(TypedDict):
    one_pass: bool  # False: one simulation per size
    points: list[SweepPoint]


class Latency(TypedDict):
    """The latency of a set of requests (ns); None where the set is empty."""

    p50_ns: float | None
    p99_ns: float | None
    mean_ns: float | None
    requests: int


class LatencyError(TypedDict):
    """projected / measured - 1 (0.1: the projection is 10 % high); None where either
    is missing or zero."""

    p50: float | None
    p99: float | None
    mean: float | None


class Projection(TypedDict):
    """Projected device latency, beside the all-slow and all-fast devices; with a
    measured tiered run, its latency and the projection's error."""

    projected: Latency
    slow_only: Latency
    fast_only: Latency
    measured: NotRequired[Latency]
    error: NotRequired[LatencyError]


class SimulationCore(TypedDict):
    params: SimulationParams
    source: str | None  # the preset's source
    simulator: str  # C, or the Python reference
    capacity_units: int
    hit_ratio: HitRatio
    timeline: Timeline
    skew: Skew


class SimulationExtras(TypedDict):
    sweep: NotRequired[Sweep]  # when asked
    latency: NotRequired[Projection]  # given a fast and a slow run


class Simulation(SimulationCore, SimulationExtras):
    """analyzer/tiering/simulate.py simulate."""
