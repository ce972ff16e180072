"""`iotape db init`: the store's tables and views, made or printed."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from analyzer.store.interface import parse_url
from analyzer.store.opener import init_schema, opened
from base.errors import IotapeError
from iotape.cliopts import Db
from schemas.tables import ddl

err = Console(stderr=True)

db_app = typer.Typer(
    help="Create the store's tables (DuckDB, ClickHouse, or a ClickHouse cluster).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@db_app.command("init")
def db_init(
    db: Db = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="ClickHouse cluster (remote_servers): ReplicatedMergeTree tables "
            "ON CLUSTER plus Distributed tables with the usual names.",
            show_default=False,
        ),
    ] = None,
    print_only: Annotated[
        bool, typer.Option("--print", help="Print the DDL instead of running it.")
    ] = False,
) -> None:
    """Create the store's tables and views (if missing), or print their DDL.

    Example: iotape db init --db clickhouse://iotape@ch1:8123/iotape --cluster lab
    """
    if print_only:
        dialect = "duckdb"
        if cluster is not None or (db is not None and parse_url(db).scheme != "duckdb"):
            dialect = "clickhouse"
        print(";\n\n".join(_ddl(dialect, cluster)) + ";")
        return
    if cluster is not None:
        _ddl("clickhouse", cluster)  # a bad cluster name fails before connecting
    with opened(db, schema=False) as store:
        if cluster is not None and store.url.scheme != "clickhouse":
            raise IotapeError("--cluster needs a ClickHouse server: --db clickhouse://…")
        statements = init_schema(store, cluster)
    print(f"{store.url.display()}: {len(statements)} tables and views ready")


def _ddl(dialect: str, cluster: str | None) -> list[str]:
    try:
        return ddl(dialect, cluster)
    except ValueError as e:
        raise IotapeError(f"--cluster: {e}") from None
