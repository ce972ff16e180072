"""The API's documents: what each analysis returns, what the server answers (its
OpenAPI response schemas) and what `iotape ... --json` prints, defined once.

TypedDicts: the analyses build and return plain dicts (the CLI prints them as they
are); the routes name these types as their `response_model`, so pydantic checks
each answer against them and writes the OpenAPI schema from them. Every key is
declared (pydantic drops an undeclared one, and tests/schemas/test_api_documents.py
fails on it). The server writes keys in the order declared here, which is the order
the analyses build them in (but for the tiering answer's profile runs, which the
server has always put after the skew). Numbers that are integers in one case and
floats in another are `Num`, which keeps each as it came (a `float` field makes 20
into 20.0).

typing_extensions.TypedDict, not typing's: pydantic needs it before Python 3.12.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from schemas.documents.tiering import SimulationCore, SimulationExtras
from schemas.jetstress import Check as Check  # a verdict's check: the contract's

Num = int | float


class Filter(TypedDict, total=False):
    """The filter as applied (analyses.filters.describe_filter): only what narrows the
    selection, as ids (op, stream, device) and the time window in seconds."""

    op: int
    stream: int
    dev: int
    min_bytes: int
    max_bytes: int
    start_s: float
    end_s: float


class GivenFilter(TypedDict, total=False):
    """/history's filter as given (analyses.filters.FilterArgs but the device): names,
    since each run resolves them itself."""

    op: str
    stream: str
    min_bytes: int
    max_bytes: int
    start_s: float
    end_s: float


class RunRef(TypedDict):
    id: str
    name: str


# ------------------------------------------------------------------ runs


class Device(TypedDict):
    dev: int
    name: str
    model: str
    firmware: str
    rotational: int
    logical_block_size: int
    capacity_bytes: int
    partition_name: str | None
    partition_start_bytes: int | None


class StreamName(TypedDict):
    stream: int
    name: str


class Matching(TypedDict):
    ios: int
    bytes: int
    filter: Filter


class RunEntry(TypedDict):
    """A run's catalog entry (`iotape runs list --json`): the `runs` table's columns
    but its header, version and state."""

    id: str
    kind: str
    name: str
    host: str | None
    kernel: str | None
    start_ns: int
    duration_ns: int
    events: int
    bytes: int
    parameters: dict[str, Any]  # what the run was made with; by kind (schemas/tables.toml)
    tags: dict[str, Any]
    parent_id: str | None
    source_path: str | None
    source_sha256: str | None
    ingested_ns: int


class RunSummary(RunEntry):
    """GET /runs, /runs/{run}: the entry, its devices and streams, what the filter keeps."""

    devices: list[Device]
    streams: list[StreamName]
    matching: NotRequired[Matching]


# ------------------------------------------------------------------ latency


class HistogramScheme(TypedDict):
    kind: str
    sub_buckets_per_power_of_two: int
    exact_below_ns: int
    relative_error_bound: float
    note: str


# Per level (schemas/percentiles.py, contracts.toml [[percentile]]) and the maximum, ns.
Percentiles = TypedDict(
    "Percentiles",
    {"p50": float, "p90": float, "p99": float, "p99.9": float, "p99.99": float, "max": float},
)


class Distribution(TypedDict):
    """One histogram's summary; None (and empty lists) when it holds nothing."""

    count: int
    mean_ns: float | None
    min_ns: int | None
    max_ns: int | None
    percentiles: Percentiles | None
    histogram: list[list[int]]  # [low ns, high ns, count]
    cdf: list[tuple[int, float]]  # [latency ns, fraction at or below]


class GroupDistribution(TypedDict):
    """One op and stream's distribution, its keys first."""

    op: int
    op_name: str
    stream: int
    stream_name: str
    count: int
    mean_ns: float | None
    min_ns: int | None
    max_ns: int | None
    percentiles: Percentiles | None
    histogram: list[list[int]]
    cdf: list[tuple[int, float]]


class MetricLatency(TypedDict):
    all: Distribution
    groups: list[GroupDistribution]


class ExcludedGroup(TypedDict):
    op: int
    op_name: str
    stream: int
    stream_name: str
    count: int


class Excluded(TypedDict):
    """Records left out of device time: complete_unseen (an upper bound, not measured)."""

    complete_unseen: int
    why: str
    groups: list[ExcludedGroup]


class Latency(TypedDict):
    """analyses.latency: device and queue time, overall and per op and stream."""

    method: str
    histogram_scheme: HistogramScheme
    units: str
    device_time: str
    queue_time: str
    device: MetricLatency
    queue: MetricLatency
    excluded: Excluded


class Selection(TypedDict):
    """What a run's analysis is of: the run, and the filter as applied."""

    run: RunRef
    filter: Filter


class LatencyResponse(Selection, Latency):
    """GET /runs/{run}/latency, `iotape analyze latency --json`."""


# ------------------------------------------------------------------ time


class Point(TypedDict):
    t_s: float
    iops: float
    mb_s: float
    queue_depth: float
    lat_mean_ns: float | None
    p50_ns: Num | None
    p99_ns: Num | None
    max_ns: Num | None


class Timeseries(TypedDict):
    interval_s: float
    queue_depth: str
    points: list[Point]


class DeviceHeatmap(TypedDict):
    dev: int
    name: str
    ios: int
    t0_s: float
    t_step_s: float
    offset0: int
    offset_step: int
    time_bins: int
    offset_bins: int
    cells: list[list[int]]  # [time bin, offset bin, requests, bytes]


class Heatmap(TypedDict):
    cells: str  # what each cell's four numbers are
    devices: list[DeviceHeatmap]


class TimeseriesResponse(Selection, Timeseries):
    """GET /runs/{run}/timeseries."""


class HeatmapResponse(Selection, Heatmap):
    """GET /runs/{run}/heatmap."""


# ------------------------------------------------------------------ verdict


class DeviceVerdict(TypedDict):
    dev: int
    name: str
    result: str
    checks: list[Check]


class DatabaseReport(TypedDict):
    """The workload engine's own verdict of one database (or `total`), as ingested."""

    database: str
    target_iops: float | None
    achieved_iops: float | None
    db_read_avg_ms: float | None
    db_write_avg_ms: float | None
    log_write_avg_ms: float | None
    verdict: str | None


class Verdict(TypedDict):
    """analyses.verdict.verdict: the Jetstress checks, overall and per device."""

    mode: str
    thresholds: dict[str, Num]  # as contracts.toml writes them (20, not 20.0)
    result: str  # pass, fail or unknown
    why: str | None
    checks: list[Check]
    per_device: list[DeviceVerdict]
    per_database: list[DatabaseReport]
    excluded: Excluded  # of the checked streams only


class VerdictResponse(Selection, Verdict):
    """GET /runs/{run}/verdict, `iotape analyze verdict --json`."""


class RunVerdict(TypedDict):
    """A run's verdict in a comparison: the result and the overall checks."""

    result: str
    checks: list[Check]


# ------------------------------------------------------------------ compare


class MetricChange(TypedDict):
    """One metric, candidate minus base, with its interval (None: not judged)."""

    level: str  # p50 … p99.99, mean, iops
    unit: str  # ns or IO/s
    base: float | None
    candidate: float | None
    delta: float | None
    delta_pct: float | None
    ci_low: float | None
    ci_high: float | None
    gated: bool
    regression: bool
    improvement: bool
    # The bar that decided the flag, the highest of the three a change must beat:
    # "noise" (the interval), "threshold" (threshold_pct of the base) or "min_effect"
    # (min_effect_ns, or min_effect_iops for IOPS); None: not judged.
    decided_by: Literal["noise", "threshold", "min_effect"] | None
    min_change: float | None  # that bar's height, in `unit` (None: no base for a percentage)


class PercentileChange(TypedDict):
    """A percentile's change, as /compare has always given it (MetricChange in ns)."""

    level: str
    base_ns: float | None
    candidate_ns: float | None
    delta_ns: float | None
    delta_pct: float | None
    ci_low_ns: float | None
    ci_high_ns: float | None
    regression: bool
    improvement: bool


class ComparisonRow(TypedDict):
    op: int
    op_name: str
    stream: int
    stream_name: str
    base_count: int
    candidate_count: int
    metrics: list[MetricChange]
    percentiles: list[PercentileChange]
    regression: bool


class ComparisonGroup(TypedDict):
    model: str  # or the models of both runs, comma-separated, when they differ
    base_firmware: list[str]
    candidate_firmware: list[str]
    rows: list[ComparisonRow]


class Comparison(TypedDict):
    """One candidate against the base (analyses.comparison.compare)."""

    base: RunRef
    candidate: RunRef
    metric: str
    comparable: bool
    workload: str  # how the runs were paired, or why they are not comparable
    paired_by: str
    confidence: float
    intervals: str
    bootstrap_resamples: int
    threshold_pct: float
    min_effect_ns: float  # the smallest latency change that flags
    min_effect_iops: float  # the smallest IOPS change that flags
    metrics: list[str]
    histogram_scheme: HistogramScheme
    regression: bool
    groups: list[ComparisonGroup]
    verdict: NotRequired[RunVerdict]  # the candidate's, where compare_many adds it


class BaseRun(RunRef):
    verdict: RunVerdict


class ComparisonSet(TypedDict):
    """The base against each candidate (comparison.compare_many; `iotape compare --json`,
    GET /compare with several candidates)."""

    base: BaseRun
    filter: Filter
    threshold_pct: float
    min_effect_ns: float
    min_effect_iops: float
    confidence: float
    metrics: list[str]
    mode: str
    comparable: bool
    regression: bool
    candidates: list[Comparison]


class CompareOne(Comparison):
    """GET /compare with one candidate: its comparison, the filter and the base's verdict."""

    filter: Filter
    base_verdict: RunVerdict


CompareResponse = CompareOne | ComparisonSet


# ------------------------------------------------------------------ history


class Interval(TypedDict):
    value: float
    ci_low: float
    ci_high: float


class HistoryVersion(TypedDict):
    version: str
    first_start_ns: int
    runs: list[str]


class HistoryMethod(TypedDict):
    intervals: str
    change_points: str
    change_metrics: list[str]


class Skipped(TypedDict):
    run: str
    why: str


# One version's values (comparison.METRICS), its runs pooled.
HistoryPoint = TypedDict(
    "HistoryPoint",
    {
        "version": str,
        "runs": list[str],
        "count": int,
        "p50": Interval,
        "p90": Interval,
        "p99": Interval,
        "p99.9": Interval,
        "p99.99": Interval,
        "mean": Interval,
        "iops": Interval,
    },
)


class ChangePoint(TypedDict):
    version: str  # the first version after the change
    previous_version: str
    before: float
    after: float
    change_pct: float | None
    p_value: float


class HistoryGroup(TypedDict):
    op_name: str
    stream_name: str
    points: list[HistoryPoint]
    change_points: dict[str, list[ChangePoint]]  # per metric asked


class History(TypedDict):
    """analyses.history.history: GET /history, `iotape history --json`."""

    model: str
    version_from: str
    order: str
    confidence: float
    filter: GivenFilter
    versions: list[HistoryVersion]
    method: HistoryMethod
    skipped: list[Skipped]
    groups: list[HistoryGroup]


# ------------------------------------------------------------------ tiering


class ProfileRun(RunRef):
    device: str | None  # RUN@DEVICE: only that device's requests


class ProfileRuns(TypedDict):
    fast_run: NotRequired[ProfileRun]
    slow_run: NotRequired[ProfileRun]
    measured_run: NotRequired[ProfileRun]


class TieringRun(TypedDict):
    run: RunRef


class TieringResponse(TieringRun, SimulationCore, ProfileRuns, SimulationExtras):
    """GET /runs/{run}/tiering, `iotape analyze tiering --json` (from_store.analyze_run):
    the simulation of the run, with the runs its projection took profiles from."""
