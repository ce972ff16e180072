"""The DuckDB store as `iotape ingest` uses it through a forked process
(analyzer/store/forked.py says why): the same tables, files and transaction as
DuckDBStore, for a trace's or a Parquet file's ingest (the runs, devices, streams,
histograms and event files; nothing else).

The event files are written here, as DuckDBStore writes them; every statement goes
to the child. Statements that return nothing are sent without waiting (a failure
comes back at the next one that replies: at the latest the COMMIT, which then
fails and rolls back); queries, the COMMIT and the close wait for their reply. A
run's histograms go to the child as a Parquet file beside the event files (the
child has no pyarrow to scan Arrow with), removed once the transaction ends.

The transaction is DuckDBStore's: a failure (an error, the child's death, Ctrl-C)
rolls back the child's transaction and removes the event files written in it; a
store this command made and put nothing in is removed on the way out (discard).
If the child dies, the command says so in one line and its transaction is gone
with it (DuckDB keeps nothing uncommitted).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from analyzer.store import event_files
from analyzer.store.event_histograms import BUILT, NAMES
from analyzer.store.forked import Child, remove_new_store
from analyzer.store.interface import StoreError
from analyzer.store.queries import duckdb_sql as sql_
from schemas.tables import table

# Statements that change nothing of a user's (DuckDBStore's `_used`).
_READING = frozenset({"SELECT", "WITH", "SET", "RESET", "PRAGMA", "EXPLAIN", "DESCRIBE", "SHOW"})
_names = itertools.count()


class InProcess(Exception):
    """This store needs what only DuckDBStore does (a legacy events table to migrate):
    the caller opens that instead."""


class ForkedStore:
    dialect = "duckdb"
    cluster: str | None = None
    events_in_files = True
    has_histograms = True
    shared = False
    read_only = False

    def __init__(self, child: Child) -> None:
        """The store on `child`'s connection, its histograms table and `events` view
        made, as DuckDBStore's open makes them (init_schema adds the rest)."""
        self.child = child
        child.taken = True
        self.url = child.url
        self.parts = event_files.parts_dir(self.url.path)
        self._written: list[Path] = []
        self._doomed: list[str] = []
        self._temp: list[Path] = []
        self._in_tx = False
        self._created = child.fresh
        self._used = False
        try:
            child.connected()
            event_files.prepare(self.parts)
            self._send(sql_.HISTOGRAMS_DDL)
            if not child.fresh and self.rows(sql_.LEGACY_EVENTS_TABLE)[0][0]:
                raise InProcess(self.url.path)
            if event_files.ready(self.parts):
                self._send(event_files.view_sql(self.parts))
        except OSError as e:
            self.discard()
            raise StoreError(f"{self.parts}: cannot keep events here: {e}") from None
        except BaseException:
            self.discard()
            raise

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        word = (sql.split(None, 1) or [""])[0].upper()
        self._used |= not self._in_tx and word not in _READING and word != "CREATE"
        self._send(sql, params)

    def _send(self, sql: str, params: dict[str, Any] | None = None) -> None:
        """A statement of the store's own (not the caller's: `_used` as it was)."""
        self.child.send("exec", sql, params)

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
        return list(self.child.request("rows", sql, params))

    def has_tables(self) -> bool:
        return self.rows(sql_.HAS_TABLES)[0][0] == 2

    def drop_old_run_row(self, run_id: str) -> None:
        self.execute(sql_.DELETE_RUN_ROW, {"id": run_id})

    def insert_rows(self, table_name: str, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        names = table(table_name).column_names()
        self.execute(
            sql_.insert_rows(table_name, len(rows)),
            {f"{c}_{i}": row[c] for i, row in enumerate(rows) for c in names},
        )

    def insert_batches(
        self,
        table_name: str,
        batches: Iterable[pa.RecordBatch],
        run_id: str,
        expect: int | None = None,
    ) -> int:
        if table_name != "events":
            # forked.start keeps every source that has such tables in-process.
            raise StoreError(f"{self.url.display()}: {table_name}: not stored this way")
        self._used |= not self._in_tx
        written = event_files.write(self.parts, run_id, batches, expect)
        if self._in_tx:
            self._written += written.paths
        self._insert_histograms(run_id, written.histograms)
        return written.rows

    def _insert_histograms(self, run_id: str, hist: pa.Table | None) -> None:
        self._send(sql_.HISTOGRAMS_DELETE, {"run_id": run_id})
        if hist is None:
            return
        src = f"iotape_src_{next(_names)}"
        tmp = self.parts / f".{src}-{os.getpid()}.parquet"
        self._temp.append(tmp)
        # Read once, beside it: no dictionary, statistics or compression (38,607 rows
        # of the synthetic 2 M-event trace: 1.4 ms to write against 9-10 ms so).
        w = event_files.parquet_writer(
            tmp, hist.schema, compression="none", use_dictionary=False, write_statistics=False
        )
        try:
            w.write_table(hist)
        finally:
            w.close()
        self._send(sql_.parquet_view(src, str(tmp)))
        self._send(
            sql_.histograms_insert(src),
            {"run_id": run_id, "metric0": NAMES[0], "metric1": NAMES[1], "built": BUILT},
        )
        self._send(sql_.drop_view(src))
        if not self._in_tx:
            self._sync()

    def delete_run_rows(self, table_name: str, run_id: str) -> None:
        self._used |= not self._in_tx
        if table_name == "events":
            self._send(sql_.HISTOGRAMS_DELETE, {"run_id": run_id})
            if self._in_tx:
                self._doomed.append(run_id)  # gone once the catalog says so
            else:
                event_files.remove(self.parts, run_id)
            return
        self.execute(sql_.delete_run_rows(table_name), {"run_id": run_id})

    def _sync(self) -> None:
        """Every statement sent has run; the first failure among them raised."""
        try:
            self.child.request("sync")
        finally:
            self._remove_temp()

    def _remove_temp(self) -> None:
        temp, self._temp = self._temp, []
        for p in temp:
            p.unlink(missing_ok=True)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing, as DuckDBStore's."""
        self._send(sql_.BEGIN)
        self._in_tx = True
        with _ctrl_c_after() as commit:
            try:
                yield
                commit()  # a Ctrl-C from here on waits until the outcome is known
                # The run's rows (38,607 histogram rows of the synthetic 2 M-event
                # trace: a 3.7 MB WAL) go to the file at the COMMIT rather than to the
                # WAL and then to the file at the close: ~10 ms less of the tail the
                # command waits for (docs/benchmarks.md, ninth pass).
                self._send(sql_.CHECKPOINT_AT_COMMIT)
                self._send(sql_.COMMIT)
                self._sync()
                self._used = True
            except BaseException:
                with contextlib.suppress(StoreError):
                    self.child.rollback()
                self._remove_temp()
                for p in self._written:
                    p.unlink(missing_ok=True)
                raise
            finally:
                self._in_tx = False
                written, doomed = self._written, self._doomed
                self._written, self._doomed = [], []
            for run_id in doomed:
                if not any(p.parent == event_files.run_dir(self.parts, run_id) for p in written):
                    event_files.remove(self.parts, run_id)

    def close(self) -> None:
        try:
            self.child.end()
        finally:
            self._remove_temp()

    def discard(self) -> None:
        """Close, and remove the store if this command made it and put nothing in it
        (DuckDBStore.discard)."""
        with contextlib.suppress(StoreError):
            self.close()
        if self._created and not self._used:
            remove_new_store(self.url.path, self.child.made)


@contextmanager
def _ctrl_c_after() -> Iterator[Callable[[], None]]:
    """What this yields, called, holds back a Ctrl-C until the block ends: sent while
    the COMMIT is under way, KeyboardInterrupt would roll back the event files of a
    run the child may have committed. Raised after the block, the run is either in
    the store whole or not at all. Only where Python's handler is the default one
    and on the main thread (the only one signal handlers can be set from)."""
    held: list[int] = []
    before: list[Any] = []

    def hold() -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return
        before.append(signal.signal(signal.SIGINT, lambda n, f: held.append(n)))

    try:
        yield hold
    finally:
        if before:
            signal.signal(signal.SIGINT, before[0])
    if held:
        raise KeyboardInterrupt
