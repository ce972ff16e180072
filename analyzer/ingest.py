"""`iotape ingest`: a file becomes one run, with all its parts, or nothing.

Sources:
- `.iot` traces, and Parquet written by `iotape trace convert` (it keeps the trace
  header in the Parquet metadata key "iotape.header");
- workload reports and replay job directories: their formats belong to the
  workload engine and the replayer, which are not built yet, so these are refused
  with a one-line "not yet" error rather than guessed at.

Trace chunks become Arrow batches (numpy, no per-row Python) on a helper thread
while the engine inserts the previous ones.

Idempotent: the run id is the start of the file's SHA-256, so a file already
ingested is found before any work and reported as a no-op. Atomic: the run row
says `loading` until every part is in and only `ready` runs are visible; on
DuckDB the whole ingest is one transaction besides. A retry after a crash
removes whatever the dead ingest left and loads the file again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from iotape import schemas
from iotape.analyzer import catalog
from iotape.analyzer.store import Store
from iotape.errors import IotapeError
from iotape.recorder.tracefile import RECORD_DTYPE, RECORD_SIZE, open_trace, records_to_arrow

# Every table that holds rows of a run, for deletes and for cleaning up after a crash.
DATA_TABLES = (
    "events",
    "devices",
    "streams",
    "fio_jobs",
    "fio_percentiles",
    "fio_latency_samples",
    "workload_reports",
)
# Rows per Arrow batch: trace chunks (8192 records) are gathered to amortize the
# per-batch cost of conversion and of the engine's insert.
BATCH_ROWS = 65_536
PARQUET_SUFFIXES = (".parquet", ".pq")

Progress = Callable[[int, int | None], None]


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
) -> IngestResult:
    """Ingest one file into `store` as one run. Returns what was done."""
    started = time.perf_counter()
    p = Path(path)
    opener = _source_opener(p)
    sha = file_sha256(p)
    run_id = sha[:12]
    existing = catalog.get(store, run_id)
    if existing is not None and existing["state"] == "ready":
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
    with opener(p) as src:
        run = _new_run(store, src, p, sha, run_id, name, tags or {})
        with store.transaction():
            if existing is not None:
                # An ingest that died (ClickHouse keeps what it inserted) or a deleted
                # run whose rows are still going: start from nothing.
                for t in DATA_TABLES:
                    store.delete_run_rows(t, run_id)
            catalog.put(store, run)
            stats = _Stats()
            events = store.insert_batches(
                "events", stats.watch(src.batches(), progress, src.total), run_id
            )
            store.insert_rows("devices", _devices(src.header, run_id))
            store.insert_rows("streams", _streams(src.header, run_id))
            run.update(
                state="ready",
                events=events,
                bytes=stats.bytes,
                duration_ns=stats.last_complete_ns,
            )
            catalog.put(store, run)
    return IngestResult(
        str(p),
        run_id,
        run["name"],
        run["kind"],
        events,
        False,
        time.perf_counter() - started,
        f"{p}: run {run_id} ({run['name']}): {events:,} events",
    )


def file_sha256(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except FileNotFoundError:
        raise IotapeError(f"{path}: no such file") from None
    except PermissionError:
        raise IotapeError(f"{path}: permission denied") from None


# --------------------------------------------------------------------------- sources


class _TraceSource:
    """An `.iot` trace: header, footer, and its records as Arrow batches."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.trace = open_trace(path)
        if self.trace.footer is None:
            self.trace.close()
            raise IotapeError(
                f"{path}: the trace has no footer (cut short?); "
                f"`iotape trace check --repair {path}` makes it complete"
            )
        self.header = self.trace.header
        self.footer = self.trace.footer
        self.total = self.footer.get("events")
        self.extra: dict[str, Any] = {}

    def batches(self) -> Iterator[pa.RecordBatch]:
        return _prefetch(_gathered(self.trace.iter_chunks(), BATCH_ROWS))

    def close(self) -> None:
        self.trace.close()


class _ParquetSource:
    """Parquet from `iotape trace convert`: the schema's columns, the header in metadata."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.file = pq.ParquetFile(path)
        except (OSError, pa.ArrowInvalid) as e:
            raise IotapeError(f"{path}: not a readable Parquet file: {e}") from None
        meta = self.file.schema_arrow.metadata or {}
        if b"iotape.header" not in meta:
            raise IotapeError(
                f"{path}: Parquet without the iotape.header metadata; "
                "only files from `iotape trace convert` can be ingested"
            )
        want = schemas.arrow_schema()
        got = self.file.schema_arrow
        if got.names != want.names or got.types != want.types:
            raise IotapeError(
                f"{path}: columns {got.names} do not match the trace record "
                f"{want.names} with its types"
            )
        self.header = json.loads(meta[b"iotape.header"])
        footer = meta.get(b"iotape.footer")
        self.footer = json.loads(footer) if footer else {}
        self.total = self.file.metadata.num_rows
        self.extra = {
            "partition_relative": meta.get(b"iotape.partition_relative", b"false").decode()
            == "true"
        }

    def batches(self) -> Iterator[pa.RecordBatch]:
        schema = schemas.arrow_schema()
        for b in self.file.iter_batches(batch_size=BATCH_ROWS):
            yield pa.RecordBatch.from_arrays(b.columns, schema=schema)

    def close(self) -> None:
        self.file.close()


def _source_opener(p: Path):
    if p.is_dir():
        raise IotapeError(
            f"{p}: replay job directories cannot be ingested yet: their layout belongs to "
            "the replayer (`iotape replay`), which is not built yet"
        )
    if p.suffix.lower() == ".json":
        raise IotapeError(
            f"{p}: workload reports cannot be ingested yet: their format belongs to the "
            "workload engine (`iotape workload run`), which is not built yet"
        )
    cls = _ParquetSource if p.suffix.lower() in PARQUET_SUFFIXES else _TraceSource

    @contextlib.contextmanager
    def opener(path: Path) -> Iterator[_TraceSource | _ParquetSource]:
        src = cls(path)
        try:
            yield src
        finally:
            src.close()

    return opener


# --------------------------------------------------------------------------- the run


def _new_run(
    store: Store,
    src: _TraceSource | _ParquetSource,
    p: Path,
    sha: str,
    run_id: str,
    name: str | None,
    tags: dict[str, str],
) -> dict[str, Any]:
    h = src.header
    backend = str((h.get("recorder") or {}).get("backend") or "")
    if name is not None:
        if not name.strip():
            raise IotapeError("--name: empty")
        if catalog.name_in_use(store, name, run_id):
            raise IotapeError(f"--name {name!r}: another run has this name")
    else:
        name = p.stem
        if catalog.name_in_use(store, name, run_id):
            name = f"{name}-{run_id[:6]}"
    return {
        "id": run_id,
        "kind": "import" if backend.startswith("import:") else "capture",
        "name": name,
        "host": str(h.get("host") or ""),
        "kernel": str(h.get("kernel") or ""),
        "start_ns": int(h.get("wall_start_ns") or 0),
        "duration_ns": 0,
        "events": 0,
        "bytes": 0,
        "parameters": {
            "command_line": h.get("command_line") or [],
            "recorder": h.get("recorder") or {},
            "filters": h.get("filters") or {},
            "labels": h.get("labels") or [],
            "metadata": h.get("metadata") or {},
            "footer": src.footer or {},
            **src.extra,
        },
        "header": h,
        "tags": tags,
        "parent_id": "",
        "source_path": str(p.resolve()),
        "source_sha256": sha,
        "state": "loading",
        "ingested_ns": time.time_ns(),
        "version": 0,
    }


def _devices(header: dict, run_id: str) -> list[dict[str, Any]]:
    out = []
    for d in header.get("devices") or []:
        if not isinstance(d, dict):
            continue
        part = d.get("partition") if isinstance(d.get("partition"), dict) else {}
        out.append(
            {
                "run_id": run_id,
                "dev": int(d.get("dev") or 0),
                "name": str(d.get("name") or ""),
                "model": str(d.get("model") or ""),
                "firmware": str(d.get("firmware") or ""),
                "rotational": bool(d.get("rotational")),
                "logical_block_size": int(d.get("logical_block_size") or 0),
                "capacity_bytes": int(d.get("capacity_bytes") or 0),
                "partition_name": str(part.get("name") or ""),
                "partition_start_bytes": int(part.get("start_bytes") or 0),
            }
        )
    return out


def _streams(header: dict, run_id: str) -> list[dict[str, Any]]:
    names = {str(k): v for k, v in schemas.stream_names().items()}
    names.update({str(k): str(v) for k, v in (header.get("streams") or {}).items()})
    return [
        {"run_id": run_id, "stream": int(k), "name": v}
        for k, v in sorted(names.items(), key=lambda kv: int(kv[0]))
        if k.isdigit() and 0 <= int(k) <= 255
    ]


class _Stats:
    """Bytes and the last completion time, gathered as the batches go by."""

    def __init__(self) -> None:
        self.rows = 0
        self.bytes = 0
        self.last_complete_ns = 0

    def watch(
        self, batches: Iterator[pa.RecordBatch], progress: Progress | None, total: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        for b in batches:
            if b.num_rows:
                self.rows += b.num_rows
                self.bytes += pc.sum(b.column("bytes")).as_py() or 0
                self.last_complete_ns = max(
                    self.last_complete_ns, pc.max(b.column("ts_complete_ns")).as_py() or 0
                )
            if progress:
                progress(self.rows, total)
            yield b


# --------------------------------------------------------------------------- conversion


def _gathered(chunks: Iterator[np.ndarray], rows: int) -> Iterator[pa.RecordBatch]:
    """Trace chunks gathered into batches of about `rows` records, as Arrow."""
    buf = np.empty(rows + schemas.file_constants()["max_chunk_records"], dtype=RECORD_DTYPE)
    raw = buf.view(np.uint8).reshape(len(buf), RECORD_SIZE)
    fill = 0
    for records in chunks:
        n = len(records)
        # Whole records as bytes: a field-wise copy would be slower and skip the padding.
        raw[fill : fill + n] = records.view(np.uint8).reshape(n, RECORD_SIZE)
        fill += n
        if fill >= rows:
            yield records_to_arrow(buf[:fill])
            fill = 0
    if fill:
        yield records_to_arrow(buf[:fill])


_DONE = object()


def _prefetch(batches: Iterator[pa.RecordBatch], depth: int = 3) -> Iterator[pa.RecordBatch]:
    """Run `batches` on a helper thread, `depth` ahead of the consumer: the conversion
    (numpy, which releases the GIL) overlaps the engine's insert. Errors come through;
    a consumer that stops early stops the helper."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for b in batches:
                while not stop.is_set():
                    try:
                        q.put(b, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as e:
            q.put(e)

    t = threading.Thread(target=produce, name="iotape-ingest-convert", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        # Drain so a producer blocked on put() sees `stop`, then wait for it: the
        # trace's memory map must outlive every read of it.
        while t.is_alive():
            with contextlib.suppress(queue.Empty):
                q.get(timeout=0.05)
        t.join()
