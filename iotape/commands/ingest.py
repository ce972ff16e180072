"""`iotape ingest`: traces, workload reports and replay job directories into the store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from base.errors import IotapeError
from base.progress import progress as bar
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
    # numpy's OpenBLAS starts a thread per core at import, which spin for ~0.06 s of
    # CPU (on 2 vCPUs, beside the ingest's own threads); ingest does no linear
    # algebra. Before the first import of numpy, and the user's setting kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if name is not None and len(files) > 1:
        raise IotapeError("--name names one run: give one file with it")
    # The store's modules only when ingesting: `iotape ingest --help` needs none of
    # them (0.2 s of imports).
    from analyzer.store import catalog
    from analyzer.store.ingest import ingest as ingest_file
    from analyzer.store.ingest import open_early
    from analyzer.store.opener import opening
    from base.arrow_probe import skip_pandas

    tags = catalog.parse_tags(tag or [])
    skip_pandas()  # ingest builds Arrow arrays and never uses pandas
    results = []
    # The first file before the store: a trace converts its first batches on a
    # helper thread while DuckDB is imported and the store opened (~40 ms earlier
    # than with the store's open begun first, whose imports held the GIL the
    # conversion waited for); an input that cannot be read makes no store, and
    # one that breaks half-way leaves none (opener.opening removes a new store
    # that nothing went in).
    early = open_early(files[0]) if files else None
    try:
        with opening(db) as opened_store:
            store = opened_store()
            for i, f in enumerate(files):
                with bar(f"ingesting {f.name}", None, "items") as progress:
                    r = ingest_file(
                        store, f, name=name, tags=tags, progress=progress,
                        early=early if i == 0 else None,
                    )  # fmt: skip
                results.append(r.to_dict())
                if not as_json:
                    rate = ""
                    if not r.skipped and r.events and r.seconds > 0:
                        rate = f", {r.events / r.seconds:,.0f} events/s"
                    print(f"{r.message}{rate}")
    finally:
        if early is not None:
            early.close()
    if as_json:
        from iotape.cliutil import print_json

        print_json(results)
