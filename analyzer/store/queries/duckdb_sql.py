"""The SQL the DuckDB store runs for itself: its events view over Parquet files, the
run histograms table, inserts, deletes, introspection and the legacy migration."""

from __future__ import annotations

import schemas
from schemas.tables import quote, table

BEGIN = "BEGIN TRANSACTION"
COMMIT = "COMMIT"
# Every commit from here on a checkpoint, its rows written to the file once instead
# of to the WAL and again at the close (forked_store.py: an ingest's one commit).
CHECKPOINT_AT_COMMIT = "SET checkpoint_threshold = '0B'"

# DuckDB keeps one row per run: a state change deletes it and inserts the new one in
# the caller's transaction.
DELETE_RUN_ROW = 'DELETE FROM "runs" WHERE "id" = $id'

HAS_TABLES = (
    "SELECT count(DISTINCT table_name) FROM information_schema.tables "
    "WHERE table_name IN ('runs', 'events')"
)

# A store from before events went to Parquet has `events` as a table of its own.
LEGACY_EVENTS_TABLE = (
    "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main' "
    "AND table_name = 'events' AND table_type = 'BASE TABLE'"
)
LEGACY_RUNS = 'SELECT DISTINCT "run_id" FROM main."events"'
DROP_LEGACY_EVENTS = 'DROP TABLE main."events"'


def legacy_run_events() -> str:
    cols = ", ".join(quote(c) for c in schemas.column_names())
    return f'SELECT {cols} FROM main."events" WHERE "run_id" = $run_id ORDER BY "ts_complete_ns"'


def events_view(pattern: str) -> str:
    """The temporary view `events` over the Parquet files that match `pattern`: run_id
    from the directory, then the record's columns."""
    pattern = pattern.replace("'", "''")
    cols = ", ".join(f'"{c}"' for c in schemas.column_names())
    # hive_types: a run id of 12 decimal digits must stay a string.
    return (
        f'CREATE OR REPLACE TEMP VIEW "events" AS SELECT "run_id", {cols} '
        f"FROM read_parquet('{pattern}', hive_partitioning = true, "
        "hive_types = {'run_id': VARCHAR})"
    )


def insert_from(table_name: str, source: str) -> str:
    """Every column of the table but run_id from a registered Arrow source; run_id bound."""
    t = table(table_name)
    names = ", ".join(quote(c) for c in t.column_names() if c != "run_id")
    return (
        f"INSERT INTO {quote(t.name)} ({quote('run_id')}, {names}) "
        f"SELECT $run_id, {names} FROM {quote(source)}"
    )


def insert_rows(table_name: str, n: int) -> str:
    """`n` rows in one statement: the values of row i bound as $c_i for each column c."""
    t = table(table_name)
    names = t.column_names()
    cols = ", ".join(quote(c) for c in names)
    rows = ", ".join("(" + ", ".join(f"${c}_{i}" for c in names) + ")" for i in range(n))
    return f"INSERT INTO {quote(t.name)} ({cols}) VALUES {rows}"


def delete_run_rows(table_name: str) -> str:
    return f"DELETE FROM {quote(table(table_name).name)} WHERE {quote('run_id')} = $run_id"


# A run's latency histograms, built at ingest (analyzer/store/event_histograms.py).
HISTOGRAMS = "run_histograms"
HISTOGRAMS_DDL = (
    f'CREATE TABLE IF NOT EXISTS "{HISTOGRAMS}" ("run_id" VARCHAR NOT NULL, '
    '"metric" VARCHAR NOT NULL, "dev" BIGINT NOT NULL, "op" BIGINT NOT NULL, '
    '"stream" BIGINT NOT NULL, "b" BIGINT NOT NULL, "n" BIGINT NOT NULL, '
    '"s" HUGEINT NOT NULL, "lo" BIGINT NOT NULL, "hi" BIGINT NOT NULL)'
)
HISTOGRAMS_DELETE = f'DELETE FROM "{HISTOGRAMS}" WHERE "run_id" = $run_id'
HISTOGRAMS_READ = (
    f'SELECT "metric", "dev", "op", "stream", "b", "n", "s", "lo", "hi" FROM "{HISTOGRAMS}" '
    'WHERE "run_id" = $run_id AND "metric" IN ($metric, $built) '
    'ORDER BY "dev", "op", "stream", "b"'
)


def parquet_view(name: str, path: str) -> str:
    """A temporary view `name` of a Parquet file (a forked store's histograms source:
    analyzer/store/forked_store.py)."""
    literal = "'" + path.replace("'", "''") + "'"
    return f"CREATE TEMP VIEW {quote(name)} AS SELECT * FROM read_parquet({literal})"


def drop_view(name: str) -> str:
    return f"DROP VIEW {quote(name)}"


def histograms_insert(source: str) -> str:
    """A run's histograms from `source`'s keyed rows (k: dev << 32 | op << 24 | stream
    << 16 | metric << 15 | bucket; n, s, lo, hi), unpacked here rather than in numpy
    and Python strings, then the row that says they were built. Parameters: run_id,
    metric0 and metric1 (the metric's name by its bit), built."""
    return (
        f'INSERT INTO "{HISTOGRAMS}" SELECT $run_id, '
        'CASE WHEN ("k" >> 15) & 1 = 0 THEN $metric0 ELSE $metric1 END, '
        '("k" >> 32)::BIGINT, (("k" >> 24) & 255)::BIGINT, (("k" >> 16) & 255)::BIGINT, '
        f'("k" & 32767)::BIGINT, "n", "s", "lo", "hi" FROM {quote(source)} '
        "UNION ALL SELECT $run_id, $built, -1, -1, -1, -1, 0, 0, 0, 0"
    )
