"""The DuckDB store's events: one immutable Parquet file per run, beside the database.

A store `iotape.duckdb` keeps its events under `iotape.duckdb.events/`, one
directory per run, `run_id=<id>/events.parquet` (hive layout: the directory names
the run, so a query for one run opens that run's file only). Each connection sees
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
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from iotape import schemas
from iotape.analyzer.event_batches import as_ingest_batch, ingest_schema

FILE = "events.parquet"
# A run id is 12 hex digits, so this name is never a run's: an empty file here
# gives the view its columns while the store holds no events yet.
EMPTY_RUN = "none"
# Rows per Parquet row group: DuckDB scans row groups in parallel, and a million
# rows (~70 MB of columns) keeps the writer's memory flat.
ROW_GROUP_ROWS = 1 << 20
COMPRESSION = "lz4"


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
    pattern = str(parts / "run_id=*" / FILE).replace("'", "''")
    cols = ", ".join(f'"{c}"' for c in schemas.column_names())
    # hive_types: a run id of 12 decimal digits must stay a string.
    return (
        f'CREATE OR REPLACE TEMP VIEW "events" AS SELECT "run_id", {cols} '
        f"FROM read_parquet('{pattern}', hive_partitioning = true, "
        "hive_types = {'run_id': VARCHAR})"
    )


def write(parts: Path, run_id: str, batches: Iterable[pa.RecordBatch]) -> tuple[int, Path]:
    """Write a run's events as its file (replacing what a dead ingest left); returns
    the rows and the file. The file is synced before it gets its name."""
    d = run_dir(parts, run_id)
    d.mkdir(parents=True, exist_ok=True)
    final = d / FILE
    tmp = d / f".{FILE}.{os.getpid()}.tmp"
    schema = ingest_schema()
    rows = 0
    try:
        with pq.ParquetWriter(
            tmp,
            schema,
            compression=COMPRESSION,
            # Dictionary pages only where values repeat: the names. Numbers go plain,
            # which writes several times faster and reads as fast.
            use_dictionary=["comm"],
            write_statistics=True,
        ) as w:
            pending: list[pa.RecordBatch] = []
            n = 0
            for b in batches:
                if b.schema != schema:
                    b = as_ingest_batch(b)
                pending.append(b)
                n += b.num_rows
                if n >= ROW_GROUP_ROWS:
                    w.write_table(pa.Table.from_batches(pending), row_group_size=n)
                    rows += n
                    pending, n = [], 0
            if pending:
                w.write_table(pa.Table.from_batches(pending), row_group_size=n)
                rows += n
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(d)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return rows, final


def remove(parts: Path, run_id: str) -> None:
    shutil.rmtree(run_dir(parts, run_id), ignore_errors=True)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
