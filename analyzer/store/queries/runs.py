"""The catalog's queries: runs, their devices and streams, their replays, and the
statements that rewrite or remove a run's row (DuckDB updates it in place)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import schemas
from analyzer.store.queries.core import Query, records, register
from schemas.tables import quote, table

if TYPE_CHECKING:
    from analyzer.store.interface import Reader


def _runs_columns() -> str:
    return ", ".join(quote(c) for c in table("runs").column_names())


register(
    Query(
        "runs_all",
        f'SELECT {_runs_columns()} FROM "runs_latest" ORDER BY "start_ns", "ingested_ns", "id"',
    ),
    Query("run_by_id", f'SELECT {_runs_columns()} FROM "runs_latest" WHERE "id" = {{id:String}}'),
    Query("run_events", 'SELECT count() FROM "events" WHERE "run_id" = {run_id:String}'),
    Query(
        "run_devices",
        'SELECT "dev", "name", "model", "firmware", "rotational", "logical_block_size", '
        '"capacity_bytes", "partition_name", "partition_start_bytes" FROM "devices" '
        'WHERE "run_id" = {run_id:String} ORDER BY "dev"',
    ),
    Query(
        "run_streams",
        'SELECT "stream", "name" FROM "streams" WHERE "run_id" = {run_id:String} ORDER BY "stream"',
    ),
    Query(
        "export_events",
        "SELECT "
        + ", ".join(quote(c) for c in schemas.column_names())
        + ' FROM "events" WHERE "run_id" = {run_id:String} '
        'ORDER BY "ts_complete_ns", "dev", "offset", "ts_issue_ns"',
    ),
    Query(
        "run_children",
        'SELECT "id", "name", "kind" FROM "runs_ready" WHERE "parent_id" = {id:String} '
        'ORDER BY "start_ns", "id"',
    ),
)


def children(store: Reader, run_id: str) -> list[dict[str, Any]]:
    """The visible runs whose parent is `run_id` (the replays of a trace)."""
    return records(store, "run_children", ["id", "name", "kind"], id=run_id)
