"""The DuckDB store's events: immutable Parquet files, one directory per run, beside the database.

A store `iotape.duckdb` keeps its events under `iotape.duckdb.events/`, one
directory per run, `run_id=<id>/events-<n>.parquet` (hive layout: the directory
names the run, so a query for one run opens that run's files only). Each connection sees
them through a temporary view `events` with the columns of the `events` table, so
every query reads them as it read the table. Writing Parquet straight from the
trace's columns is several times faster than DuckDB's insert into its own table,
and reading it is as fast (docs/benchmarks.md#store).

Visibility stays the catalog's: a run's file is renamed into place before the
transaction that makes the run `ready` commits, so a run that is visible always
has its events, and a file whose run never committed (a killed ingest) is
visible to no query that goes through the catalog; the retry writes it again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import schemas
from analyzer.store import event_histograms
from analyzer.store.event_batches import as_ingest_batch, ingest_schema

FILE = "events.parquet"
# A run id is 12 hex digits, so this name is never a run's: an empty file here
# gives the view its columns while the store holds no events yet.
EMPTY_RUN = "none"
# Rows per Parquet row group: DuckDB scans row groups in parallel, and half a
# million rows (~35 MB of columns) keeps the writer's memory flat.
ROW_GROUP_ROWS = 1 << 19
COMPRESSION = "lz4"
# Files per run written at once: two keep both cores of a small machine busy
# (one converts the trace, the writers share the rest), measured in bench/store.py.
WRITERS = 2


def parts_dir(db_path: str) -> Path:
    return Path(f"{db_path}.events")


def run_dir(parts: Path, run_id: str) -> Path:
    return parts / f"run_id={run_id}"


def prepare(parts: Path) -> None:
    """Make the directory and its empty file, so the view has its columns."""
    empty = run_dir(parts, EMPTY_RUN) / FILE
    if empty.exists():
        return
    empty.parent.mkdir(parents=True, exist_ok=True)
    tmp = empty.with_name(f".{FILE}.tmp")
    pq.write_table(ingest_schema().empty_table(), tmp)
    os.replace(tmp, empty)


def ready(parts: Path) -> bool:
    return (run_dir(parts, EMPTY_RUN) / FILE).exists()


def view_sql(parts: Path) -> str:
    """The temporary view `events`: run_id from the directory, then the record's columns."""
    pattern = str(parts / "run_id=*" / "*.parquet").replace("'", "''")
    cols = ", ".join(f'"{c}"' for c in schemas.column_names())
    # hive_types: a run id of 12 decimal digits must stay a string.
    return (
        f'CREATE OR REPLACE TEMP VIEW "events" AS SELECT "run_id", {cols} '
        f"FROM read_parquet('{pattern}', hive_partitioning = true, "
        "hive_types = {'run_id': VARCHAR})"
    )


def write(
    parts: Path, run_id: str, batches: Iterable[pa.RecordBatch]
) -> tuple[int, list[Path], pa.Table | None]:
    """Write a run's events as its files (replacing what a dead ingest left); returns
    the rows, the files and the run's latency histograms (event_histograms.py; None
    for latencies out of their range). Row
    groups go in turn to WRITERS files, each encoded, compressed and binned on a
    thread of its own (Arrow and numpy let go of the GIL), so the writing keeps up
    with the conversion. Each file is synced before it gets its name."""
    d = run_dir(parts, run_id)
    if d.exists():
        remove(parts, run_id)
    d.mkdir(parents=True)
    schema = ingest_schema()
    tmps = [d / f".events-{i}.parquet.{os.getpid()}.tmp" for i in range(WRITERS)]
    writers: list[pq.ParquetWriter | None] = [None] * WRITERS
    pools = [ThreadPoolExecutor(1, thread_name_prefix="iotape-events-write") for _ in tmps]
    last: list[Future | None] = [None] * WRITERS
    rows = groups = 0
    hists: list[pa.Table] = []

    def put(i: int, t: pa.Table) -> None:
        if writers[i] is None:
            writers[i] = pq.ParquetWriter(
                tmps[i],
                schema,
                compression=COMPRESSION,
                # Dictionary pages only where values repeat: the names. Numbers go
                # plain, which writes several times faster and reads as fast.
                use_dictionary=["comm"],
                # Statistics where a filter can skip row groups: the time range.
                write_statistics=["ts_complete_ns"],
            )
        writers[i].write_table(t, row_group_size=t.num_rows)
        if t.num_rows:
            hists.append(event_histograms.partial(t))

    def submit(t: pa.Table) -> None:
        nonlocal groups
        i = groups % WRITERS
        if last[i] is not None:
            last[i].result()  # one row group in flight per file: memory stays flat
        last[i] = pools[i].submit(put, i, t)
        groups += 1

    try:
        pending: list[pa.RecordBatch] = []
        n = 0
        for b in batches:
            if b.schema != schema:
                b = as_ingest_batch(b)
            pending.append(b)
            n += b.num_rows
            if n >= ROW_GROUP_ROWS:
                submit(pa.Table.from_batches(pending))
                rows += n
                pending, n = [], 0
        if pending or not groups:
            submit(pa.Table.from_batches(pending, schema=schema))
            rows += n
        for f in last:
            if f is not None:
                f.result()
        out = []
        for i, w in enumerate(writers):
            if w is None:
                continue
            w.close()
            writers[i] = None
            with open(tmps[i], "rb") as f:
                os.fsync(f.fileno())
            out.append(d / f"events-{i}.parquet")
            os.replace(tmps[i], out[-1])
        _fsync_dir(d)
    except BaseException:
        for f in last:
            if f is not None:
                with contextlib.suppress(BaseException):
                    f.result()
        for w in writers:
            if w is not None:
                with contextlib.suppress(Exception):
                    w.close()
        for t in tmps:
            with contextlib.suppress(FileNotFoundError):
                t.unlink()
        with contextlib.suppress(OSError):
            d.rmdir()
        raise
    finally:
        for pool in pools:
            pool.shutdown()
    return rows, out, event_histograms.merged(hists, run_id)


def remove(parts: Path, run_id: str) -> None:
    shutil.rmtree(run_dir(parts, run_id), ignore_errors=True)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
