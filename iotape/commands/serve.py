"""`iotape serve`: the API and dashboard over a store."""

from __future__ import annotations

from typing import Annotated

import typer

from analyzer.server.config import TOKEN_ENV, Settings, check_bind
from iotape.cliopts import Db


def serve(
    db: Db = None,
    host: Annotated[
        str, typer.Option(help=f"Address to listen on; other than loopback needs ${TOKEN_ENV}.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
) -> None:
    """Serve the runs in the store as JSON (OpenAPI at /docs) and as a dashboard at /.

    The store is opened read-only. Set IOTAPE_TOKEN to require
    'Authorization: Bearer <token>' on every API request (needed for --host other
    than loopback).

    Example: iotape serve --db runs.duckdb --port 8000
    """
    import uvicorn

    from analyzer.server.app import create_app

    settings = Settings.from_env(db=db, host=host, port=port, prewarm=True)
    check_bind(settings)
    app = create_app(settings)
    where = f"[{host}]" if ":" in host else host
    typer.echo(f"iotape: serving {app.state.store.url.display()} at http://{where}:{port}/")
    uvicorn.run(app, host=host, port=port, log_level="warning")
