"""GET /runs/{run}/tiering: what an SSD tier or SSD read cache would have done with a run.

api_main registers it like the other routers:

    from analyzer import api_tiering
    for module in (..., api_tiering): app.include_router(module.router, dependencies=auth)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request

from analyzer.server.deps import RunDep
from analyzer.store.interface import Store
from analyzer.tiering import from_store as tiering
from base.errors import IotapeError
from schemas.documents.api import TieringResponse

router = APIRouter(tags=["tiering"])

# The simulation holds a run's reads and writes in memory (about 60 bytes each, with
# its working arrays); larger runs are refused rather than risking the server.
MAX_EVENTS = 20_000_000

Size = Annotated[
    str | None, Query(max_length=32, pattern=r"^\s*[0-9.]+\s*[kKmMgGtT]?(i?[bB])?\s*$")
]


def arrow_store(request: Request) -> Iterator[Store]:
    """The store with Arrow results: its own cursor, or a shared one under the app's lock."""
    state = request.app.state
    with state.store.per_request() as own:
        if own.shared:
            with state.lock:
                yield own
        else:
            yield own


ArrowStore = Annotated[Store, Depends(arrow_store)]


def _size(v: str | None) -> int | None:
    return None if v is None else tiering.parse_size(v)


@router.get(
    "/runs/{run}/tiering",
    summary="Tiering and SSD-cache simulation of a run",
    response_model=TieringResponse,
    response_model_exclude_unset=True,
)
def run_tiering(
    run: RunDep,
    store: ArrowStore,
    policy: Literal["tiering", "lru", "s3fifo", "oracle", "belady"] = "tiering",
    preset: Literal["msa", "compellent", "fastvp", "easytier"] | None = None,
    unit: Size = None,
    capacity: Size = None,
    sweep: Annotated[bool, Query(description="hit ratio for a sweep of tier sizes")] = False,
    stats_interval: Annotated[float | None, Query(gt=0, le=1e7)] = None,
    migrate_interval: Annotated[float | None, Query(gt=0, le=1e7)] = None,
    half_life: Annotated[float | None, Query(gt=0, le=1e9)] = None,
    budget: Size = None,
    headroom: Annotated[float | None, Query(ge=0, lt=1)] = None,
    max_io: Size = None,
    reads_only: bool | None = None,
    fast_run: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    slow_run: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    measured_run: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> TieringResponse:
    """Simulates a fast tier of fixed-size units over the run's reads and writes, with
    one policy: array-style `tiering` (presets for HPE MSA, Dell Compellent, Dell/EMC
    FAST VP, IBM Easy Tier, each with its `source`), an SSD read cache (`lru`,
    `s3fifo`), or an upper bound (`oracle` for tiering, `belady` for caches). Returns
    hit ratios by count and bytes split read/write, a timeline with promotions,
    demotions and migrated bytes as a share of host I/O, the skew curve, optionally a
    sweep of tier sizes, and, given `fast_run` and `slow_run`, projected latency as a
    mixture of their measured per-op, per-size latency distributions; given also
    `measured_run` (a replay split by this placement, `iotape replay split`), its
    measured latency and the projection's error."""
    if run.get("events", 0) > MAX_EVENTS:
        raise HTTPException(
            413, f"run has {run['events']:,} events; the server simulates up to {MAX_EVENTS:,}"
        )
    try:
        p = tiering.params_for(
            policy,
            preset,
            unit=_size(unit),
            capacity=_size(capacity),
            stats_interval_s=stats_interval,
            migrate_interval_s=migrate_interval,
            half_life_s=half_life,
            budget_bytes=_size(budget),
            headroom=headroom,
            max_io_bytes=_size(max_io),
            count_writes=None if reads_only is None else not reads_only,
        )
    except IotapeError as e:
        raise HTTPException(422, str(e)) from None
    try:
        return tiering.analyze_run(store, run["id"], p, sweep, fast_run, slow_run, measured_run)
    except tiering.TieringError as e:
        raise HTTPException(422, str(e)) from None
    except IotapeError as e:  # a named run that does not exist
        raise HTTPException(404, str(e)) from None
