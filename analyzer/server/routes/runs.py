"""GET /runs and /runs/{run}: the catalog, with devices (model, firmware) and streams."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from analyzer.analyses import core as analyses
from analyzer.server.deps import FilterDep, RunDep, StoreDep, event_filter
from analyzer.store import catalog
from schemas.documents.api import RunSummary

router = APIRouter(tags=["runs"])


@router.get(
    "/runs",
    summary="The runs in the store",
    response_model=list[RunSummary],
    response_model_exclude_unset=True,
)
def list_runs(store: StoreDep, filters: FilterDep) -> list[RunSummary]:
    """Every visible run, oldest first, with its devices and streams. With a filter, each
    run also says how many requests match it; a `device` filter lists only runs that
    have that device."""
    out = []
    for run in catalog.all_runs(store):
        try:
            f = analyses.resolve_filter(store, run["id"], filters)
        except analyses.BadInput as e:
            if filters.device is not None and str(e).startswith("device"):
                continue
            raise HTTPException(422, str(e)) from None
        out.append(analyses.run_summary(store, run, f))
    return out


@router.get(
    "/runs/{run}",
    summary="One run",
    response_model=RunSummary,
    response_model_exclude_unset=True,
)
def get_run(run: RunDep, store: StoreDep, filters: FilterDep) -> RunSummary:
    """The run's catalog entry, devices and streams; `matching` counts what the filter keeps."""
    return analyses.run_summary(store, run, event_filter(store, run, filters))
