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

from analyzer.store import event_files
from analyzer.store.event_histograms import BUILT, NAMES
from analyzer.store.interface import StoreError, StoreURL, missing_dirs
from analyzer.store.queries import duckdb_sql as sql_
from schemas.tables import table

# Statements a read-only store runs: reads and settings.
_READING = frozenset({"SELECT", "WITH", "SET", "RESET", "PRAGMA", "EXPLAIN", "DESCRIBE", "SHOW"})
# Arrow sources are registered under unique names so two inserts never collide.
_names = itertools.count()


class DuckDBStore:
    dialect = "duckdb"
    cluster: str | None = None
    events_in_files = True
    has_histograms = True
    # A connection is not shared between threads: each takes a cursor (per_request).
    shared = False

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
        # The file did not exist before this open made it, nor the directories in
        # `_made` (discard() removes them), and nothing went in it yet (`_used`:
        # a statement outside a transaction, or a transaction that committed).
        self._created = False
        self._made: list[Path] = []
        self._used = False
        if con is not None:
            self.con = con
            self.parts = parts or event_files.parts_dir(url.path)
            self._events_view()
            return
        path = url.path
        # A store made here has nothing to migrate (the check is a catalog query,
        # ~15 ms of a new store's first ingest).
        fresh = True
        if path != ":memory:":
            p = Path(path)
            if p.is_dir():
                raise StoreError(f"{path}: is a directory, not a DuckDB file")
            if not p.exists():
                if not create:
                    raise StoreError(f"{path}: no store here yet; `iotape ingest` makes one")
                self._made = missing_dirs(p.parent)
                p.parent.mkdir(parents=True, exist_ok=True)
            else:
                fresh = False
        try:
            self.con = duckdb.connect(path)
        except duckdb.Error as e:
            self._remove_made()
            how = "cannot open as a DuckDB store: " if isinstance(e, duckdb.IOException) else ""
            raise StoreError(f"{path}: {how}{_first_line(e)}") from None
        if path == ":memory:":
            self.parts = Path(tempfile.mkdtemp(prefix="iotape-events-"))
            self._own_parts = True
        else:
            self.parts = event_files.parts_dir(path)
        self._created = fresh and path != ":memory:"
        try:
            event_files.prepare(self.parts)
            self._run(sql_.HISTOGRAMS_DDL)
            if not fresh:
                self._migrate()
            self._events_view()
        except OSError as e:
            self.discard()
            raise StoreError(f"{self.parts}: cannot keep events here: {e}") from None
        except BaseException:
            self.discard()
            raise

    def _events_view(self) -> None:
        """`events` for this connection: the Parquet files, unless this is a read-only
        look at a store from before them (its `events` table is then the one)."""
        if event_files.ready(self.parts):
            self._run(event_files.view_sql(self.parts))

    def _migrate(self) -> None:
        """A store written before events went to Parquet: each run's rows become its
        file, then the table goes; one transaction, so a crash leaves the table."""
        if not self.rows(sql_.LEGACY_EVENTS_TABLE)[0][0]:
            return
        with self.transaction():
            for (run_id,) in self.rows(sql_.LEGACY_RUNS):
                rel = self._relation(sql_.legacy_run_events(), {"run_id": run_id})
                written = event_files.write(self.parts, run_id, rel.to_arrow_reader(65536))
                self._written += written.paths
            self._run(sql_.DROP_LEGACY_EVENTS)

    def cursor(self) -> DuckDBStore:
        """A store on a new cursor of the same database, for another thread."""
        return DuckDBStore(
            self.url, con=self.con.cursor(), parts=self.parts, read_only=self.read_only
        )

    @contextmanager
    def per_request(self) -> Iterator[DuckDBStore]:
        cur = self.cursor()
        try:
            yield cur
        finally:
            cur.close()

    def interrupt(self) -> None:
        self.con.interrupt()

    def limit_query_time(self, seconds: float) -> None:
        pass  # DuckDB has no such setting: the server's Guarded interrupts on a timer

    def set_read_only(self) -> None:
        pass  # opened read-only (opener.open_read_only)

    def drop_old_run_row(self, run_id: str) -> None:
        self._run(sql_.DELETE_RUN_ROW, {"id": run_id})

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        word = (sql.split(None, 1) or [""])[0].upper()
        if self.read_only and word not in _READING:
            # DuckDB refuses writes to the file itself, but `events` is a view of this
            # connection, which it would refuse for another reason: say it once here.
            raise StoreError(f"{self.url.display()}: the store is open read-only: {word} refused")
        # The tables a new store is made with hold nothing of a user's.
        self._used |= not self._in_tx and word not in _READING and word != "CREATE"
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
        self,
        table_name: str,
        batches: Iterable[pa.RecordBatch],
        run_id: str,
        expect: int | None = None,
    ) -> int:
        self._used |= not self._in_tx
        if table_name == "events":
            # A file of a dead ingest may be there: the run's file is replaced whole.
            written = event_files.write(self.parts, run_id, batches, expect)
            if self._in_tx:
                self._written += written.paths
            self._insert_histograms(run_id, written.histograms)
            return written.rows
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
        try:
            self._run(sql_.insert_from(table_name, src), {"run_id": run_id})
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
        self._used |= not self._in_tx
        names = table(table_name).column_names()
        # One statement for all the rows (a trace's streams: ~0.5 ms each on their own).
        self._run(
            sql_.insert_rows(table_name, len(rows)),
            {f"{c}_{i}": row[c] for i, row in enumerate(rows) for c in names},
        )

    def _insert_histograms(self, run_id: str, hist: pa.Table | None) -> None:
        self._run(sql_.HISTOGRAMS_DELETE, {"run_id": run_id})
        if hist is None:
            return
        src = f"iotape_src_{next(_names)}"
        self.con.register(src, hist)
        try:
            self._run(
                sql_.histograms_insert(src),
                {"run_id": run_id, "metric0": NAMES[0], "metric1": NAMES[1], "built": BUILT},
            )
        finally:
            with contextlib.suppress(duckdb.Error):
                self.con.unregister(src)

    def delete_run_rows(self, table_name: str, run_id: str) -> None:
        self._used |= not self._in_tx
        if table_name == "events":
            self._run(sql_.HISTOGRAMS_DELETE, {"run_id": run_id})
            if self._in_tx:
                self._doomed.append(run_id)  # gone once the catalog says so
            else:
                event_files.remove(self.parts, run_id)
            return
        self._run(sql_.delete_run_rows(table_name), {"run_id": run_id})

    def has_tables(self) -> bool:
        return self.rows(sql_.HAS_TABLES)[0][0] == 2

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: a process killed inside leaves no trace of it in the file."""
        self._run(sql_.BEGIN)
        self._in_tx = True
        try:
            yield
            self._run(sql_.COMMIT)
            self._used = True
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

    def discard(self) -> None:
        """Close, and remove the store if this open made it and nothing went in it
        since: a command that failed before it stored anything (its input could not
        be read, or broke half-way) leaves no store behind, nor the directories
        made for it (opener.opening)."""
        self.close()
        if self._created and not self._used:
            for f in (Path(self.url.path), Path(f"{self.url.path}.wal")):
                f.unlink(missing_ok=True)
            shutil.rmtree(self.parts, ignore_errors=True)
            self._remove_made()

    def _remove_made(self) -> None:
        """The directories this open made for a new store, deepest first, while empty."""
        for d in reversed(self._made):
            try:
                d.rmdir()
            except OSError:
                break

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
