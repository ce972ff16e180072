"""`iotape ingest`: a file becomes one run, with all its parts, or nothing.

Sources, told apart by what the path is:
- `.iot` traces, and Parquet written by `iotape trace convert` (it keeps the trace
  header in the Parquet metadata key "iotape.header"): a run of kind capture or
  import, its events, devices and streams;
- a `.json` file: a workload report (`iotape workload run --report`), a run of
  kind workload with its per-database and per-stream rows (ingest_workload.py);
- a directory: a replay job directory (`iotape replay plan` + `run`), a run of
  kind replay with fio's job summaries, percentiles and per-I/O latencies, and
  the re-recorded trace's events when the replay was recorded (ingest_replay.py).

Trace chunks become Arrow batches (numpy, no per-row Python; event_batches.py) on
a helper thread while the engine stores the previous ones.

Idempotent: the run id is the start of the source's SHA-256 (of a trace, over its
header, chunk headers and footer, whose CRCs stand for the records; of other
files, of their bytes; of a job directory, of the files that make up its
result), so a source already ingested is found before any work and reported as a
no-op. Atomic: the run row
says `loading` until every part is in and only `ready` runs are visible; on
DuckDB the whole ingest is one transaction besides. A retry after a crash
removes whatever the dead ingest left and loads the source again.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from analyzer.store import catalog
from analyzer.store.early import Early, open_early
from analyzer.store.interface import Store
from analyzer.store.trace_source import Progress, file_sha256, open_trace_source, source_sha256
from base.errors import IotapeError

# Shared with the replay ingest in trace_source.py; importable from here as before.
__all__ = ["DATA_TABLES", "IngestResult", "file_sha256", "ingest", "open_trace_source"]
__all__ += ["Early", "open_early", "source_sha256"]

# Every table that holds rows of a run, for deletes and for cleaning up after a crash.
DATA_TABLES = (
    "events",
    "devices",
    "streams",
    "fio_jobs",
    "fio_percentiles",
    "fio_latency_samples",
    "workload_reports",
    "workload_streams",
)


@dataclass
class IngestResult:
    path: str
    run_id: str
    name: str
    kind: str
    events: int
    skipped: bool
    seconds: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ingest(
    store: Store,
    path: str | Path,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    progress: Progress | None = None,
    early: Early | None = None,
) -> IngestResult:
    """Ingest one trace, Parquet file, workload report or replay job directory into
    `store` as one run. Returns what was done. `early`: `path` as `open_early`
    opened it, before the store (this closes it)."""
    started = time.perf_counter()
    p = Path(path)
    if early is None:
        early = Early(p, start=False)
    elif early.path != p:
        raise ValueError(f"{early.path} was opened early, not {p}")
    sha = early.sha
    run_id = sha[:12]
    existing = catalog.get(store, run_id)
    if existing is not None and existing["state"] == "ready":
        early.close()
        return IngestResult(
            str(p),
            run_id,
            existing["name"],
            existing["kind"],
            int(existing["events"]),
            True,
            time.perf_counter() - started,
            f"{p}: already ingested as run {run_id} ({existing['name']}); nothing to do",
        )
    with early.take() as src:
        run = _new_run(store, src.describe(store), p, sha, run_id, name, tags or {})
        with store.transaction():
            if existing is not None:
                # An ingest that died (ClickHouse keeps what it inserted) or a deleted
                # run whose rows are still going: start from nothing.
                for t in DATA_TABLES:
                    store.delete_run_rows(t, run_id)
            catalog.put(store, run)
            loaded = src.load(store, run_id, progress)
            summary = loaded.pop("summary", None) or f"{loaded.get('events', 0):,} events"
            run.update(loaded, state="ready")
            catalog.put(store, run)
    return IngestResult(
        str(p),
        run_id,
        run["name"],
        run["kind"],
        int(run["events"]),
        False,
        time.perf_counter() - started,
        f"{p}: run {run_id} ({run['name']}): {summary}",
    )


# --------------------------------------------------------------------------- the run


def _new_run(
    store: Store,
    fields: dict[str, Any],
    p: Path,
    sha: str,
    run_id: str,
    name: str | None,
    tags: dict[str, str],
) -> dict[str, Any]:
    if name is not None:
        if not name.strip():
            raise IotapeError("--name: empty")
        if catalog.name_in_use(store, name, run_id):
            raise IotapeError(f"--name {name!r}: another run has this name")
    else:
        name = p.resolve().name if p.is_dir() else p.stem
        if catalog.name_in_use(store, name, run_id):
            name = f"{name}-{run_id[:6]}"
    return {
        "id": run_id,
        "kind": fields["kind"],
        "name": name,
        "host": fields.get("host", ""),
        "kernel": fields.get("kernel", ""),
        "start_ns": int(fields.get("start_ns", 0)),
        "duration_ns": int(fields.get("duration_ns", 0)),
        "events": 0,
        "bytes": 0,
        "parameters": fields.get("parameters", {}),
        "header": fields.get("header", {}),
        # The user's tags win over those the source brings (a link to a trace).
        "tags": {**fields.get("tags", {}), **tags},
        "parent_id": fields.get("parent_id", ""),
        "source_path": str(p.resolve()),
        "source_sha256": sha,
        "state": "loading",
        "ingested_ns": time.time_ns(),
        "version": 0,
    }
