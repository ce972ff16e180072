"""GET /compare: did candidate runs get slower than the base, beyond the noise?"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query

from analyzer.analyses import comparison
from analyzer.server.deps import FilterDep, StoreDep
from base.errors import IotapeError
from schemas.documents.api import CompareOne, CompareResponse

router = APIRouter(tags=["compare"])
RunRef = Annotated[str, Query(min_length=1, max_length=200, description="run id or name")]


@router.get(
    "/compare",
    summary="Base run vs one or more candidate runs",
    response_model=CompareResponse,
    response_model_exclude_unset=True,
)
def compare(
    base: RunRef,
    candidate: Annotated[
        list[str],
        Query(min_length=1, max_length=32, description="run id or name; repeat for several"),
    ],
    store: StoreDep,
    filters: FilterDep,
    threshold_pct: Annotated[
        float, Query(ge=0, le=1000, description="smallest relative change worth a flag")
    ] = 5.0,
    min_effect_ns: Annotated[
        float,
        Query(
            ge=0,
            le=comparison.MAX_MIN_EFFECT_NS,
            description="smallest latency change worth a flag, in ns",
        ),
    ] = comparison.MIN_EFFECT_NS,
    min_effect_iops: Annotated[
        float,
        Query(
            ge=0,
            le=comparison.MAX_MIN_EFFECT_IOPS,
            description="smallest IOPS change worth a flag, in IO/s",
        ),
    ] = comparison.MIN_EFFECT_IOPS,
    confidence: Annotated[float, Query(ge=0.5, le=0.999)] = 0.95,
    metric: Annotated[
        str,
        Query(
            max_length=200,
            description=f"the metrics that flag, comma-separated: {', '.join(comparison.METRICS)}",
        ),
    ] = ",".join(comparison.DEFAULT_METRICS),
    mode: Annotated[
        Literal["performance", "stress"], Query(description="thresholds of each run's verdict")
    ] = "performance",
) -> CompareResponse:
    """Per device model (and firmware), op and stream: candidate minus base device-time
    percentiles, mean and IOPS with confidence intervals (bootstrap; Poisson for IOPS).
    `regression` is true where a metric named in `metric` got worse, its interval
    excludes zero and the change exceeds both `threshold_pct` and the absolute minimum
    (`min_effect_ns` for latency, `min_effect_iops` for IOPS); each metric's
    `decided_by` names which of the three bars decided, `min_change` its height. Runs
    of different workloads (another source trace, or the same one scaled differently)
    are never flagged: `comparable` is false and `workload` says why. The filters
    apply to every run.

    One candidate: that comparison, as this endpoint always answered. Several
    (`candidate=A&candidate=B`): `candidates` holds one comparison per candidate,
    each with its run's Jetstress verdict."""
    for ref in (base, *candidate):
        if len(ref) > 200 or not ref:
            raise HTTPException(422, f"candidate {ref[:40]!r}: 1 to 200 characters")
    metrics = comparison.parse_metrics(metric)
    try:
        r = comparison.compare_many(
            store, base, candidate, filters, threshold_pct, confidence, metrics, mode,
            min_effect_ns=min_effect_ns, min_effect_iops=min_effect_iops,
        )  # fmt: skip
    except comparison.BadInput:
        raise
    except IotapeError as e:
        raise HTTPException(404, str(e)) from None
    if len(candidate) == 1:
        one: CompareOne = {
            **r["candidates"][0],
            "filter": r["filter"],
            "base_verdict": r["base"]["verdict"],
        }
        return one
    return r
