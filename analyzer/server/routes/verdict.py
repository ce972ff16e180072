"""GET /runs/{run}/verdict: Jetstress-style pass or fail."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from analyzer.analyses import core as analyses
from analyzer.analyses import verdict as jetstress
from analyzer.server.deps import FilterDep, RunDep, StoreDep, event_filter
from schemas.documents.api import VerdictResponse

router = APIRouter(tags=["verdict"])


@router.get(
    "/runs/{run}/verdict",
    summary="Jetstress-style verdict",
    response_model=VerdictResponse,
    response_model_exclude_unset=True,
)
def verdict(
    run: RunDep,
    store: StoreDep,
    filters: FilterDep,
    mode: Annotated[
        Literal["performance", "stress"], Query(description="which thresholds apply")
    ] = "performance",
) -> VerdictResponse:
    """Database read and log write latency (average and maximum, ms) of the requests
    labelled db-read and log-write, against the Jetstress thresholds: overall, per
    device, and the workload engine's own per-database report where the run has one.
    `result` is `unknown` when nothing is labelled."""
    f = event_filter(store, run, filters)
    return {
        "run": {"id": run["id"], "name": run["name"]},
        "filter": analyses.describe_filter(f),
        **jetstress.verdict(store, run["id"], f, mode),
    }
