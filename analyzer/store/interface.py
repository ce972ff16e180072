"""The store interface: the types every backend implements and every reader takes, and
the store URL (`analyzer.store.opener.open_store(url)` picks the backend for one).

A URL names the store (`--db URL` or `IOTAPE_DB`):

    /path/to/file.duckdb, duckdb:///path      DuckDB file (the default)
    duckdb://:memory:                          DuckDB in memory (tests)
    chdb:///path                               embedded ClickHouse (chDB), a directory
    clickhouse://user[:password]@host:8123/db  ClickHouse server over HTTP
    clickhouses://user@host:8443/db            the same over HTTPS

Every backend implements `Store`: statements and queries with bound values
(queries come from `analyzer.store.queries`, already in the backend's dialect), Arrow
batches in and out, and a transaction where the engine has one. What differs between
engines beyond the SQL is a capability or a method of the backend, never a test of
its dialect outside it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from base.errors import IotapeError

if TYPE_CHECKING:  # annotations only: every command's options import this module
    import pyarrow as pa

# The environment variable naming the store a command uses when `--db` is not given.
ENV = "IOTAPE_DB"
DEFAULT_PATH = Path("~/.local/share/iotape/iotape.duckdb")
URL_HELP = "use a path, duckdb:///PATH, chdb:///PATH or clickhouse://USER@HOST:8123/DB"


class StoreError(IotapeError):
    """The store cannot be opened or refused a statement: one line, naming the store."""


@dataclass(frozen=True)
class StoreURL:
    scheme: str  # duckdb | chdb | clickhouse
    path: str = ""  # duckdb/chdb: file or directory; ":memory:" for DuckDB in memory
    host: str = ""
    port: int = 8123
    user: str = "default"
    password: str = ""
    database: str = "default"
    secure: bool = False

    def display(self) -> str:
        """The URL without its password, for messages."""
        if self.scheme == "clickhouse":
            s = "clickhouses" if self.secure else "clickhouse"
            return f"{s}://{self.user}@{self.host}:{self.port}/{self.database}"
        return f"{self.scheme}://{self.path}"


class Reader(Protocol):
    """What the named queries and the analyses need: rows of a query, in a dialect."""

    @property
    def dialect(self) -> str:
        """ "duckdb" or "clickhouse": which SQL text of a query to use."""
        ...

    @property
    def url(self) -> StoreURL: ...

    @property
    def has_histograms(self) -> bool:
        """Whether runs' whole latency histograms are kept at ingest (event_histograms)."""
        ...

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple]: ...


class Store(Reader, Protocol):
    """What the catalog, ingest and queries need from an engine."""

    cluster: str | None  # ClickHouse cluster the tables are spread over, if any
    # Events are files beside the store, not a table (DuckDB: event_files.py).
    events_in_files: bool
    # One connection for every thread: callers take a lock around each call. Without,
    # each thread takes its own with `per_request()`.
    shared: bool

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> None: ...

    def arrow(self, sql: str, params: dict[str, Any] | None = None) -> pa.Table: ...

    def stream(
        self, sql: str, params: dict[str, Any] | None = None
    ) -> Iterator[pa.RecordBatch]: ...

    def insert_batches(
        self,
        table: str,
        batches: Iterable[pa.RecordBatch],
        run_id: str,
        expect: int | None = None,
    ) -> int:
        """Insert batches whose columns are the table's minus `run_id`; returns rows.
        `expect`: the rows they are expected to hold, where known (a trace's footer),
        a hint for how to write them."""
        ...

    def insert_rows(self, table: str, rows: list[dict[str, Any]]) -> None: ...

    def delete_run_rows(self, table: str, run_id: str) -> None: ...

    def drop_old_run_row(self, run_id: str) -> None:
        """Remove the run's row before a newer one is written, where the engine keeps
        one row per run (inside the caller's transaction); where it keeps versions
        (ClickHouse's ReplacingMergeTree), nothing."""
        ...

    def per_request(self) -> AbstractContextManager[Store]:
        """The store for one thread's use: its own cursor, or this store if shared."""
        ...

    def interrupt(self) -> None:
        """Stop the query running on this store now (from another thread), if the
        engine can; a shared store limits its queries' time by `limit_query_time`."""
        ...

    def limit_query_time(self, seconds: float) -> None:
        """Have the engine stop any query past `seconds`, where it can by itself."""
        ...

    def set_read_only(self) -> None:
        """Refuse writes and DDL from now on in this session."""
        ...

    def has_tables(self) -> bool: ...

    def transaction(self): ...

    def close(self) -> None: ...


def parse_url(url: str | None) -> StoreURL:
    """A store URL (or None: IOTAPE_DB, else the default DuckDB file) parsed and checked."""
    if url is None or url == "":
        url = os.environ.get(ENV) or str(DEFAULT_PATH.expanduser())
    if "://" not in url:
        return StoreURL("duckdb", path=str(Path(url).expanduser()))
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("duckdb", "chdb"):
        path = url.split("://", 1)[1]
        if not path:
            raise StoreError(f"--db {url}: no path; {URL_HELP}")
        if path != ":memory:":
            path = str(Path(unquote(path)).expanduser())
        if scheme == "chdb" and path == ":memory:":
            raise StoreError(f"--db {url}: chDB needs a directory; {URL_HELP}")
        return StoreURL(scheme, path=path)
    if scheme in ("clickhouse", "clickhouses"):
        return _clickhouse_url(url, parts, secure=scheme == "clickhouses")
    raise StoreError(f"--db {_safe(url)}: unknown scheme {parts.scheme!r}; {URL_HELP}")


def _clickhouse_url(url: str, parts, secure: bool) -> StoreURL:
    from schemas.tables import IDENTIFIER

    if not parts.hostname:
        raise StoreError(f"--db {_safe(url)}: no host; {URL_HELP}")
    try:
        port = parts.port or (8443 if secure else 8123)
    except ValueError:
        raise StoreError(f"--db {_safe(url)}: the port is not a number") from None
    database = parts.path.strip("/") or "default"
    if not IDENTIFIER.match(database):
        raise StoreError(f"--db {_safe(url)}: database {database!r} is not a plain name")
    query = parse_qs(parts.query)
    if query:
        raise StoreError(f"--db {_safe(url)}: unknown options {sorted(query)}")
    return StoreURL(
        "clickhouse",
        host=parts.hostname,
        port=port,
        user=unquote(parts.username or "default"),
        password=unquote(parts.password or ""),
        database=database,
        secure=secure,
    )


def _safe(url: str) -> str:
    """The URL with any password blanked, for an error message."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


def missing_dirs(d: Path) -> list[Path]:
    """`d` and those of its parents that do not exist, outermost first
    (a new store's, removed again where it got nothing: duckdb_store, forked)."""
    out: list[Path] = []
    while not d.exists() and d != d.parent:
        out.append(d)
        d = d.parent
    return out[::-1]
