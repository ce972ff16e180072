"""GET /runs/{run}/latency: percentiles, histogram and CDF of device and queue time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from analyzer.analyses import core as analyses
from analyzer.server.deps import FilterDep, RunDep, StoreDep, event_filter
from schemas.documents.api import LatencyResponse

router = APIRouter(tags=["latency"])


@router.get(
    "/runs/{run}/latency",
    summary="Latency distribution of a run",
    response_model=LatencyResponse,
    response_model_exclude_unset=True,
)
def latency(
    run: RunDep,
    store: StoreDep,
    filters: FilterDep,
    exact: Annotated[
        bool, Query(description="exact order statistics instead of histogram percentiles")
    ] = False,
    cdf_points: Annotated[int, Query(ge=2, le=5000, description="CDF points per group")] = 200,
) -> LatencyResponse:
    """Device time (complete - issue) and queue time (issue - queue), overall and per op
    and stream: count, mean, min, max, p50/p90/p99/p99.9/p99.99, a log-linear histogram
    (64 sub-buckets per power of two; its error bound is in `histogram_scheme`) and CDF
    points. Percentiles come from the histogram unless `exact=true`."""
    f = event_filter(store, run, filters)
    return {
        "run": {"id": run["id"], "name": run["name"]},
        "filter": analyses.describe_filter(f),
        **analyses.latency(store, run["id"], f, exact=exact, cdf_points=cdf_points),
    }
