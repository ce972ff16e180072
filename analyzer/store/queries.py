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

import schemas
from analyzer.store.interface import Store
from schemas.percentiles import IDENT_LEVELS
from schemas.tables import quote, table

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


def _runs_columns() -> str:
    return ", ".join(quote(c) for c in table("runs").column_names())


def _exact_percentiles(expr: str, dialect: str) -> str:
    """Exact order statistics that name the same rank in both dialects: DuckDB's
    quantile_disc takes rank ceil(n·q); ClickHouse's quantileExact would not."""
    if dialect == "duckdb":
        return ", ".join(f"quantile_disc({expr}, {q}) AS {n}" for q, n in LEVELS)
    return ", ".join(
        f"arrayElement(arraySort(groupArray({expr})), toUInt64(greatest(1, ceil(count() * {q}))))"
        f" AS {n}"
        for q, n in LEVELS
    )


def _run_param(dialect: str) -> str:
    return "$run_id" if dialect == "duckdb" else "{run_id:String}"


def _latency_sql(dialect: str) -> str:
    lat = '("ts_complete_ns" - "ts_issue_ns")'
    # Requests with an unknown issue time (0) have no device latency.
    return (
        f'SELECT "op", count() AS ios, sum({lat}) AS sum_ns, min({lat}) AS min_ns, '
        f"max({lat}) AS max_ns, {_exact_percentiles(lat, dialect)} "
        f'FROM "events" WHERE "run_id" = {_run_param(dialect)} AND "ts_issue_ns" > 0 '
        f'AND "ts_complete_ns" >= "ts_issue_ns" GROUP BY "op" ORDER BY "op"'
    )


def _sample_latency_sql(dialect: str) -> str:
    """fio's per-I/O latency samples of a replay, per op: the same summary and the
    same exact order statistics as `op_latency` gives for a trace's events."""
    lat = '"lat_ns"'
    return (
        f'SELECT "op", count() AS ios, sum({lat}) AS sum_ns, min({lat}) AS min_ns, '
        f"max({lat}) AS max_ns, {_exact_percentiles(lat, dialect)} "
        f'FROM "fio_latency_samples" WHERE "run_id" = {_run_param(dialect)} '
        'GROUP BY "op" ORDER BY "op"'
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
            "run_children",
            'SELECT "id", "name", "kind" FROM "runs_ready" WHERE "parent_id" = {id:String} '
            'ORDER BY "start_ns", "id"',
        ),
        Query(
            "fio_jobs",
            'SELECT "job", "op", "ios", "bytes", "runtime_ms", "iops", "bw_bytes", '
            '"lat_min_ns", "lat_max_ns", "lat_mean_ns" FROM "fio_jobs" '
            'WHERE "run_id" = {run_id:String} ORDER BY "job", "op"',
        ),
        Query(
            "fio_percentiles",
            'SELECT "job", "op", "percentile", "lat_ns" FROM "fio_percentiles" '
            'WHERE "run_id" = {run_id:String} ORDER BY "job", "op", "percentile"',
        ),
        Query(
            "fio_totals",
            'SELECT "op", count() AS jobs, sum("ios") AS ios, sum("bytes") AS bytes, '
            'sum("iops") AS iops FROM "fio_jobs" WHERE "run_id" = {run_id:String} '
            'GROUP BY "op" ORDER BY "op"',
        ),
        Query(
            "fio_sample_latency", _sample_latency_sql("clickhouse"), _sample_latency_sql("duckdb")
        ),
        Query(
            "workload_streams",
            'SELECT "database", "stream", "ios", "bytes", "per_s", "avg_bytes", "lat_avg_ms", '
            '"lat_max_ms" FROM "workload_streams" WHERE "run_id" = {run_id:String} '
            'ORDER BY "database", "stream"',
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


def fio_jobs(store: Store, run_id: str) -> list[dict]:
    """A replay's fio jobs, one row per job and direction, with fio's percentiles."""
    cols = ["job", "op", "ios", "bytes", "runtime_ms", "iops", "bw_bytes"]
    cols += ["lat_min_ns", "lat_max_ns", "lat_mean_ns"]
    out = _records(store, "fio_jobs", cols, run_id=run_id)
    pcts: dict[tuple[str, str], dict[str, int]] = {}
    for job, op, q, v in run(store, "fio_percentiles", run_id=run_id):
        pcts.setdefault((job, op), {})[f"{q:g}"] = int(v)
    for r in out:
        r["clat_percentiles_ns"] = pcts.get((r["job"], r["op"]), {})
    return out


def fio_summary(store: Store, run_id: str) -> list[dict]:
    """Per fio direction: jobs, I/Os, bytes and summed IOPS (fio's own totals)."""
    return _records(store, "fio_totals", ["op", "jobs", "ios", "bytes", "iops"], run_id=run_id)


def fio_sample_latency(store: Store, run_id: str) -> list[dict]:
    """Per op, from fio's per-I/O latency logs: count, sum, min, max, exact percentiles."""
    cols = ["op", "ios", "sum_ns", "min_ns", "max_ns", *(n for _, n in LEVELS)]
    out = _records(store, "fio_sample_latency", cols, run_id=run_id)
    names = schemas.op_names()
    for r in out:
        r["op_name"] = names.get(r["op"], str(r["op"]))
    return out


def workload_report(store: Store, run_id: str) -> dict[str, list[dict]]:
    """A workload run's report rows: per database (and `total`), per database and stream."""
    cols = ["database", "target_iops", "achieved_iops", "db_read_avg_ms", "db_write_avg_ms"]
    cols += ["log_write_avg_ms", "verdict"]
    scols = ["database", "stream", "ios", "bytes", "per_s", "avg_bytes", "lat_avg_ms"]
    scols += ["lat_max_ms"]
    return {
        "databases": _records(store, "workload_reports", cols, run_id=run_id),
        "streams": _records(store, "workload_streams", scols, run_id=run_id),
    }


def children(store: Store, run_id: str) -> list[dict]:
    """The visible runs whose parent is `run_id` (the replays of a trace)."""
    return _records(store, "run_children", ["id", "name", "kind"], id=run_id)


# ------------------------------------------------------- filtered queries (the server)
#
# Every query below takes the same filter parameters, so that every server endpoint
# filters the same way. "Any" is a sentinel (-1, or the full range) rather than NULL:
# a bound NULL has no type in DuckDB, and a sentinel keeps one SQL text per query.

ANY = -1
MAX_BYTES = 2**32 - 1
MAX_NS = 2**63 - 1


@dataclass(frozen=True)
class EventFilter:
    """Which events of a run a query looks at; ids already resolved (no names)."""

    op: int = ANY
    stream: int = ANY
    dev: int = ANY
    min_bytes: int = 0
    max_bytes: int = MAX_BYTES
    t_from_ns: int = 0
    t_to_ns: int = MAX_NS

    def params(self, run_id: str) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "op": self.op,
            "stream": self.stream,
            "dev": self.dev,
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "t_from": self.t_from_ns,
            "t_to": self.t_to_ns,
        }

    def is_any(self) -> bool:
        return self == EventFilter()


def _p(dialect: str, name: str, ch_type: str, duck_type: str = "BIGINT") -> str:
    # DuckDB infers a parameter's type from its first use; a cast keeps -1 from
    # being read as the UTINYINT of the column it is compared with.
    return f"{{{name}:{ch_type}}}" if dialect == "clickhouse" else f"CAST(${name} AS {duck_type})"


def _where(dialect: str) -> str:
    p = lambda n, t="Int64": _p(dialect, n, t)  # noqa: E731
    run = _p(dialect, "run_id", "String", "VARCHAR")
    return (
        f'"run_id" = {run} '
        f'AND ({p("op")} < 0 OR "op" = {p("op")}) '
        f'AND ({p("stream")} < 0 OR "stream" = {p("stream")}) '
        f'AND ({p("dev")} < 0 OR "dev" = {p("dev")}) '
        f'AND "bytes" >= {p("min_bytes")} AND "bytes" <= {p("max_bytes")} '
        f'AND "ts_complete_ns" >= {p("t_from")} AND "ts_complete_ns" <= {p("t_to")}'
    )


# A latency metric: the expression (ns) and when it is known. Device time needs the
# issue time, queue time the queue time too; 0 means the recorder did not see it.
METRICS = {
    "device": (
        'CAST("ts_complete_ns" - "ts_issue_ns" AS Int64)',
        '"ts_issue_ns" > 0 AND "ts_complete_ns" >= "ts_issue_ns"',
    ),
    "queue": (
        'CAST("ts_issue_ns" - "ts_queue_ns" AS Int64)',
        '"ts_queue_ns" > 0 AND "ts_issue_ns" >= "ts_queue_ns"',
    ),
}

# Log-linear buckets as fio's: values below 64 ns are their own bucket; above, each
# power of two [2^e, 2^(e+1)) is cut into 64 equal sub-buckets. The index is
# (e - 5) * 64 + (v >> (e - 6)) - 64, so it rises with v and has no gaps.
SUB_BUCKET_BITS = 6


def _bucket(dialect: str, v: str, e: str) -> str:
    shift = f"bitShiftRight({v}, {e} - 6)" if dialect == "clickhouse" else f"({v} >> ({e} - 6))"
    return f"CASE WHEN {v} < 64 THEN {v} ELSE ({e} - 5) * 64 + {shift} - 64 END"


def _e(dialect: str) -> str:
    # floor(log2(v)): exact for the integers a latency can be (< 2^53 ns).
    if dialect == "clickhouse":
        return "toInt64(floor(log2(greatest(v, 1))))"
    return "CAST(floor(log2(greatest(v, 1))) AS BIGINT)"


def _metric(dialect: str, metric: str) -> tuple[str, str]:
    expr, known = METRICS[metric]
    return (expr.replace("Int64", "BIGINT") if dialect == "duckdb" else expr), known


def _values(dialect: str, metric: str, extra: str = "") -> str:
    """Rows (dev, op, stream, v) of the filtered events where the metric is known."""
    expr, known = _metric(dialect, metric)
    return (
        f'SELECT "dev" AS dev, "op" AS op, "stream" AS stream, {expr} AS v{extra} '
        f'FROM "events" WHERE {_where(dialect)} AND {known}'
    )


def _hist_sql(dialect: str, metric: str) -> str:
    mid = f"SELECT dev, op, stream, v, {_e(dialect)} AS e FROM ({_values(dialect, metric)}) AS x0"
    return (
        f"SELECT dev, op, stream, {_bucket(dialect, 'v', 'e')} AS b, count() AS n, "
        f"sum(v) AS s, min(v) AS lo, max(v) AS hi FROM ({mid}) AS x1 "
        "GROUP BY dev, op, stream, b ORDER BY dev, op, stream, b"
    )


# Exact percentiles reported on request: order statistics as `op_latency` defines them.
EXACT_LEVELS = IDENT_LEVELS


def _exact_sql(dialect: str, metric: str, grouped: bool) -> str:
    keys = "op, stream" if grouped else "-1 AS op, -1 AS stream"
    group = " GROUP BY op, stream ORDER BY op, stream" if grouped else ""
    src = f"({_values(dialect, metric)}) AS x0"
    if dialect == "duckdb":
        pcts = ", ".join(f"quantile_disc(v, {q}) AS {n}" for q, n in EXACT_LEVELS)
        return (
            f"SELECT {keys}, count() AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi, {pcts} "
            f"FROM {src}{group}"
        )
    pcts = ", ".join(
        f"arrayElement(a, toUInt64(greatest(1, ceil(n * {q})))) AS {n}" for q, n in EXACT_LEVELS
    )
    return (
        f"SELECT op, stream, n, s, lo, hi, {pcts} FROM (SELECT {keys}, count() AS n, "
        f"sum(v) AS s, min(v) AS lo, max(v) AS hi, arraySort(groupArray(v)) AS a "
        f"FROM {src}{group})"
    )


def _timeseries_sql(dialect: str) -> str:
    expr, known = _metric(dialect, "device")
    if dialect == "duckdb":
        k = 'CAST("ts_complete_ns" AS BIGINT) // CAST($step AS BIGINT)'
        v = f"CASE WHEN {known} THEN {expr} END"
        pcts = "quantile_disc(v, 0.5) AS p50, quantile_disc(v, 0.99) AS p99"
        inner_pcts = ""
    else:
        k = 'intDiv(toInt64("ts_complete_ns"), {step:Int64})'
        v = f"if({known}, {expr}, NULL)"
        pcts = (
            "arrayElement(a, toUInt64(greatest(1, ceil(length(a) * 0.5)))) AS p50, "
            "arrayElement(a, toUInt64(greatest(1, ceil(length(a) * 0.99)))) AS p99"
        )
        inner_pcts = ", arraySort(groupArray(v)) AS a"
    inner = f'SELECT {k} AS k, "bytes" AS nb, {v} AS v FROM "events" WHERE {_where(dialect)}'
    agg = "k, count() AS ios, sum(nb) AS nbytes, count(v) AS nlat, sum(v) AS slat, max(v) AS hi"
    if dialect == "duckdb":
        return f"SELECT {agg}, {pcts} FROM ({inner}) AS x0 GROUP BY k ORDER BY k"
    return (
        f"SELECT k, ios, nbytes, nlat, slat, hi, {pcts} FROM "
        f"(SELECT {agg}{inner_pcts} FROM ({inner}) AS x0 GROUP BY k) ORDER BY k"
    )


def _heatmap_sql(dialect: str) -> str:
    if dialect == "duckdb":
        u = lambda n: f"CAST(${n} AS UBIGINT)"  # noqa: E731
        ti = f'("ts_complete_ns" - {u("t0")}) // {u("t_step")}'
        oi = f'("offset" - {u("o0")}) // {u("o_step")}'
    else:
        ti = 'intDiv("ts_complete_ns" - {t0:UInt64}, {t_step:UInt64})'
        oi = 'intDiv("offset" - {o0:UInt64}, {o_step:UInt64})'
    o0 = _p(dialect, "o0", "UInt64", "UBIGINT")
    return (
        f'SELECT {ti} AS ti, {oi} AS oi, count() AS ios, sum("bytes") AS nbytes '
        f'FROM "events" WHERE {_where(dialect)} AND "offset" >= {o0} '
        "GROUP BY ti, oi ORDER BY ti, oi"
    )


def _both(name: str, build) -> Query:
    return Query(name, build("clickhouse"), build("duckdb"))


for _q in (
    _both("hist_device", lambda d: _hist_sql(d, "device")),
    _both("hist_queue", lambda d: _hist_sql(d, "queue")),
    _both("exact_device_groups", lambda d: _exact_sql(d, "device", True)),
    _both("exact_device_all", lambda d: _exact_sql(d, "device", False)),
    _both("exact_queue_groups", lambda d: _exact_sql(d, "queue", True)),
    _both("exact_queue_all", lambda d: _exact_sql(d, "queue", False)),
    _both("timeseries", _timeseries_sql),
    _both(
        "extent_by_dev",
        lambda d: (
            'SELECT "dev", count() AS ios, min("ts_complete_ns") AS t_lo, '
            'max("ts_complete_ns") AS t_hi, min("offset") AS o_lo, max("offset") AS o_hi '
            f'FROM "events" WHERE {_where(d)} GROUP BY "dev" ORDER BY "dev"'
        ),
    ),
    _both("heatmap", _heatmap_sql),
    _both(
        "filtered_totals",
        lambda d: f'SELECT count() AS ios, sum("bytes") AS nbytes FROM "events" WHERE {_where(d)}',
    ),
    Query(
        "workload_reports",
        'SELECT "database", "target_iops", "achieved_iops", "db_read_avg_ms", '
        '"db_write_avg_ms", "log_write_avg_ms", "verdict" FROM "workload_reports" '
        'WHERE "run_id" = {run_id:String} ORDER BY "database"',
    ),
):
    QUERIES[_q.name] = _q


def records(store: Store, name: str, columns: list[str], **params: Any) -> list[dict]:
    """Rows of the named query as dicts of `columns`, integers as Python ints."""
    return _records(store, name, columns, **params)


# The tiering simulator's inputs: a run's reads and writes, and a device by name.
TIERING_COLUMNS = ("ts_issue_ns", "ts_complete_ns", "dev", "offset", "bytes", "op")
TIERING_EVENTS_QUERY = Query(
    "tiering_events",
    "SELECT "
    + ", ".join(f'"{c}"' for c in TIERING_COLUMNS)
    + ' FROM "events" WHERE "run_id" = {run_id:String} AND "op" <= 1',
)


TIERING_DEVICE_QUERY = Query(
    "tiering_device",
    'SELECT "dev" FROM "devices" WHERE "run_id" = {run_id:String} AND "name" = {name:String}',
)
