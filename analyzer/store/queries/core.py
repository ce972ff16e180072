"""The query registry: a named SQL text per dialect, and how a store runs one.

Each query is written once with ClickHouse's bound parameters `{name:Type}`; the
DuckDB text is the same with `$name`, unless the engines need different SQL, in
which case both are given. Values are always bound. Identifiers in the SQL come
from this package or from `schemas/` (quoted by `schemas.tables.quote`), never
from a user.

Percentiles are exact order statistics, the same on both engines: the value of
rank ceil(n * q) (1-based) among the n sorted latencies, as SQL's PERCENTILE_DISC
defines it. DuckDB's `quantile_disc` is that; ClickHouse's `quantileExact` is
not (it takes rank floor(n * q) + 1), so ClickHouse sorts and indexes instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas.percentiles import IDENT_LEVELS

if TYPE_CHECKING:
    from analyzer.store.interface import Reader

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*):[^{}]+\}")

# The percentile levels every latency summary reports, and their column names.
LEVELS = IDENT_LEVELS[:4]


@dataclass(frozen=True)
class Query:
    name: str
    clickhouse: str
    duckdb_sql: str | None = None

    def sql(self, dialect: str) -> str:
        if dialect == "clickhouse":
            return self.clickhouse
        if self.duckdb_sql is not None:
            return self.duckdb_sql
        return _PARAM.sub(lambda m: f"${m.group(1)}", self.clickhouse)


QUERIES: dict[str, Query] = {}


def register(*qs: Query) -> None:
    for q in qs:
        assert q.name not in QUERIES, q.name
        QUERIES[q.name] = q


def both(name: str, build: Callable[[str], str]) -> Query:
    """A query whose text each dialect builds for itself."""
    return Query(name, build("clickhouse"), build("duckdb"))


def run(store: Reader, name: str, **params: Any) -> list[tuple]:
    """Rows of the named query, with `params` bound."""
    return store.rows(QUERIES[name].sql(store.dialect), params)


def records(store: Reader, name: str, columns: list[str], **params: Any) -> list[dict[str, Any]]:
    """Rows of the named query as dicts of `columns`, integers as Python ints."""
    return [
        dict(zip(columns, (_int(v) for v in r), strict=True)) for r in run(store, name, **params)
    ]


def _int(v: Any) -> Any:
    # Sums come back as 128-bit integers from DuckDB and as UInt64 from ClickHouse:
    # both are Python ints; floats are left alone.
    return int(v) if isinstance(v, int) else v


def exact_percentiles(expr: str, dialect: str) -> str:
    """Exact order statistics that name the same rank in both dialects: DuckDB's
    quantile_disc takes rank ceil(n·q); ClickHouse's quantileExact would not."""
    if dialect == "duckdb":
        return ", ".join(f"quantile_disc({expr}, {q}) AS {n}" for q, n in LEVELS)
    return ", ".join(
        f"arrayElement(arraySort(groupArray({expr})), toUInt64(greatest(1, ceil(count() * {q}))))"
        f" AS {n}"
        for q, n in LEVELS
    )


def run_param(dialect: str) -> str:
    return "$run_id" if dialect == "duckdb" else "{run_id:String}"
