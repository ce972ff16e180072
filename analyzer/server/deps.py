"""Dependencies of the routes: the store (one DuckDB cursor per request), the run named
in the path, the filters every endpoint takes, and the bearer token."""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, cast

import pyarrow as pa
from fastapi import Depends, HTTPException, Query, Request

from analyzer.analyses import core as analyses
from analyzer.analyses.filters import FilterArgs
from analyzer.server.config import Settings
from analyzer.store.interface import Store, StoreError, StoreURL
from base.errors import IotapeError


class QueryLimit(StoreError):
    """A query ran past the time limit or returned more rows than the cap."""


class Guarded:
    """The store as the routes see it (a `Reader`): reads only, with a time limit and a
    row cap, on a store for this request's thread (`Store.per_request`).

    A store of its own (DuckDB's cursor) is interrupted by a timer. A shared one (chDB
    runs one query at a time) is called under the app's lock; the engine stops a long
    query itself (`Store.limit_query_time`, set at start).
    """

    def __init__(self, store: Store, settings: Settings, lock: threading.Lock) -> None:
        self.dialect = store.dialect
        self.url: StoreURL = store.url
        self.has_histograms = store.has_histograms
        self._settings = settings
        self._lock = lock
        self._store = store

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
        if self._store.shared:
            with self._lock:
                rows = self._store.rows(sql, params)
        else:
            rows = cast(list[tuple], self._timed(sql, params))
        if len(rows) > self._settings.row_cap:
            raise QueryLimit(
                f"a query returned over {self._settings.row_cap:,} rows; narrow the filters"
            )
        return rows

    def arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        """A read whose rows the analyses reduce in this process (exact_select's
        candidates): the time limit holds, the row cap (on answers) does not."""
        if self._store.shared:
            with self._lock:
                return self._store.arrow(sql, params)
        return self._timed(sql, params, self._store.arrow)

    def _timed(
        self,
        sql: str,
        params: dict[str, Any] | None,
        read: Callable[[str, dict[str, Any] | None], Any] | None = None,
    ) -> Any:
        limit = self._settings.query_timeout_s
        fired = threading.Event()

        def stop() -> None:
            fired.set()
            self._store.interrupt()

        timer = threading.Timer(limit, stop)
        timer.start()
        try:
            return (read or self._store.rows)(sql, params)
        except StoreError:
            if fired.is_set():
                raise QueryLimit(f"a query ran past {limit:g} s; narrow the filters") from None
            raise
        finally:
            timer.cancel()


@contextmanager
def guarded(store: Store, settings: Settings, lock: threading.Lock) -> Iterator[Guarded]:
    """The guarded store for one thread, released after."""
    with store.per_request() as own:
        yield Guarded(own, settings, lock)


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_store(request: Request) -> Iterator[Guarded]:
    state = request.app.state
    with guarded(state.store, state.settings, state.lock) as g:
        yield g


def require_token(request: Request) -> None:
    token = request.app.state.settings.token
    if not token:
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip(), token):
        raise HTTPException(
            401, "a bearer token is required: Authorization: Bearer <IOTAPE_TOKEN>",
            headers={"WWW-Authenticate": "Bearer"},
        )  # fmt: skip


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Guarded, Depends(get_store)]


def get_run(run: str, store: StoreDep) -> dict:
    """The run named in the path: id, unique id prefix, or name."""
    try:
        return analyses.find_run(store, run)
    except IotapeError as e:
        raise HTTPException(404, str(e)) from None


RunDep = Annotated[dict, Depends(get_run)]

U32 = 2**32 - 1
MAX_S = 10_000_000.0  # seconds: about 115 days, far past any trace


def get_filters(
    op: Annotated[
        str | None, Query(max_length=32, description="read, write, flush, … or a number")
    ] = None,
    stream: Annotated[
        str | None,
        Query(max_length=64, description="db-read, log-write, a label of the run, or a number"),
    ] = None,
    device: Annotated[
        str | None, Query(max_length=64, description="device name (sda, nvme0n1) or MAJ:MIN")
    ] = None,
    min_bytes: Annotated[int | None, Query(ge=0, le=U32, description="smallest request")] = None,
    max_bytes: Annotated[int | None, Query(ge=0, le=U32, description="largest request")] = None,
    start: Annotated[
        float | None, Query(ge=0, le=MAX_S, description="from this many seconds into the run")
    ] = None,
    end: Annotated[
        float | None, Query(ge=0, le=MAX_S, description="up to this many seconds into the run")
    ] = None,
) -> FilterArgs:
    return FilterArgs(op, stream, device, min_bytes, max_bytes, start, end)


FilterDep = Annotated[FilterArgs, Depends(get_filters)]


def event_filter(store: Guarded, run: dict, args: FilterArgs) -> analyses.EventFilter:
    """The filters resolved for one run; a name this run lacks is a 422."""
    try:
        return analyses.resolve_filter(store, run["id"], args)
    except analyses.BadInput as e:
        raise HTTPException(422, str(e)) from None
