"""DuckDB: the embedded default store, one file and its events' Parquet files.

Every table lives in the DuckDB file but `events`: a run's events are one
immutable Parquet file beside it, read through a temporary view of the same name
(analyzer/store/event_files.py), made on every connection, read-only ones included.
A store in memory keeps its files in a temporary directory, removed on close.

A DuckDB connection is not safe to share between threads: a thread that needs
the store takes its own with `cursor()`. Ingest stays on one thread (the
thread that converts trace chunks to Arrow never touches DuckDB).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

import schemas
from analyzer.store import event_files, event_histograms
from analyzer.store.interface import StoreError, StoreURL
from schemas.tables import quote, table

# Statements a read-only store runs: reads and settings.
_READING = frozenset({"SELECT", "WITH", "SET", "RESET", "PRAGMA", "EXPLAIN", "DESCRIBE", "SHOW"})
# Arrow sources are registered under unique names so two inserts never collide.
_names = itertools.count()


class DuckDBStore:
    dialect = "duckdb"
    cluster = None

    def __init__(
        self,
        url: StoreURL,
        create: bool = True,
        con: duckdb.DuckDBPyConnection | None = None,
        parts: Path | None = None,
        read_only: bool = False,
    ) -> None:
        self.url = url
        self.read_only = read_only
        # Files written and runs removed inside the open transaction: a rollback
        # removes the first, a commit the second.
        self._written: list[Path] = []
        self._doomed: list[str] = []
        self._in_tx = False
        self._own_parts = False
        if con is not None:
            self.con = con
            self.parts = parts or event_files.parts_dir(url.path)
            self._events_view()
            return
        path = url.path
        if path != ":memory:":
            p = Path(path)
            if p.is_dir():
                raise StoreError(f"{path}: is a directory, not a DuckDB file")
            if not p.exists():
                if not create:
                    raise StoreError(f"{path}: no store here yet; `iotape ingest` makes one")
                p.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.con = duckdb.connect(path)
        except duckdb.IOException as e:
            raise StoreError(f"{path}: cannot open as a DuckDB store: {_first_line(e)}") from None
        except duckdb.Error as e:
            raise StoreError(f"{path}: {_first_line(e)}") from None
        if path == ":memory:":
            self.parts = Path(tempfile.mkdtemp(prefix="iotape-events-"))
            self._own_parts = True
        else:
            self.parts = event_files.parts_dir(path)
        try:
            event_files.prepare(self.parts)
            self._run(event_histograms.DDL)
            self._migrate()
            self._events_view()
        except OSError as e:
            self.close()
            raise StoreError(f"{self.parts}: cannot keep events here: {e}") from None
        except BaseException:
            self.close()
            raise

    def _events_view(self) -> None:
        """`events` for this connection: the Parquet files, unless this is a read-only
        look at a store from before them (its `events` table is then the one)."""
        if event_files.ready(self.parts):
            self._run(event_files.view_sql(self.parts))

    def _migrate(self) -> None:
        """A store written before events went to Parquet: each run's rows become its
        file, then the table goes; one transaction, so a crash leaves the table."""
        legacy = self.rows(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_name = 'events' AND table_type = 'BASE TABLE'"
        )[0][0]
        if not legacy:
            return
        cols = ", ".join(quote(c) for c in schemas.column_names())
        with self.transaction():
            for (run_id,) in self.rows('SELECT DISTINCT "run_id" FROM main."events"'):
                rel = self._relation(
                    f'SELECT {cols} FROM main."events" WHERE "run_id" = $run_id '
                    'ORDER BY "ts_complete_ns"',
                    {"run_id": run_id},
                )
                self._written += event_files.write(self.parts, run_id, rel.to_arrow_reader(65536))[
                    1
                ]
            self._run('DROP TABLE main."events"')

    def cursor(self) -> DuckDBStore:
        """A store on a new cursor of the same database, for another thread."""
        return DuckDBStore(
            self.url, con=self.con.cursor(), parts=self.parts, read_only=self.read_only
        )

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        if self.read_only:
            # DuckDB refuses writes to the file itself, but `events` is a view of this
            # connection, which it would refuse for another reason: say it once here.
            word = (sql.split(None, 1) or [""])[0].upper()
            if word not in _READING:
                raise StoreError(
                    f"{self.url.display()}: the store is open read-only: {word} refused"
                )
        self._run(sql, params)

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
        return self._run(sql, params).fetchall()

    def arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        return self._relation(sql, params).to_arrow_table()

    def stream(self, sql: str, params: dict[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
        # A relation streams its result; a DB-API result would copy it whole first.
        yield from self._relation(sql, params).to_arrow_reader(batch_size=65536)

    def _relation(self, sql: str, params: dict[str, Any] | None):
        try:
            return self.con.sql(sql, params=params or None)
        except duckdb.Error as e:
            raise StoreError(f"{self.url.display()}: {_first_line(e)}") from e

    def insert_batches(
        self, table_name: str, batches: Iterable[pa.RecordBatch], run_id: str
    ) -> int:
        if table_name == "events":
            # A file of a dead ingest may be there: the run's file is replaced whole.
            rows, paths, hist = event_files.write(self.parts, run_id, batches)
            if self._in_tx:
                self._written += paths
            self._insert_histograms(run_id, hist)
            return rows
        t = table(table_name)
        cols = [c for c in t.column_names() if c != "run_id"]
        batches = iter(batches)
        first = next(batches, None)
        if first is None:
            return 0
        counted = _Counter()
        reader = pa.RecordBatchReader.from_batches(
            first.schema, counted.count(itertools.chain([first], batches))
        )
        # One INSERT over a stream of batches: DuckDB pulls them as it writes, so
        # memory stays at a few batches whatever the trace's size.
        src = f"iotape_src_{next(_names)}"
        self.con.register(src, reader)
        names = ", ".join(quote(c) for c in cols)
        try:
            self._run(
                f"INSERT INTO {quote(t.name)} ({quote('run_id')}, {names}) "
                f"SELECT $run_id, {names} FROM {quote(src)}",
                {"run_id": run_id},
            )
        except BaseException:
            # A source that failed half-way aborts the transaction, and unregister then
            # fails too: the first error is the one to report.
            with contextlib.suppress(duckdb.Error):
                self.con.unregister(src)
            if counted.error is not None:
                # DuckDB wraps the source's own error (a damaged trace) in its message,
                # traceback included: report the source's one line instead.
                raise counted.error from None
            raise
        self.con.unregister(src)
        return counted.rows

    def insert_rows(self, table_name: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        t = table(table_name)
        names = t.column_names()
        cols = ", ".join(quote(c) for c in names)
        marks = ", ".join(f"${c}" for c in names)
        sql = f"INSERT INTO {quote(t.name)} ({cols}) VALUES ({marks})"
        for row in rows:
            self._run(sql, {c: row[c] for c in names})

    def _insert_histograms(self, run_id: str, hist: pa.Table | None) -> None:
        self._run(f'DELETE FROM "{event_histograms.TABLE}" WHERE "run_id" = $r', {"r": run_id})
        if hist is None:
            return
        src = f"iotape_src_{next(_names)}"
        self.con.register(src, hist)
        try:
            self._run(f'INSERT INTO "{event_histograms.TABLE}" SELECT * FROM {quote(src)}')
        finally:
            with contextlib.suppress(duckdb.Error):
                self.con.unregister(src)

    def delete_run_rows(self, table_name: str, run_id: str) -> None:
        if table_name == "events":
            self._run(f'DELETE FROM "{event_histograms.TABLE}" WHERE "run_id" = $r', {"r": run_id})
            if self._in_tx:
                self._doomed.append(run_id)  # gone once the catalog says so
            else:
                event_files.remove(self.parts, run_id)
            return
        t = table(table_name)
        self._run(
            f"DELETE FROM {quote(t.name)} WHERE {quote('run_id')} = $run_id", {"run_id": run_id}
        )

    def has_tables(self) -> bool:
        n = self.rows(
            "SELECT count(DISTINCT table_name) FROM information_schema.tables "
            "WHERE table_name IN ('runs', 'events')"
        )
        return n[0][0] == 2

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: a process killed inside leaves no trace of it in the file."""
        self._run("BEGIN TRANSACTION")
        self._in_tx = True
        try:
            yield
            self._run("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                self.con.rollback()
            for p in self._written:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            raise
        finally:
            self._in_tx = False
            written, doomed = self._written, self._doomed
            self._written, self._doomed = [], []
        for run_id in doomed:
            if not any(p.parent == event_files.run_dir(self.parts, run_id) for p in written):
                event_files.remove(self.parts, run_id)

    def close(self) -> None:
        self.con.close()
        if self._own_parts:
            shutil.rmtree(self.parts, ignore_errors=True)

    def _run(self, sql: str, params: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
        try:
            return self.con.execute(sql, params or None)
        except duckdb.Error as e:
            raise StoreError(f"{self.url.display()}: {_first_line(e)}") from e


class _Counter:
    """Rows that went by, and the error the source raised, if it raised one."""

    def __init__(self) -> None:
        self.rows = 0
        self.error: Exception | None = None

    def count(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            for b in batches:
                self.rows += b.num_rows
                yield b
        except Exception as e:
            self.error = e
            raise


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    # DuckDB appends a Python source's traceback to the line; that is for no user.
    text = text.split(" Detail: Python exception:")[0]
    return text.splitlines()[0] if text else type(e).__name__
