"""Every SQL text the analyzer runs, by concern, in the ClickHouse and the DuckDB
dialect: the registry (core), the catalog's (runs), a run's reports (reports), the
server's filtered queries (events), the tiering simulator's (tiering), and what each
backend runs for itself (duckdb_sql, clickhouse_sql). See core.py for how a query is
written once for both engines."""

from analyzer.store.queries.core import LEVELS, QUERIES, Query, records, run
from analyzer.store.queries.events import (
    ANY,
    EXACT_LEVELS,
    MAX_BYTES,
    MAX_NS,
    METRICS,
    SUB_BUCKET_BITS,
    EventFilter,
)
from analyzer.store.queries.reports import (
    bytes_by_stream,
    fio_jobs,
    fio_sample_latency,
    fio_summary,
    iops_per_second,
    op_latency,
    workload_report,
)
from analyzer.store.queries.runs import children
from analyzer.store.queries.tiering import (
    TIERING_COLUMNS,
    TIERING_DEVICE_QUERY,
    TIERING_EVENTS_QUERY,
    TIERING_STREAM_QUERY,
)

__all__ = [
    "ANY",
    "EXACT_LEVELS",
    "LEVELS",
    "MAX_BYTES",
    "MAX_NS",
    "METRICS",
    "QUERIES",
    "SUB_BUCKET_BITS",
    "TIERING_COLUMNS",
    "TIERING_DEVICE_QUERY",
    "TIERING_EVENTS_QUERY",
    "TIERING_STREAM_QUERY",
    "EventFilter",
    "Query",
    "bytes_by_stream",
    "children",
    "fio_jobs",
    "fio_sample_latency",
    "fio_summary",
    "iops_per_second",
    "op_latency",
    "records",
    "run",
    "workload_report",
]
