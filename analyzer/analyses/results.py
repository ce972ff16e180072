"""The shapes the analyses hand to their callers (the server's routes, the CLI, the
benchmarks): latency distributions, time series, heat maps and comparisons.

TypedDicts, since the callers serialise them as they are; the server's response
models (analyzer/server/models.py) describe the same keys for its OpenAPI spec.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

# The filter as applied (filters.describe_filter): only what narrows the selection.
FilterDescription = dict[str, int | float]


class Distribution(TypedDict):
    """One histogram's summary; None (and empty lists) when it holds nothing."""

    count: int
    mean_ns: float | None
    min_ns: int | None
    max_ns: int | None
    percentiles: dict[str, float] | None
    histogram: list[list[int]]  # [low ns, high ns, count]
    cdf: list[list[float]]  # [latency ns, fraction at or below]


class MetricLatency(TypedDict):
    all: Distribution
    # A Distribution with its op, op_name, stream and stream_name first.
    groups: list[dict[str, Any]]


class LatencyResult(TypedDict):
    method: str
    histogram_scheme: dict[str, Any]
    units: str
    device_time: str
    queue_time: str
    device: MetricLatency
    queue: MetricLatency


class Point(TypedDict):
    t_s: float
    iops: float
    mb_s: float
    queue_depth: float
    lat_mean_ns: float | None
    p50_ns: int | float | None
    p99_ns: int | float | None
    max_ns: int | float | None


class TimeseriesResult(TypedDict):
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


class HeatmapResult(TypedDict):
    cells: str
    devices: list[DeviceHeatmap]


class RunName(TypedDict):
    id: str
    name: str


class Comparison(TypedDict):
    """One candidate against the base (comparison.compare)."""

    base: RunName
    candidate: RunName
    metric: str
    comparable: bool
    workload: str
    paired_by: str
    confidence: float
    intervals: str
    bootstrap_resamples: int
    threshold_pct: float
    metrics: list[str]
    histogram_scheme: dict[str, Any]
    regression: bool
    groups: list[dict[str, Any]]
    # The candidate's Jetstress verdict, where compare_many adds it.
    verdict: NotRequired[dict[str, Any]]


class ComparisonSet(TypedDict):
    """The base against each candidate (comparison.compare_many)."""

    base: dict[str, Any]
    filter: FilterDescription
    threshold_pct: float
    confidence: float
    metrics: list[str]
    mode: str
    comparable: bool
    regression: bool
    candidates: list[Comparison]
