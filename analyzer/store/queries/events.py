"""The server's filtered queries over a run's events: latency histograms, exact
percentiles, time series, heat maps and totals.

Every query here takes the same filter parameters, so that every server endpoint
filters the same way. "Any" is a sentinel (-1, or the full range) rather than NULL:
a bound NULL has no type in DuckDB, and a sentinel keeps one SQL text per query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import schemas
from analyzer.store.queries.core import both, register, run_param
from schemas.percentiles import IDENT_LEVELS

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
# A record flagged complete_unseen has an upper bound for its completion (the
# kernel never reported it; schemas/trace_record.toml), not a measured one: its
# device time is left out of every latency figure, and counted (`unseen_count`).
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


UNSEEN = 1 << schemas.bits("flag")["complete_unseen"]


def seen_sql(dialect: str) -> str:
    """The record's completion was reported by the kernel (not complete_unseen)."""
    if dialect == "clickhouse":
        return f'bitAnd("flags", {UNSEEN}) = 0'
    return f'("flags" & {UNSEEN}) = 0'


def _metric(dialect: str, metric: str) -> tuple[str, str]:
    expr, known = METRICS[metric]
    if metric == "device":
        known = f"{known} AND {seen_sql(dialect)}"
    return (expr.replace("Int64", "BIGINT") if dialect == "duckdb" else expr), known


def _unseen_sql(dialect: str) -> str:
    """Records left out of device time as complete_unseen, per op and stream."""
    return (
        'SELECT "op" AS op, "stream" AS stream, count() AS n FROM "events" '
        f"WHERE {_where(dialect)} AND NOT ({seen_sql(dialect)}) "
        "GROUP BY op, stream ORDER BY op, stream"
    )


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
        # One quantile_disc of the list of levels: the values are gathered and
        # ordered once, where one call per level did it five times (2.5x the time).
        levels = ", ".join(str(q) for q, _ in EXACT_LEVELS)
        pcts = ", ".join(f"q[{i}] AS {n}" for i, (_, n) in enumerate(EXACT_LEVELS, start=1))
        return (
            f"SELECT op, stream, n, s, lo, hi, {pcts} FROM (SELECT {keys}, count() AS n, "
            f"sum(v) AS s, min(v) AS lo, max(v) AS hi, quantile_disc(v, [{levels}]) AS q "
            f"FROM {src}{' GROUP BY op, stream' if grouped else ''}) AS x1"
            f"{' ORDER BY op, stream' if grouped else ''}"
        )
    pcts = ", ".join(
        f"arrayElement(a, toUInt64(greatest(1, ceil(n * {q})))) AS {n}" for q, n in EXACT_LEVELS
    )
    return (
        f"SELECT op, stream, n, s, lo, hi, {pcts} FROM (SELECT {keys}, count() AS n, "
        f"sum(v) AS s, min(v) AS lo, max(v) AS hi, arraySort(groupArray(v)) AS a "
        f"FROM {src}{group})"
    )


def _exact_latency_sql(dialect: str) -> str:
    """Both metrics' exact statistics, per (op, stream) and over all (op = stream =
    -1), as rows (metric: 0 device, 1 queue, op, stream, n, s, lo, hi, levels...,
    unseen: the records left out as complete_unseen, what `unseen_count` gives,
    NULL where not counted here). DuckDB reads the events once for all four
    (grouping sets, a metric unknown for a request is NULL there) and counts the
    unseen records in the same read: separate queries read them five times."""
    if dialect != "duckdb":
        parts = [
            f"SELECT {m} AS metric, *, NULL AS unseen FROM ({_exact_sql(dialect, metric, g)})"
            for m, metric in enumerate(("device", "queue"))
            for g in (False, True)
        ]
        return f"SELECT * FROM ({' UNION ALL '.join(parts)}) ORDER BY metric, op, stream"
    levels = ", ".join(str(q) for q, _ in EXACT_LEVELS)
    cols = []
    for v, metric in (("d", "device"), ("q", "queue")):
        expr, known = _metric(dialect, metric)
        cols.append(f"CASE WHEN {known} THEN {expr} END AS {v}")
    inner = (
        f'SELECT "op" AS op, "stream" AS stream, {", ".join(cols)}, '
        f"NOT ({seen_sql(dialect)}) AS u "
        f'FROM "events" WHERE {_where(dialect)}'
    )
    aggs = ", ".join(
        f"count({v}) AS {v}n, sum({v}) AS {v}s, min({v}) AS {v}lo, max({v}) AS {v}hi, "
        f"quantile_disc({v}, [{levels}]) AS {v}q"
        for v in ("d", "q")
    )
    aggs += ", count(*) FILTER (WHERE u) AS un"
    grouped = (
        "SELECT CASE WHEN grouping(op) = 1 THEN -1 ELSE op END AS op, "
        f"CASE WHEN grouping(stream) = 1 THEN -1 ELSE stream END AS stream, {aggs} "
        f"FROM ({inner}) AS x0 GROUP BY GROUPING SETS ((op, stream), ())"
    )

    def one(m: int, v: str) -> str:
        pcts = ", ".join(f"{v}q[{i}] AS {n}" for i, (_, n) in enumerate(EXACT_LEVELS, start=1))
        return (
            f"SELECT {m} AS metric, op, stream, {v}n AS n, {v}s AS s, {v}lo AS lo, "
            f"{v}hi AS hi, {pcts}, un AS unseen FROM x"
        )

    return (
        f"WITH x AS MATERIALIZED ({grouped}) {one(0, 'd')} UNION ALL {one(1, 'q')} "
        "ORDER BY metric, op, stream"
    )


def _candidates_sql(dialect: str, whole_run: bool = False) -> str:
    """The filtered events' (op, stream, device time, queue time, complete_unseen),
    a metric unknown for a request as -1: what analyses.exact_select reads. With
    `whole_run`, every event of the run (run_id its one parameter): the filter's
    terms, true for every row of an unfiltered request, still read and compared
    `dev`, `bytes` and the completion time (10-20 % of the read's CPU)."""
    cols = []
    for v, metric in (("d", "device"), ("q", "queue")):
        expr, known = _metric(dialect, metric)
        cols.append(f"CASE WHEN {known} THEN {expr} ELSE -1 END AS {v}")
    where = f'"run_id" = {run_param(dialect)}' if whole_run else _where(dialect)
    return (
        f'SELECT "op" AS op, "stream" AS stream, {", ".join(cols)}, '
        f'NOT ({seen_sql(dialect)}) AS u FROM "events" WHERE {where}'
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


register(
    both("hist_device", lambda d: _hist_sql(d, "device")),
    both("hist_queue", lambda d: _hist_sql(d, "queue")),
    both("exact_device_groups", lambda d: _exact_sql(d, "device", True)),
    both("exact_device_all", lambda d: _exact_sql(d, "device", False)),
    both("exact_queue_groups", lambda d: _exact_sql(d, "queue", True)),
    both("exact_queue_all", lambda d: _exact_sql(d, "queue", False)),
    both("unseen_count", _unseen_sql),
    both("exact_latency", _exact_latency_sql),
    both("exact_candidates", _candidates_sql),
    both("exact_candidates_run", lambda d: _candidates_sql(d, whole_run=True)),
    both("timeseries", _timeseries_sql),
    both(
        "extent_by_dev",
        lambda d: (
            'SELECT "dev", count() AS ios, min("ts_complete_ns") AS t_lo, '
            'max("ts_complete_ns") AS t_hi, min("offset") AS o_lo, max("offset") AS o_hi '
            f'FROM "events" WHERE {_where(d)} GROUP BY "dev" ORDER BY "dev"'
        ),
    ),
    both("heatmap", _heatmap_sql),
    both(
        "filtered_totals",
        lambda d: f'SELECT count() AS ios, sum("bytes") AS nbytes FROM "events" WHERE {_where(d)}',
    ),
)
