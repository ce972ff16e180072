"""The tiering simulator's inputs: a run's reads and writes, and a device by name."""

from __future__ import annotations

from analyzer.store.queries.core import Query

TIERING_COLUMNS = ("ts_issue_ns", "ts_complete_ns", "dev", "offset", "bytes", "op")
TIERING_EVENTS_QUERY = Query(
    "tiering_events",
    "SELECT "
    + ", ".join(f'"{c}"' for c in TIERING_COLUMNS)
    + ' FROM "events" WHERE "run_id" = {run_id:String} AND "op" <= 1',
)


# The same rows with each one's stream (the lab's prediction tells a session's reads
# from the maintenance's).
TIERING_STREAM_QUERY = Query(
    "tiering_events_streams",
    "SELECT "
    + ", ".join(f'"{c}"' for c in (*TIERING_COLUMNS, "stream"))
    + ' FROM "events" WHERE "run_id" = {run_id:String} AND "op" <= 1',
)


TIERING_DEVICE_QUERY = Query(
    "tiering_device",
    'SELECT "dev" FROM "devices" WHERE "run_id" = {run_id:String} AND "name" = {name:String}',
)
