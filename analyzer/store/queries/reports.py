"""Reports of a run: per-op latency from its events, IOPS per second, bytes per
stream, and what a replay's fio and a workload run reported."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import schemas
from analyzer.store.queries.core import LEVELS, Query, exact_percentiles, records, register, run
from analyzer.store.queries.core import run_param as _run_param
from analyzer.store.queries.events import seen_sql

if TYPE_CHECKING:
    from analyzer.store.interface import Reader


def _latency_sql(dialect: str) -> str:
    lat = '("ts_complete_ns" - "ts_issue_ns")'
    # Requests with an unknown issue time (0) have no device latency, nor those whose
    # completion is an upper bound (complete_unseen, events.METRICS).
    return (
        f'SELECT "op", count() AS ios, sum({lat}) AS sum_ns, min({lat}) AS min_ns, '
        f"max({lat}) AS max_ns, {exact_percentiles(lat, dialect)} "
        f'FROM "events" WHERE "run_id" = {_run_param(dialect)} AND "ts_issue_ns" > 0 '
        f'AND "ts_complete_ns" >= "ts_issue_ns" AND {seen_sql(dialect)} '
        'GROUP BY "op" ORDER BY "op"'
    )


def _sample_latency_sql(dialect: str) -> str:
    """fio's per-I/O latency samples of a replay, per op: the same summary and the
    same exact order statistics as `op_latency` gives for a trace's events."""
    lat = '"lat_ns"'
    return (
        f'SELECT "op", count() AS ios, sum({lat}) AS sum_ns, min({lat}) AS min_ns, '
        f"max({lat}) AS max_ns, {exact_percentiles(lat, dialect)} "
        f'FROM "fio_latency_samples" WHERE "run_id" = {_run_param(dialect)} '
        'GROUP BY "op" ORDER BY "op"'
    )


register(
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
    Query("fio_sample_latency", _sample_latency_sql("clickhouse"), _sample_latency_sql("duckdb")),
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
    Query(
        "workload_reports",
        'SELECT "database", "target_iops", "achieved_iops", "db_read_avg_ms", '
        '"db_write_avg_ms", "log_write_avg_ms", "verdict" FROM "workload_reports" '
        'WHERE "run_id" = {run_id:String} ORDER BY "database"',
    ),
)


def op_latency(store: Reader, run_id: str) -> list[dict[str, Any]]:
    """Per op: count, sum, min, max and exact percentiles of device latency (ns)."""
    cols = ["op", "ios", "sum_ns", "min_ns", "max_ns", *(n for _, n in LEVELS)]
    out = records(store, "op_latency", cols, run_id=run_id)
    names = schemas.op_names()
    for r in out:
        r["op_name"] = names.get(r["op"], str(r["op"]))
    return out


def iops_per_second(store: Reader, run_id: str) -> list[dict[str, Any]]:
    """Completed requests and bytes in each whole second since the trace start."""
    return records(store, "iops_per_second", ["second", "ios", "bytes"], run_id=run_id)


def bytes_by_stream(store: Reader, run_id: str) -> list[dict[str, Any]]:
    """Requests and bytes per stream, with the stream's name for this run."""
    names = dict(run(store, "run_streams", run_id=run_id))
    out = records(store, "bytes_by_stream", ["stream", "ios", "bytes"], run_id=run_id)
    for r in out:
        r["stream_name"] = names.get(r["stream"], f"stream-{r['stream']}")
    return out


def fio_jobs(store: Reader, run_id: str) -> list[dict[str, Any]]:
    """A replay's fio jobs, one row per job and direction, with fio's percentiles."""
    cols = ["job", "op", "ios", "bytes", "runtime_ms", "iops", "bw_bytes"]
    cols += ["lat_min_ns", "lat_max_ns", "lat_mean_ns"]
    out = records(store, "fio_jobs", cols, run_id=run_id)
    pcts: dict[tuple[str, str], dict[str, int]] = {}
    for job, op, q, v in run(store, "fio_percentiles", run_id=run_id):
        pcts.setdefault((job, op), {})[f"{q:g}"] = int(v)
    for r in out:
        r["clat_percentiles_ns"] = pcts.get((r["job"], r["op"]), {})
    return out


def fio_summary(store: Reader, run_id: str) -> list[dict[str, Any]]:
    """Per fio direction: jobs, I/Os, bytes and summed IOPS (fio's own totals)."""
    return records(store, "fio_totals", ["op", "jobs", "ios", "bytes", "iops"], run_id=run_id)


def fio_sample_latency(store: Reader, run_id: str) -> list[dict[str, Any]]:
    """Per op, from fio's per-I/O latency logs: count, sum, min, max, exact percentiles."""
    cols = ["op", "ios", "sum_ns", "min_ns", "max_ns", *(n for _, n in LEVELS)]
    out = records(store, "fio_sample_latency", cols, run_id=run_id)
    names = schemas.op_names()
    for r in out:
        r["op_name"] = names.get(r["op"], str(r["op"]))
    return out


def workload_report(store: Reader, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """A workload run's report rows: per database (and `total`), per database and stream."""
    cols = ["database", "target_iops", "achieved_iops", "db_read_avg_ms", "db_write_avg_ms"]
    cols += ["log_write_avg_ms", "verdict"]
    scols = ["database", "stream", "ios", "bytes", "per_s", "avg_bytes", "lat_avg_ms"]
    scols += ["lat_max_ms"]
    return {
        "databases": records(store, "workload_reports", cols, run_id=run_id),
        "streams": records(store, "workload_streams", scols, run_id=run_id),
    }
