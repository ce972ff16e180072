"""The API's response models: what /openapi.json says each endpoint returns.

The analyses build plain dicts; these models describe them. Every model lets
unnamed keys through (`extra="allow"`), so a key an analysis adds is still
answered, and the routes drop no key the model leaves optional and the analysis
left out (`response_model_exclude_unset`). Numbers that are integers in one case
and floats in another are `Num`, which keeps each as it came. Large arrays are
lists of numbers or of short tuples: validated in pydantic's core, not per object.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Num = int | float
# The filter as applied (analyses.describe_filter): only what narrows the selection.
Filter = dict[str, Num]
# /history's filter as given: names (op, stream), since each run resolves them itself.
FilterArgs = dict[str, Num | str]


class Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class RunRef(Open):
    id: str
    name: str


# ------------------------------------------------------------------ runs


class Device(Open):
    dev: int
    name: str
    model: str
    firmware: str
    rotational: int
    logical_block_size: int
    capacity_bytes: int
    partition_name: str | None
    partition_start_bytes: int | None


class StreamName(Open):
    stream: int
    name: str


class Matching(Open):
    ios: int
    bytes: int
    filter: Filter


class RunSummary(Open):
    """A catalog entry: the run, its devices and streams, what the filter keeps."""

    id: str
    kind: str
    name: str
    host: str | None = None
    kernel: str | None = None
    start_ns: int
    duration_ns: int
    events: int
    bytes: int
    parameters: dict[str, Any]
    tags: dict[str, Any]
    parent_id: str | None = None
    source_path: str | None = None
    source_sha256: str | None = None
    ingested_ns: int
    devices: list[Device]
    streams: list[StreamName]
    matching: Matching | None = None


# ------------------------------------------------------------------ latency


class HistogramScheme(Open):
    kind: str
    sub_buckets_per_power_of_two: int
    exact_below_ns: int
    relative_error_bound: float
    note: str


class Distribution(Open):
    """One histogram's summary; all None (and empty lists) when it holds nothing."""

    count: int
    mean_ns: float | None
    min_ns: int | None
    max_ns: int | None
    percentiles: dict[str, float] | None
    histogram: list[tuple[int, int, int]] = Field(description="[low ns, high ns, count]")
    cdf: list[tuple[int, float]] = Field(description="[latency ns, fraction at or below]")


class GroupDistribution(Open):
    """One op and stream's distribution (the keys first, as the analysis gives them)."""

    op: int
    op_name: str
    stream: int
    stream_name: str
    count: int
    mean_ns: float | None
    min_ns: int | None
    max_ns: int | None
    percentiles: dict[str, float] | None
    histogram: list[tuple[int, int, int]]
    cdf: list[tuple[int, float]]


class MetricLatency(Open):
    all: Distribution
    groups: list[GroupDistribution]


class LatencyResponse(Open):
    run: RunRef
    filter: Filter
    method: str
    histogram_scheme: HistogramScheme
    units: str
    device_time: str
    queue_time: str
    device: MetricLatency
    queue: MetricLatency


# ------------------------------------------------------------------ time


class Point(Open):
    t_s: float
    iops: float
    mb_s: float
    queue_depth: float
    lat_mean_ns: float | None
    p50_ns: Num | None
    p99_ns: Num | None
    max_ns: Num | None


class TimeseriesResponse(Open):
    run: RunRef
    filter: Filter
    interval_s: float
    queue_depth: str
    points: list[Point]


class DeviceHeatmap(Open):
    dev: int
    name: str
    ios: int
    t0_s: float
    t_step_s: float
    offset0: int
    offset_step: int
    time_bins: int
    offset_bins: int
    cells: list[tuple[int, int, int, int]]


class HeatmapResponse(Open):
    run: RunRef
    filter: Filter
    cells: str = Field(description="what each cell's four numbers are")
    devices: list[DeviceHeatmap]


# ------------------------------------------------------------------ verdict


class Check(Open):
    check: str
    value: float | None
    limit: Num
    requests: int
    passed: bool | None = Field(alias="pass")


class DeviceVerdict(Open):
    dev: int
    name: str
    result: str
    checks: list[Check]


class VerdictResponse(Open):
    run: RunRef
    filter: Filter
    mode: str
    thresholds: dict[str, Num]
    result: str
    why: str | None
    checks: list[Check]
    per_device: list[DeviceVerdict]
    per_database: list[dict[str, Any]]


# ------------------------------------------------------------------ compare, history


class Comparison(Open):
    """One candidate against the base (analyses.comparison.compare)."""

    base: RunRef
    candidate: RunRef
    metric: str
    comparable: bool
    workload: str | None = None
    paired_by: str | None = None
    confidence: float
    intervals: str
    bootstrap_resamples: int
    threshold_pct: float
    metrics: list[str]
    histogram_scheme: HistogramScheme
    regression: bool
    groups: list[dict[str, Any]]
    verdict: dict[str, Any] | None = None


class CompareOne(Comparison):
    filter: Filter
    base_verdict: dict[str, Any] | None


class CompareMany(Open):
    base: dict[str, Any]
    filter: Filter
    threshold_pct: float
    confidence: float
    metrics: list[str]
    mode: str
    comparable: bool
    regression: bool
    candidates: list[Comparison]


CompareResponse = CompareOne | CompareMany


class HistoryResponse(Open):
    model: str
    version_from: str
    order: str
    confidence: float
    filter: FilterArgs
    versions: list[dict[str, Any]]
    method: dict[str, Any]
    skipped: list[Any]
    groups: list[dict[str, Any]]


# ------------------------------------------------------------------ tiering


class TieringResponse(Open):
    """The simulation (analyzer/tiering/simulate.py analyze_run); parts present as asked."""

    run: RunRef
    params: dict[str, Any]
    source: str | None = None
    simulator: str | None = None
    capacity_units: int | None = None
    hit_ratio: dict[str, Any]
    timeline: dict[str, Any] | None = None
    skew: dict[str, Any] | None = None
