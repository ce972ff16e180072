"""ClickHouse, two ways behind one dialect: a server through clickhouse-connect, and
the engine in this process through chDB.

Both bind values server-side as `{name:Type}`. ClickHouse has no multi-statement
transactions, so a run's visibility is its `state` in `runs` (see catalog.py),
and `transaction()` is a no-op here. A store whose `events` is a Distributed
table (made by `iotape db init --cluster`) deletes in the `_local` tables ON
CLUSTER, since Distributed tables take no DELETE.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Self

import pyarrow as pa

from analyzer.store.interface import StoreError, StoreURL
from analyzer.store.queries import clickhouse_sql as sql_
from schemas.tables import table

# Rows per INSERT: each INSERT makes a MergeTree part, so fewer, larger ones.
INSERT_ROWS = 262_144
# chDB's: every part is merged again in the background, in this process; with a
# million rows an INSERT the merges and the per-INSERT work cost an eighth less CPU
# than at a quarter million. Two million cost a fifth less, but the peak RSS passed
# 1 GiB (bench/store.py, docs/benchmarks.md#store).
CHDB_INSERT_ROWS = 1_048_576
_DISTRIBUTED = re.compile(r"^Distributed\(\s*'?([A-Za-z_][A-Za-z0-9_]*)'?")


class _ClickHouseDialect:
    """What the two transports share: SQL text, deletes, row inserts, batching."""

    dialect = "clickhouse"
    cluster: str | None = None
    url: StoreURL
    events_in_files = False
    # No histograms kept at ingest: a run's whole histogram is one query.
    has_histograms = False
    # chDB runs one query at a time, and a server's client is one session: callers
    # take a lock.
    shared = True

    @contextlib.contextmanager
    def per_request(self) -> Iterator[Self]:
        yield self

    def interrupt(self) -> None:
        pass  # the session's max_execution_time stops a long query (limit_query_time)

    def limit_query_time(self, seconds: float) -> None:
        self.execute(sql_.max_execution_time(seconds))

    def set_read_only(self) -> None:
        self.execute(sql_.READ_ONLY)

    def drop_old_run_row(self, run_id: str) -> None:
        pass  # a newer version of the row replaces it (ReplacingMergeTree, runs_latest)

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        raise NotImplementedError

    def arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        raise NotImplementedError

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]:
        t = self.arrow(sql, params)
        cols = [c.to_pylist() for c in t.columns]
        return list(zip(*cols, strict=True)) if cols else []

    def stream(self, sql: str, params: dict[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
        yield from self.arrow(sql, params).to_batches(max_chunksize=65536)

    def insert_rows(self, table_name: str, rows: list[dict[str, Any]]) -> None:
        names = table(table_name).column_names()
        sql = sql_.insert_row(table_name)
        for row in rows:
            self.execute(sql, {c: row[c] for c in names})

    def delete_run_rows(self, table_name: str, run_id: str) -> None:
        self.execute(sql_.delete_run_rows(table_name, self.cluster), {"run_id": run_id})

    def has_tables(self) -> bool:
        return self.rows(sql_.HAS_TABLES)[0][0] == 2

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        yield

    def _find_cluster(self) -> None:
        found = self.rows(sql_.EVENTS_ENGINE)
        if found:
            m = _DISTRIBUTED.match(found[0][0] or "")
            self.cluster = m.group(1) if m else None


def _groups(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    pending: list[pa.RecordBatch] = []
    n = 0
    for b in batches:
        pending.append(b)
        n += b.num_rows
        if n >= rows:
            yield pa.Table.from_batches(pending)
            pending, n = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


class ChdbStore(_ClickHouseDialect):
    """chDB: the ClickHouse engine in this process, on a directory.

    chDB holds one database directory per process: open another only after
    closing this one.
    """

    def __init__(self, url: StoreURL, create: bool = True) -> None:
        import chdb

        self.url = url
        p = Path(url.path)
        if p.exists() and not p.is_dir():
            raise StoreError(f"{url.path}: is a file; chDB needs a directory")
        if not p.exists() and not create:
            raise StoreError(f"{url.path}: no store here yet; `iotape ingest` makes one")
        self._error = chdb.ChdbError
        try:
            self.conn = chdb.connect(url.path)
        except Exception as e:  # chDB raises RuntimeError and its own types
            raise StoreError(f"{url.display()}: cannot open: {_first_line(e)}") from None

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        self._query(sql, params, "CSV")

    def arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        # The Arrow IPC bytes read here, not chDB's "Arrowtable": that imports pandas
        # for nothing, 0.4-1.4 s of every command's first query.
        res = self._query(sql, params, "Arrow")
        if len(res) == 0:
            return pa.table({})
        return pa.ipc.open_file(res.get_memview().view()).read_all()

    def insert_batches(
        self,
        table_name: str,
        batches: Iterable[pa.RecordBatch],
        run_id: str,
        expect: int | None = None,
    ) -> int:
        sql = sql_.insert_from_python(table_name)
        rows = 0
        for src in _groups(batches, CHDB_INSERT_ROWS):
            # chDB's Python() table function reads the local variable `src` by name,
            # straight from Arrow: no copy through a file or a text format.
            self._query(sql, {"run_id": run_id}, "CSV")
            rows += src.num_rows
        return rows

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    def _query(self, sql: str, params: dict[str, Any] | None, fmt: str):
        try:
            return self.conn.query(sql, fmt, params=params or {})
        except (self._error, RuntimeError) as e:
            raise StoreError(f"{self.url.display()}: {_first_line(e)}") from e


class ClickHouseServerStore(_ClickHouseDialect):
    """A ClickHouse server (or cluster) over HTTP, through clickhouse-connect."""

    def __init__(self, url: StoreURL, create: bool = True) -> None:
        import clickhouse_connect
        from clickhouse_connect.driver.exceptions import ClickHouseError

        self.url = url
        self._error = ClickHouseError
        try:
            self.client = clickhouse_connect.get_client(
                host=url.host,
                port=url.port,
                username=url.user,
                password=url.password,
                secure=url.secure,
                connect_timeout=5,
                send_receive_timeout=600,
            )
        except ClickHouseError as e:
            raise StoreError(
                f"{url.display()}: cannot reach the server: {_first_line(e)}"
            ) from None
        try:
            if create:
                self.client.command(sql_.create_database(url.database))
            self.client.database = url.database
            self._find_cluster()
        except BaseException:
            self.close()
            raise

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None:
        try:
            self.client.command(sql, parameters=params or None)
        except self._error as e:
            raise StoreError(f"{self.url.display()}: {_first_line(e)}") from e

    def arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table:
        try:
            return self.client.query_arrow(sql, parameters=params or None)
        except self._error as e:
            raise StoreError(f"{self.url.display()}: {_first_line(e)}") from e

    def insert_batches(
        self,
        table_name: str,
        batches: Iterable[pa.RecordBatch],
        run_id: str,
        expect: int | None = None,
    ) -> int:
        t = table(table_name)
        rows = 0
        for src in _groups(batches, INSERT_ROWS):
            src = src.add_column(0, "run_id", pa.repeat(pa.scalar(run_id), src.num_rows))
            try:
                self.client.insert_arrow(t.name, src)
            except self._error as e:
                raise StoreError(f"{self.url.display()}: {_first_line(e)}") from e
            rows += src.num_rows
        return rows

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
