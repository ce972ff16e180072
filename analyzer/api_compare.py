"""GET /compare: did the candidate run get slower than the base, beyond the noise?"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from iotape.analyzer import analyses
from iotape.analyzer.api_deps import FilterDep, StoreDep, event_filter
from iotape.errors import IotapeError

router = APIRouter(tags=["compare"])
RunRef = Annotated[str, Query(min_length=1, max_length=200, description="run id or name")]


@router.get("/compare", summary="Base run vs candidate run")
def compare(
    base: RunRef,
    candidate: RunRef,
    store: StoreDep,
    filters: FilterDep,
    threshold_pct: Annotated[
        float, Query(ge=0, le=1000, description="smallest change worth a flag")
    ] = 5.0,
    confidence: Annotated[float, Query(ge=0.5, le=0.999)] = 0.95,
) -> dict:
    """Per device model (and firmware), op and stream: candidate minus base device-time
    percentiles with bootstrap confidence intervals. `regression` is true where the
    candidate is slower, the interval excludes zero and the change exceeds
    `threshold_pct`. The filters apply to both runs."""
    runs = []
    for ref in (base, candidate):
        try:
            runs.append(analyses.find_run(store, ref))
        except IotapeError as e:
            raise HTTPException(404, str(e)) from None
    fb, fc = (event_filter(store, r, filters) for r in runs)
    return analyses.compare(store, runs[0], runs[1], fb, fc, threshold_pct, confidence)
