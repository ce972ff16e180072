"""`iotape ingest`: traces, workload reports and replay job directories into the store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from iotape import ingest_command
from iotape.cliopts import AsJson, Db


def ingest(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Trace files (.iot), Parquet from `iotape trace convert`, workload reports "
            "(`iotape workload run --report R.json`) or replay job directories "
            "(`iotape replay plan`, after `iotape replay run`)."
        ),
    ],
    db: Db = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Name of the run (one file only).")
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="KEY=VALUE tag for the run; repeat.")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Ingest files into the store, one run each; a file already there is skipped.

    A replay job directory becomes a run whose parent is the trace it replays,
    when that trace is in the store: ingest the trace first.

    Example: iotape ingest run1.iot run2.iot --tag array=A9000 --db chdb:///data/iotape
    """
    ingest_command.run(files, db, name, tag, as_json)
