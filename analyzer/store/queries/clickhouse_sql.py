"""The SQL the ClickHouse stores (server and chDB) run for themselves: inserts,
deletes, introspection, the database, and the session's settings."""

from __future__ import annotations

from schemas.tables import quote, table

HAS_TABLES = (
    "SELECT count() FROM system.tables WHERE database = currentDatabase() "
    "AND name IN ('runs', 'events')"
)
EVENTS_ENGINE = (
    "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = 'events'"
)
# Reads, and settings may change, but no writes or DDL.
READ_ONLY = "SET readonly = 2"


def max_execution_time(seconds: float) -> str:
    return f"SET max_execution_time = {int(seconds)}"


def create_database(database: str, cluster: str | None = None) -> str:
    on = f" ON CLUSTER {quote(cluster)}" if cluster is not None else ""
    return f"CREATE DATABASE IF NOT EXISTS {quote(database)}{on}"


def insert_row(table_name: str) -> str:
    # INSERT ... SELECT binds every value; VALUES would be parsed as data, unbound.
    t = table(table_name)
    names = t.column_names()
    cols = ", ".join(quote(c) for c in names)
    marks = ", ".join(f"{{{c}:{t.column(c).param_type()}}}" for c in names)
    return f"INSERT INTO {quote(t.name)} ({cols}) SELECT {marks}"


def insert_from_python(table_name: str) -> str:
    """chDB: every column but run_id from the Python variable `src` (an Arrow table)."""
    t = table(table_name)
    names = ", ".join(quote(c) for c in t.column_names() if c != "run_id")
    return (
        f"INSERT INTO {quote(t.name)} ({quote('run_id')}, {names}) "
        f"SELECT {{run_id:String}}, {names} FROM Python(src)"
    )


def delete_run_rows(table_name: str, cluster: str | None) -> str:
    # Distributed tables take no DELETE: a cluster's rows go from its `_local` tables.
    t = table(table_name)
    local = f"{quote(t.name + '_local')} ON CLUSTER {quote(cluster)}" if cluster else None
    target = local or quote(t.name)
    return f"DELETE FROM {target} WHERE {quote('run_id')} = {{run_id:String}}"
