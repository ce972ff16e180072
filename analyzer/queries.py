"""Named queries, in the ClickHouse and the DuckDB dialect, and the analyses built on them.

Each query is written once with ClickHouse's bound parameters `{name:Type}`; the
DuckDB text is the same with `$name`, unless the engines need different SQL, in
which case both are given. Values are always bound. Identifiers in the SQL come
from this module or from `schemas/` (quoted by `schemas.tables.quote`), never
from a user.

Percentiles are exact order statistics, the same on both engines: the value of
rank ceil(n * q) (1-based) among the n sorted latencies, as SQL's PERCENTILE_DISC
defines it. DuckDB's `quantile_disc` is that; ClickHouse's `quantileExact` is
not (it takes rank floor(n * q) + 1), so ClickHouse sorts and indexes instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from iotape import schemas
from iotape.analyzer.store import Store
from iotape.schemas.tables import quote, table

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*):[^{}]+\}")

# The percentile levels every latency summary reports, and their column names.
LEVELS = ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p999"))


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


def _runs_columns() -> str:
    return ", ".join(quote(c) for c in table("runs").column_names())


def _latency_sql(dialect: str) -> str:
    lat = '("ts_complete_ns" - "ts_issue_ns")'
    if dialect == "duckdb":
        pcts = ", ".join(f"quantile_disc({lat}, {q}) AS {n}" for q, n in LEVELS)
    else:
        pcts = ", ".join(
            f"arrayElement(arraySort(groupArray({lat})), "
            f"toUInt64(greatest(1, ceil(count() * {q})))) AS {n}"
            for q, n in LEVELS
        )
    run = "$run_id" if dialect == "duckdb" else "{run_id:String}"
    # Requests with an unknown issue time (0) have no device latency.
    return (
        f'SELECT "op", count() AS ios, sum({lat}) AS sum_ns, min({lat}) AS min_ns, '
        f"max({lat}) AS max_ns, {pcts} "
        f'FROM "events" WHERE "run_id" = {run} AND "ts_issue_ns" > 0 '
        f'AND "ts_complete_ns" >= "ts_issue_ns" GROUP BY "op" ORDER BY "op"'
    )


QUERIES = {
    q.name: q
    for q in (
        Query(
            "runs_all",
            f'SELECT {_runs_columns()} FROM "runs_latest" ORDER BY "start_ns", "ingested_ns", "id"',
        ),
        Query(
            "run_by_id", f'SELECT {_runs_columns()} FROM "runs_latest" WHERE "id" = {{id:String}}'
        ),
        Query("run_events", 'SELECT count() FROM "events" WHERE "run_id" = {run_id:String}'),
        Query(
            "run_devices",
            'SELECT "dev", "name", "model", "firmware", "rotational", "logical_block_size", '
            '"capacity_bytes", "partition_name", "partition_start_bytes" FROM "devices" '
            'WHERE "run_id" = {run_id:String} ORDER BY "dev"',
        ),
        Query(
            "run_streams",
            'SELECT "stream", "name" FROM "streams" WHERE "run_id" = {run_id:String} '
            'ORDER BY "stream"',
        ),
        Query(
            "export_events",
            "SELECT "
            + ", ".join(quote(c) for c in schemas.column_names())
            + ' FROM "events" WHERE "run_id" = {run_id:String} '
            'ORDER BY "ts_complete_ns", "dev", "offset", "ts_issue_ns"',
        ),
        Query("op_latency", _latency_sql("clickhouse"), _latency_sql("duckdb")),
        Query(
            "iops_per_second",
            'SELECT intDiv("ts_complete_ns", 1000000000) AS second, count() AS ios, '
            'sum("bytes") AS bytes FROM "events" WHERE "run_id" = {run_id:String} '
            "GROUP BY second ORDER BY second",
            'SELECT "ts_complete_ns" // 1000000000 AS second, count(*) AS ios, '
            'sum("bytes") AS bytes FROM "events" WHERE "run_id" = $run_id '
            "GROUP BY second ORDER BY second",
        ),
        Query(
            "bytes_by_stream",
            'SELECT "stream", count() AS ios, sum("bytes") AS bytes FROM "events" '
            'WHERE "run_id" = {run_id:String} GROUP BY "stream" ORDER BY "stream"',
        ),
    )
}


def run(store: Store, name: str, **params: Any) -> list[tuple]:
    """Rows of the named query, with `params` bound."""
    return store.rows(QUERIES[name].sql(store.dialect), params)


def _records(store: Store, name: str, columns: list[str], **params: Any) -> list[dict]:
    return [
        dict(zip(columns, (_int(v) for v in r), strict=True)) for r in run(store, name, **params)
    ]


def _int(v: Any) -> Any:
    # Sums come back as 128-bit integers from DuckDB and as UInt64 from ClickHouse:
    # both are Python ints; floats are left alone.
    return int(v) if isinstance(v, int) else v


# --------------------------------------------------------------------------- analyses


def op_latency(store: Store, run_id: str) -> list[dict]:
    """Per op: count, sum, min, max and exact percentiles of device latency (ns)."""
    cols = ["op", "ios", "sum_ns", "min_ns", "max_ns", *(n for _, n in LEVELS)]
    out = _records(store, "op_latency", cols, run_id=run_id)
    names = schemas.op_names()
    for r in out:
        r["op_name"] = names.get(r["op"], str(r["op"]))
    return out


def iops_per_second(store: Store, run_id: str) -> list[dict]:
    """Completed requests and bytes in each whole second since the trace start."""
    return _records(store, "iops_per_second", ["second", "ios", "bytes"], run_id=run_id)


def bytes_by_stream(store: Store, run_id: str) -> list[dict]:
    """Requests and bytes per stream, with the stream's name for this run."""
    names = dict(run(store, "run_streams", run_id=run_id))
    out = _records(store, "bytes_by_stream", ["stream", "ios", "bytes"], run_id=run_id)
    for r in out:
        r["stream_name"] = names.get(r["stream"], f"stream-{r['stream']}")
    return out
