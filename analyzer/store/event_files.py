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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from analyzer.store import event_histograms
from analyzer.store.event_batches import as_ingest_batch, ingest_schema
from analyzer.store.queries import duckdb_sql

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
# Row groups' histograms are folded into one every this many, so that what a run
# holds until its end does not grow with its length.
FOLD_PARTIALS = 8


_SPLIT = {f.name: "BYTE_STREAM_SPLIT" for f in ingest_schema() if pa.types.is_integer(f.type)}
# The event files' Parquet options.
WRITE_OPTIONS: dict[str, Any] = {
    "compression": COMPRESSION,
    # Dictionary pages only where values repeat: the names. Numbers go byte stream
    # split: each byte of a value to a stream of its own, so lz4 finds the runs of a
    # time's or a size's high bytes. Against plain numbers it writes in half the
    # time, into two thirds of the bytes, and DuckDB reads it faster (bench/store.py,
    # docs/benchmarks.md#store).
    "use_dictionary": ["comm"],
    "column_encoding": _SPLIT,
    # Statistics where a filter can skip row groups: the time range.
    "write_statistics": ["ts_complete_ns"],
}


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
    # Not Schema.empty_table(): it imports pandas (0.15 s of every new store's open).
    # pyarrow.parquet.write_table's own options.
    w = parquet_writer(tmp, ingest_schema(), compression="snappy")
    w.write_table(pa.Table.from_batches([], schema=ingest_schema()))
    w.close()
    os.replace(tmp, empty)


def parquet_writer(path: Path, schema: pa.Schema, **options: Any) -> Any:
    """pyarrow.parquet.ParquetWriter(path, schema, **options) as that class makes it,
    without importing pyarrow.parquet: that module brings pyarrow.fs, its S3 and SSL
    (~15 ms holding the GIL, on a new store's open, while the conversion of the
    trace's first batches waits for it; issue 36). The writer underneath it,
    pyarrow._parquet.ParquetWriter, given the defaults pyarrow.parquet gives it
    (tests/analyzer/test_event_files_writer.py holds the files to its, byte for
    byte; a local path, which Arrow's own file stream opens). Not for other
    options, nor for a filesystem's paths: pyarrow.parquet does those."""
    from pyarrow._parquet import ParquetWriter

    defaults: dict[str, Any] = {
        "version": "2.6",
        "use_dictionary": True,
        "compression": "snappy",
        "write_statistics": True,
        "writer_engine_version": "V2",
        "data_page_version": "1.0",
    }
    return ParquetWriter(str(path), schema, **{**defaults, **options})


def ready(parts: Path) -> bool:
    return (run_dir(parts, EMPTY_RUN) / FILE).exists()


def view_sql(parts: Path) -> str:
    """The temporary view `events`: run_id from the directory, then the record's columns."""
    return duckdb_sql.events_view(str(parts / "run_id=*" / "*.parquet"))


@dataclass(frozen=True)
class Written:
    """A run's events as written: rows, files, and latency histograms (event_histograms.py's
    keyed rows; None for latencies out of their range)."""

    rows: int
    paths: list[Path]
    histograms: pa.Table | None


def write(
    parts: Path, run_id: str, batches: Iterable[pa.RecordBatch], expect: int | None = None
) -> Written:
    """Write a run's events as its files (replacing what a dead ingest left). Row
    groups go in turn to WRITERS files, each encoded, compressed and binned on a
    thread of its own (Arrow and numpy let go of the GIL), so the writing keeps up
    with the conversion. Each file is synced before it gets its name. `expect`: the
    rows the batches are expected to hold (a trace's footer), for `group_rows`."""
    d = run_dir(parts, run_id)
    if d.exists():
        remove(parts, run_id)
    d.mkdir(parents=True)
    w = _Writers(d)
    try:
        rows = _feed(w, batches, expect)
        paths = w.finish()
    except BaseException:
        w.abort()
        with contextlib.suppress(OSError):
            d.rmdir()
        raise
    finally:
        w.shutdown()
    try:
        hist = event_histograms.merged(w.hists)
    finally:
        for g in w.hists:
            g.close()
    return Written(rows, paths, hist)


def group_rows(expect: int | None, fed: int) -> int:
    """The rows of the row group to gather next, `fed` rows already handed to the
    writers of a run expected to hold `expect`: ROW_GROUP_ROWS, but never more than
    the rows expected after it, down to a batch's. A row group is written only once
    its last batch came, so near the end each is at most half of what is left: the
    writers then finish within a small group of the last batch (a whole row group,
    ~50 ms of a writer, came after it before; bench/ingest_cli.py). The groups hold
    the same rows whatever their sizes; without `expect`, or past it, ROW_GROUP_ROWS."""
    left = (expect or 0) - fed
    if left <= 0:
        return ROW_GROUP_ROWS
    return min(ROW_GROUP_ROWS, max(ROW_GROUP_ROWS // 8, left // 2))


def _feed(w: _Writers, batches: Iterable[pa.RecordBatch], expect: int | None = None) -> int:
    """Batches to row groups of `group_rows`, handed to the writers; returns rows."""
    schema = ingest_schema()
    rows = 0
    pending: list[pa.RecordBatch] = []
    n = 0
    target = group_rows(expect, 0)
    for b in batches:
        if b.schema != schema:
            b = as_ingest_batch(b)
        pending.append(b)
        n += b.num_rows
        if n >= target:
            w.submit(pa.Table.from_batches(pending))
            rows += n
            pending, n = [], 0
            target = group_rows(expect, rows)
    # The last row group is written after the last batch comes, with nothing else
    # left to overlap: halved between two writers, that wait is halved too.
    half = len(pending) // 2 if WRITERS > 1 and n >= ROW_GROUP_ROWS // 4 else 0
    for part in (pending[:half], pending[half:]) if half else (pending,):
        if part or not w.groups:
            w.submit(pa.Table.from_batches(part, schema=schema))
    return rows + n


class _Writers:
    """WRITERS Parquet files of one run, each fed by a thread of its own."""

    def __init__(self, d: Path) -> None:
        self.dir = d
        self.schema = ingest_schema()
        self.tmps = [d / f".events-{i}.parquet.{os.getpid()}.tmp" for i in range(WRITERS)]
        self.writers: list[Any] = [None] * WRITERS
        self.pools = [
            ThreadPoolExecutor(1, thread_name_prefix="iotape-events-write") for _ in self.tmps
        ]
        self.last: list[Future[None] | None] = [None] * WRITERS
        self.groups = 0
        # One per writer thread, each its own for the whole run (no lock between them).
        self.hists = [event_histograms.Gathered() for _ in self.tmps]

    def _put(self, i: int, t: pa.Table) -> None:
        w = self.writers[i]
        if w is None:
            w = self.writers[i] = parquet_writer(self.tmps[i], self.schema, **WRITE_OPTIONS)
        w.write_table(t, row_group_size=t.num_rows)
        self.hists[i].add(t)

    def submit(self, t: pa.Table) -> None:
        i = self.groups % WRITERS
        prev = self.last[i]
        if prev is not None:
            prev.result()  # one row group in flight per file: memory stays flat
        self.last[i] = self.pools[i].submit(self._put, i, t)
        self.groups += 1

    def finish(self) -> list[Path]:
        """Wait for the writers, close, sync and name their files."""
        for f in self.last:
            if f is not None:
                f.result()
        out = []
        for i, w in enumerate(self.writers):
            if w is None:
                continue
            w.close()
            self.writers[i] = None
            with open(self.tmps[i], "rb") as fh:
                os.fsync(fh.fileno())
            out.append(self.dir / f"events-{i}.parquet")
            os.replace(self.tmps[i], out[-1])
        _fsync_dir(self.dir)
        return out

    def abort(self) -> None:
        for f in self.last:
            if f is not None:
                with contextlib.suppress(BaseException):
                    f.result()
        for w in self.writers:
            if w is not None:
                with contextlib.suppress(Exception):
                    w.close()
        for t in self.tmps:
            with contextlib.suppress(FileNotFoundError):
                t.unlink()
        for g in self.hists:
            g.close()

    def shutdown(self) -> None:
        for pool in self.pools:
            pool.shutdown()


def remove(parts: Path, run_id: str) -> None:
    shutil.rmtree(run_dir(parts, run_id), ignore_errors=True)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
