"""Opening a store: `open_store(url)` picks the backend for a store URL
(`analyzer.store.interface` parses it; see there for the forms a URL takes).

This module sits above the backends, which import only the interface's types (the URL,
the error), so that no backend imports the module that opens it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from analyzer.store.interface import Store, StoreError, parse_url

if TYPE_CHECKING:
    from analyzer.store.forked import Child


def open_store(url: str | None = None, create: bool = True, schema: bool = True) -> Store:
    """Open the store at `url` (see the module doc). With `create`, make the store and
    (with `schema`) its tables if missing; without, a store or tables that do not exist
    yet are an error. `schema=False` leaves the tables to the caller (`db init`)."""
    u = parse_url(url)
    if u.scheme == "duckdb":
        from analyzer.store.duckdb_store import DuckDBStore

        store: Store = DuckDBStore(u, create=create)
    elif u.scheme == "chdb":
        from analyzer.store.clickhouse_store import ChdbStore

        store = ChdbStore(u, create=create)
    else:
        from analyzer.store.clickhouse_store import ClickHouseServerStore

        store = ClickHouseServerStore(u, create=create)
    try:
        if not schema:
            pass
        elif create:
            init_schema(store)
        elif not store.has_tables():
            raise StoreError(
                f"{u.display()}: no iotape tables here; `iotape db init` or `iotape ingest` "
                "makes them"
            )
    except BaseException:
        store.close()
        raise
    return store


def init_schema(store: Store, cluster: str | None = None) -> list[str]:
    """Create every table and view (IF NOT EXISTS); returns the statements run."""
    from analyzer.store.queries import clickhouse_sql
    from schemas.tables import ddl

    # A store that keeps events as files sees them through a view of that name
    # (analyzer/store/event_files.py), not as a table.
    skip = ("events",) if store.events_in_files else ()
    statements = ddl(store.dialect, cluster, skip)
    if cluster is not None:
        # Every node needs the database before the tables ON CLUSTER can go in it.
        statements.insert(0, clickhouse_sql.create_database(store.url.database, cluster))
    for sql in statements:
        store.execute(sql)
    return statements


@contextmanager
def opened(url: str | None, create: bool = True, schema: bool = True) -> Iterator[Store]:
    store = open_store(url, create=create, schema=schema)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def opening(url: str | None, child: Child | None = None) -> Iterator[Callable[[], Store]]:
    """`opened(url)` begun on a thread of its own at once: the caller imports and
    reads its input meanwhile, then calls what this yields for the store (joining
    the thread; its error, if it failed, raised there). DuckDB's start and the new
    store's tables (~50-90 ms of `iotape ingest`) let go of the GIL for most of it.
    With `child` (analyzer/store/forked.py's, for `url`), the store is that process's
    connection instead, and no thread is started. The store is closed on the way
    out, and the thread waited for; if the caller failed before anything went in
    it, a DuckDB store that this open made is removed (DuckDBStore.discard), with
    the directories made for it."""
    got: dict[str, Any] = {}

    def run() -> None:
        try:
            got["store"] = open_store(url) if child is None else _open_forked(url, child)
        except BaseException as e:
            got["error"] = e

    t = threading.Thread(target=run, name="iotape-store-open", daemon=True)
    if child is None:
        t.start()
    else:
        # The child did the slow part; a thread would only hold the GIL for the rest.
        t.run()

    def store() -> Store:
        _join(t)
        if "error" in got:
            raise got["error"]
        got["taken"] = True
        return cast(Store, got["store"])

    failed = False
    try:
        yield store
    except BaseException:
        failed = True
        raise
    finally:
        _join(t)
        if "store" in got:
            s = got.pop("store")
            # The caller failed before it asked for the store (its input could not be
            # read) or before anything went in it (its input broke half-way): a store
            # this open made is removed, as if it had never been opened.
            failing = failed or not got.get("taken")
            discard = getattr(s, "discard", None) if failing else None
            (discard or s.close)()


def _join(t: threading.Thread) -> None:
    if t.ident is not None:  # not started where it ran in place (a forked store)
        t.join()


def _open_forked(url: str | None, child: Child) -> Store:
    """The store on `child`'s connection, its tables made; in this process instead
    where it needs what only DuckDBStore does (forked_store.InProcess)."""
    from analyzer.store.forked_store import ForkedStore, InProcess

    try:
        store = cast(Store, ForkedStore(child))
    except InProcess:
        return open_store(url)
    try:
        init_schema(store)
    except BaseException:
        store.discard()  # type: ignore[attr-defined]
        raise
    return store


def open_read_only(url: str | None) -> Store:
    """Open an existing store so that nothing run through it can change it (the server).

    DuckDB opens the file read-only. ClickHouse (chDB or a server) runs the session
    with `readonly = 2`: reads, and settings may change, but no writes or DDL.
    """
    u = parse_url(url)
    if u.scheme == "duckdb":
        import duckdb

        from analyzer.store.duckdb_store import DuckDBStore

        if u.path == ":memory:" or not Path(u.path).is_file():
            raise StoreError(f"{u.display()}: no store file here; `iotape ingest` makes one")
        try:
            con = duckdb.connect(u.path, read_only=True)
        except duckdb.Error as e:
            raise StoreError(f"{u.display()}: cannot open read-only: {e}") from None
        store: Store = DuckDBStore(u, con=con, read_only=True)
    else:
        store = open_store(url, create=False, schema=False)
        try:
            store.set_read_only()
        except BaseException:
            store.close()
            raise
    if not store.has_tables():
        store.close()
        raise StoreError(f"{u.display()}: no iotape tables here; `iotape ingest` makes them")
    return store
