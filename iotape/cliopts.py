"""Options every command group shares, declared once: `--json`, `--force`, `--db`,
`--destroy-data-on`."""

from __future__ import annotations

from typing import Annotated

import typer

from analyzer.store.interface import ENV as DB_ENV

AsJson = Annotated[
    bool, typer.Option("--json", help="Print JSON for scripts instead of text for people.")
]
Force = Annotated[
    bool, typer.Option("--force", help="Replace what an earlier run left at the output.")
]
Db = Annotated[
    str | None,
    typer.Option(
        "--db",
        help=f"Store URL: a DuckDB file, duckdb:///PATH, chdb:///PATH or "
        f"clickhouse://USER@HOST:8123/DB. Default: ${DB_ENV}, else "
        "~/.local/share/iotape/iotape.duckdb.",
        show_default=False,
    ),
]
RunRef = Annotated[
    str, typer.Argument(help="The run's id (or a unique prefix of it) or its name.", metavar="RUN")
]
DestroyDataOn = Annotated[
    list[str] | None,
    typer.Option(
        "--destroy-data-on",
        metavar="DEV",
        help="Write to the block device DEV even though it is mounted, in use, on the root "
        "disk or holds a filesystem or partition table: its data is destroyed. Once per "
        "device (HOST:DEV for a device on a replay host).",
    ),
]
