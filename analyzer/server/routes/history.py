"""GET /history: a device model across firmware versions, with change points."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from analyzer.analyses import comparison
from analyzer.analyses import history as hist
from analyzer.analyses.filters import BadInput
from analyzer.server.deps import FilterDep, StoreDep
from schemas.documents.api import History

router = APIRouter(tags=["history"])


@router.get(
    "/history",
    summary="A device model across firmware versions",
    response_model=History,
    response_model_exclude_unset=True,
)
def history(
    model: Annotated[str, Query(min_length=1, max_length=200, description="device model")],
    store: StoreDep,
    filters: FilterDep,
    tag: Annotated[
        str | None,
        Query(max_length=100, description="take the version from this tag, not the firmware"),
    ] = None,
    order: Annotated[
        Literal["version", "time"], Query(description="natural version order or first run")
    ] = "version",
    metric: Annotated[
        str,
        Query(max_length=200, description="metrics to find change points in, comma-separated"),
    ] = ",".join(hist.DEFAULT_CHANGE_METRICS),
) -> History:
    """Per op and stream, for each version (the devices' firmware, or the value of
    `tag`): device-time percentiles, mean and IOPS with bootstrap confidence intervals,
    repeated runs of a version pooled; and the change points E-Divisive finds in the
    per-run values, each naming the first version after the change. Only the model's
    devices count; the `device` filter does not apply."""
    if filters.device is not None:
        raise BadInput("device: /history takes the model's devices; leave device out")
    return hist.history(store, model, tag, filters, order,
                        change_metrics=comparison.parse_metrics(metric))  # fmt: skip
