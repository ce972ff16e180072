"""The run catalog: the `runs` table, and how a RUN argument finds a run.

A run's row moves loading -> ready (ingest), ready -> deleted (`runs delete`).
Only `ready` runs are visible. On DuckDB a state change rewrites the row inside
the caller's transaction; on ClickHouse it inserts a newer version of the row
(ReplacingMergeTree), and readers take the newest through the `runs_latest` view.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from analyzer.store import queries
from analyzer.store.interface import Reader, Store
from analyzer.store.tags import parse_tags as parse_tags  # as before, for `iotape runs`
from base.errors import IotapeError
from schemas import workload_header
from schemas.tables import table

RUN_COLUMNS = table("runs").column_names()
KINDS: tuple[str, ...] = table("runs").column("kind").enum or ()
JSON_COLUMNS = ("parameters", "header", "tags")

_clock = threading.Lock()
_last_version = 0


def next_version() -> int:
    """A version larger than any this process handed out before (ns clock, made strict)."""
    global _last_version
    with _clock:
        _last_version = max(time.time_ns(), _last_version + 1)
        return _last_version


def _from_row(row: tuple) -> dict[str, Any]:
    run = dict(zip(RUN_COLUMNS, row, strict=True))
    for c in JSON_COLUMNS:
        run[c] = json.loads(run[c]) if run[c] else {}
    return run


def _to_row(run: dict[str, Any]) -> dict[str, Any]:
    row = {c: run[c] for c in RUN_COLUMNS}
    for c in JSON_COLUMNS:
        row[c] = json.dumps(run[c], ensure_ascii=False, sort_keys=True)
    return row


def all_runs(store: Reader, states: tuple[str, ...] = ("ready",)) -> list[dict[str, Any]]:
    """Runs in the given states, oldest start first."""
    return [r for r in map(_from_row, queries.run(store, "runs_all")) if r["state"] in states]


def get(store: Reader, run_id: str) -> dict[str, Any] | None:
    """The newest row of run `run_id`, whatever its state."""
    rows = queries.run(store, "run_by_id", id=run_id)
    return _from_row(rows[0]) if rows else None


def put(store: Store, run: dict[str, Any]) -> dict[str, Any]:
    """Write `run` as the run's current row (a new version)."""
    run = {**run, "version": next_version()}
    store.drop_old_run_row(run["id"])
    store.insert_rows("runs", [_to_row(run)])
    return run


def resolve(store: Reader, ref: str) -> dict[str, Any]:
    """The visible run that `ref` names: its id, its name, or a unique prefix of its id."""
    runs = all_runs(store)
    for key in ("id", "name"):
        hits = [r for r in runs if r[key] == ref]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            ids = ", ".join(r["id"] for r in hits)
            raise IotapeError(f"run {ref!r}: {len(hits)} runs have this {key} ({ids}); give an id")
    if len(ref) >= 4:
        hits = [r for r in runs if r["id"].startswith(ref)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise IotapeError(
                f"run {ref!r}: the prefix matches {len(hits)} runs; give more of the id"
            )
    raise IotapeError(f"run {ref!r}: no such run (`iotape runs list` shows them)")


def name_in_use(store: Reader, name: str, run_id: str) -> bool:
    return any(r["name"] == name and r["id"] != run_id for r in all_runs(store))


def delete(store: Store, ref: str, data_tables: tuple[str, ...]) -> dict[str, Any]:
    """Hide the run at once, then remove its rows from every data table."""
    run = resolve(store, ref)
    with store.transaction():
        put(store, {**run, "state": "deleted"})
        for t in data_tables:
            store.delete_run_rows(t, run["id"])
        # The `deleted` row stays only where the engine keeps versions (ClickHouse).
        store.drop_old_run_row(run["id"])
    return run


def tag(store: Store, ref: str, set_tags: dict[str, str], remove: list[str]) -> dict[str, Any]:
    """Set and remove tags of a run; returns the run as it is now."""
    run = resolve(store, ref)
    tags = {k: v for k, v in run["tags"].items() if k not in remove}
    tags.update(set_tags)
    with store.transaction():
        return put(store, {**run, "tags": tags})


def sequence_tags(metadata: dict | None) -> dict[str, str]:
    """The tag linking the phases of one ESRP sequence, from a workload run's
    config or a trace header's metadata; empty for a run of its own. Here, not in
    ingest_workload.py: a trace's ingest needs it, and not the workload report's
    model (pydantic, 0.1 s of imports)."""
    seq = (metadata or {}).get(workload_header.SEQUENCE)
    return {"sequence": seq} if isinstance(seq, str) and seq else {}
