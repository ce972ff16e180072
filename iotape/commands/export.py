"""`iotape export`: a run's events to Parquet."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from analyzer.store.export import export_run
from analyzer.store.opener import opened
from base.progress import progress as bar
from iotape.cliopts import Db, RunRef

err = Console(stderr=True)


def export(
    run: RunRef,
    out: Annotated[Path, typer.Option("-o", "--output", help="Output file (.parquet).")],
    db: Db = None,
) -> None:
    """Write a run's events to Parquet: the trace record's columns and the trace header.

    Example: iotape export nightly-42 -o nightly-42.parquet
    """
    with opened(db, create=False) as store, bar("exporting", err, "items") as progress:
        r = export_run(store, run, out, progress)
    print(f"{r['path']}: run {r['run_id']} ({r['name']}): {r['rows']:,} events")
