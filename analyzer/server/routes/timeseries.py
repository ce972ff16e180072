"""GET /runs/{run}/timeseries and /runs/{run}/heatmap: a run over time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from analyzer.analyses import core as analyses
from analyzer.server.deps import MAX_S, FilterDep, RunDep, StoreDep, event_filter
from schemas.documents.api import HeatmapResponse, TimeseriesResponse

router = APIRouter(tags=["time"])


@router.get(
    "/runs/{run}/timeseries",
    summary="IOPS, MB/s, queue depth and latency over time",
    response_model=TimeseriesResponse,
    response_model_exclude_unset=True,
)
def timeseries(
    run: RunDep,
    store: StoreDep,
    filters: FilterDep,
    interval: Annotated[
        float | None,
        Query(gt=0, le=MAX_S, description="seconds per point; default about 200 points"),
    ] = None,
) -> TimeseriesResponse:
    """Per interval of completion time: IOPS, MB/s, mean queue depth at the device
    (Little's law) and device latency mean, p50, p99 and max (exact per interval)."""
    f = event_filter(store, run, filters)
    try:
        body = analyses.timeseries(store, run, f, interval)
    except analyses.BadInput as e:
        raise HTTPException(422, str(e)) from None
    return {"run": {"id": run["id"], "name": run["name"]}, "filter": analyses.describe_filter(f),
            **body}  # fmt: skip


@router.get(
    "/runs/{run}/heatmap",
    summary="Accesses over offset and time",
    response_model=HeatmapResponse,
    response_model_exclude_unset=True,
)
def heatmap(
    run: RunDep,
    store: StoreDep,
    filters: FilterDep,
    time_bins: Annotated[int, Query(ge=1, le=500)] = 100,
    offset_bins: Annotated[int, Query(ge=1, le=256)] = 64,
) -> HeatmapResponse:
    """Requests and bytes per (time bin, offset bin), one grid per device, over the range
    of times and offsets the selection covers: hot regions show as dense cells."""
    f = event_filter(store, run, filters)
    return {
        "run": {"id": run["id"], "name": run["name"]},
        "filter": analyses.describe_filter(f),
        **analyses.heatmap(store, run["id"], f, time_bins, offset_bins),
    }
