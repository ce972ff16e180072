"""The FastAPI app: the routers, the dashboard at /, and errors as JSON messages.

from analyzer.server.app import create_app
app = create_app(Settings(db="runs.duckdb"))
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from analyzer.analyses import core as analyses
from analyzer.analyses.filters import BadInput
from analyzer.server.config import Settings
from analyzer.server.deps import QueryLimit, guarded, require_token
from analyzer.server.routes import compare as api_compare
from analyzer.server.routes import history as api_history
from analyzer.server.routes import latency as api_latency
from analyzer.server.routes import runs as api_runs
from analyzer.server.routes import tiering as api_tiering
from analyzer.server.routes import timeseries as api_timeseries
from analyzer.server.routes import verdict as api_verdict
from analyzer.store.interface import Store, StoreError
from analyzer.store.opener import open_read_only

STATIC = Path(__file__).with_name("static")
log = logging.getLogger("iotape.serve")


def create_app(settings: Settings | None = None, store: Store | None = None) -> FastAPI:
    """The app over the store at `settings.db`, opened read-only now (so a bad URL fails
    before the server listens), or over `store` as given."""
    settings = settings or Settings.from_env()
    store = store or open_read_only(settings.db)
    # The engine's own limit where it has one; else a timer per query (deps.Guarded).
    store.limit_query_time(settings.query_timeout_s)

    stop = threading.Event()

    def warm() -> None:
        try:
            with guarded(store, settings, app.state.lock) as g:
                app.state.prewarmed = analyses.prewarm(g, stop)
        except StoreError as e:  # a query cut short; requests build what they need
            log.warning("prewarm stopped: %s", e)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker = threading.Thread(target=warm, name="iotape-prewarm", daemon=True)
        if settings.prewarm:
            worker.start()
        app.state.prewarm_thread = worker
        yield
        # The worker's cursor must be done before its connection closes.
        stop.set()
        if worker.is_alive():
            worker.join()
        store.close()

    app = FastAPI(
        title="iotape",
        summary="Block I/O runs: latency distributions, time series, heat maps, "
        "Jetstress verdicts, run-vs-run comparisons and firmware histories.",
        version="1",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.store = store
    app.state.lock = threading.Lock()
    auth = [Depends(require_token)]
    for module in (
        api_runs,
        api_latency,
        api_timeseries,
        api_verdict,
        api_compare,
        api_history,
        api_tiering,
    ):
        app.include_router(module.router, dependencies=auth)
    _errors(app)
    # The dashboard's files hold no data: they are served without the token, and the
    # page sends the token with its API calls.
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    return app


def _errors(app: FastAPI) -> None:
    """Every error is a status and a one-line `detail`; never a stack trace."""

    def message(status: int):
        async def handler(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse({"detail": str(exc)}, status_code=status)

        return handler

    app.add_exception_handler(BadInput, message(422))
    app.add_exception_handler(QueryLimit, message(503))
    app.add_exception_handler(StoreError, message(503))

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)  # registered for it alone
        # FastAPI's own list of problems, plus one line a person can read.
        errs = exc.errors()
        lines = [f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in errs]
        return JSONResponse(
            {"detail": "; ".join(lines), "errors": _jsonable(errs)}, status_code=422
        )

    app.add_exception_handler(RequestValidationError, validation)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return JSONResponse({"detail": "internal error; the server log has it"}, 500)

    app.add_exception_handler(Exception, unexpected)


def _jsonable(errs: Sequence[Any]) -> list[dict]:
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errs]
