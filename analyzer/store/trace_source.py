"""Traces as sources of a run, shared by the ingest of a trace or trace Parquet
(ingest.py) and of a replay job directory, whose re-recorded trace becomes the
replay's events (ingest_replay.py); and the content hashes that are run ids.
Neither ingest module imports the other for these: both import this one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import schemas
from analyzer.store.event_batches import column_batches, numbers
from analyzer.store.interface import Store
from base.errors import IotapeError
from recorder.tracefile import content_sha256, open_trace

# Rows per Arrow batch: trace chunks (8192 records) are gathered to amortize the
# per-batch cost of conversion and of the engine's write.
BATCH_ROWS = 65_536
# Batches converted ahead of the engine's writes (~5 MB each), and ahead of a store
# still opening (TraceSource.start(): a command's ~0.1 s of DuckDB's import and the
# open, in which the helper thread converts a few batches on the other core).
PREFETCH_BATCHES = 3
AHEAD_BATCHES = 8
PARQUET_SUFFIXES = (".parquet", ".pq")
REPORT_SUFFIXES = (".json",)

Progress = Callable[[int, int | None], None]


def source_sha256(path: Path) -> str:
    """The idempotency key of a file to ingest: for a trace, over its header, chunk
    headers and footer (`content_sha256`, no pass over the records; a rotated capture's
    files, named by its `-o` name or a glob, over theirs); else its bytes."""
    if path.suffix.lower() not in PARQUET_SUFFIXES + REPORT_SUFFIXES and not path.is_dir():
        try:
            digest = content_sha256(path)
        except OSError:
            digest = None
        if digest is not None:
            return digest
    return file_sha256(path)


def file_sha256(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except FileNotFoundError:
        raise IotapeError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IotapeError(f"{path}: is a directory") from None
    except PermissionError:
        raise IotapeError(f"{path}: permission denied") from None


# --------------------------------------------------------------------------- sources


class TraceLike:
    """What traces and trace Parquet share: the run from the header, the parts from
    the records. Subclasses set header, footer, total, extra and batches()."""

    path: Path
    header: dict
    footer: dict
    total: int | None
    extra: dict[str, Any]

    def batches(self) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError

    def describe(self, store: Store) -> dict[str, Any]:
        return trace_fields(self)

    def load(self, store: Store, run_id: str, progress: Progress | None) -> dict[str, Any]:
        return load_trace(store, self, run_id, progress)


class TraceSource(TraceLike):
    """An `.iot` trace: header, footer, and its records as Arrow batches."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.trace = open_trace(path)
        if self.trace.footer is None:
            self.trace.close()
            raise IotapeError(
                f"{path}: byte {self.trace.file_size}: the file ends without a footer "
                f"(cut short?); {self.trace.repair_hint}"
            )
        self.header = self.trace.header
        self.footer = self.trace.footer
        self.total = self.footer.get("events")
        self.extra: dict[str, Any] = {}
        self._helpers: list[_Prefetch] = []
        self._ahead: _Prefetch | None = None

    def start(self) -> None:
        """Begin converting now, up to AHEAD_BATCHES ahead, while the caller does
        something else (`iotape ingest` opens the store meanwhile); batches() then
        hands out what is ready."""
        if self._ahead is None:
            self._ahead = self._convert(AHEAD_BATCHES)

    def batches(self) -> Iterator[pa.RecordBatch]:
        pre, self._ahead = self._ahead, None
        return iter(pre or self._convert(PREFETCH_BATCHES))

    def _convert(self, depth: int) -> _Prefetch:
        pre = _Prefetch(column_batches(self.trace.iter_columns(BATCH_ROWS), BATCH_ROWS), depth)
        self._helpers.append(pre)
        return pre

    def close(self) -> None:
        # The helper reads the trace's memory map: it stops before the map goes.
        for pre in self._helpers:
            pre.close()
        self._helpers = []
        self.trace.close()


class ParquetSource(TraceLike):
    """Parquet from `iotape trace convert`: the schema's columns, the header in metadata."""

    def __init__(self, path: Path) -> None:
        # Here, not at the top: a trace's ingest imports it on the store's side, while
        # its conversion has begun (~10 ms before the first batch otherwise).
        import pyarrow.parquet as pq

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


def open_trace_source(path: Path) -> TraceSource:
    """An `.iot` trace opened for ingest (the replay ingest loads its re-recorded trace)."""
    return TraceSource(path)


def trace_fields(src: TraceLike) -> dict[str, Any]:
    """The run fields a trace's header gives."""
    h = src.header
    backend = str((h.get("recorder") or {}).get("backend") or "")
    return {
        "kind": "import" if backend.startswith("import:") else "capture",
        "host": str(h.get("host") or ""),
        "kernel": str(h.get("kernel") or ""),
        "start_ns": int(h.get("wall_start_ns") or 0),
        "parameters": {
            "command_line": h.get("command_line") or [],
            "recorder": h.get("recorder") or {},
            "filters": h.get("filters") or {},
            "labels": h.get("labels") or [],
            "metadata": h.get("metadata") or {},
            "footer": src.footer or {},
            # Where a repaired trace has holes (docs/trace-format.md): kept on their own,
            # so that whoever reads the run sees that events are missing, and where.
            "gaps": (src.footer or {}).get("gaps") or [],
            **src.extra,
        },
        "header": h,
        # A phase of an ESRP sequence (`iotape workload esrp --record`): linked by tag.
        "tags": _sequence_tags(h.get("metadata")),
    }


def _sequence_tags(metadata: Any) -> dict[str, str]:
    # The catalog (and its queries) imported here: a trace starts converting before
    # (analyzer/store/early.py).
    from analyzer.store import catalog

    return catalog.sequence_tags(metadata)


def load_trace(
    store: Store, src: TraceLike, run_id: str, progress: Progress | None
) -> dict[str, Any]:
    """Insert a trace's events, devices and streams as run `run_id`'s."""
    # The header's rows first: while the events are written, not after them (the
    # last batch's wait is a command's tail, ~2-3 ms of these two).
    store.insert_rows("devices", _devices(src.header, run_id))
    store.insert_rows("streams", _streams(src.header, run_id))
    stats = _Stats()
    batches = stats.watch(src.batches(), progress, src.total)
    events = store.insert_batches("events", batches, run_id, src.total)
    return {"events": events, "bytes": stats.bytes, "duration_ns": stats.last_complete_ns}


def _devices(header: dict, run_id: str) -> list[dict[str, Any]]:
    out = []
    for d in header.get("devices") or []:
        if not isinstance(d, dict):
            continue
        p = d.get("partition")
        part: dict[str, Any] = p if isinstance(p, dict) else {}
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
                # numpy, not pyarrow.compute (event_batches: its import's cost).
                size = numbers(b.column("bytes"))
                done = numbers(b.column("ts_complete_ns"))
                self.bytes += int(size.sum(dtype=np.uint64))
                self.last_complete_ns = max(self.last_complete_ns, int(done.max()))
            if progress:
                progress(self.rows, total)
            yield b


# --------------------------------------------------------------------------- conversion


_DONE = object()


class _Prefetch:
    """`batches` run on a helper thread, started at once, up to `depth` ahead of the
    consumer: the conversion (numpy, Arrow and the C decoder, which let go of the GIL)
    overlaps the engine's insert. Errors come through; a consumer that stops early,
    or close(), stops the helper. Once the consumer takes the first batch, the
    helper keeps PREFETCH_BATCHES ahead (memory stays flat)."""

    def __init__(self, batches: Iterator[pa.RecordBatch], depth: int = PREFETCH_BATCHES) -> None:
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._produce, args=(batches,), name="iotape-ingest-convert", daemon=True
        )
        self.thread.start()

    def _produce(self, batches: Iterator[pa.RecordBatch]) -> None:
        q, stop = self.q, self.stop
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

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            first = True
            while True:
                item = self.q.get()
                if first:
                    with self.q.mutex:  # put() reads maxsize under this lock
                        self.q.maxsize = min(self.q.maxsize, PREFETCH_BATCHES)
                    first = False
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.close()

    def close(self) -> None:
        self.stop.set()
        # Drain so a producer blocked on put() sees `stop`, then wait for it: the
        # trace's memory map must outlive every read of it.
        while self.thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self.q.get(timeout=0.05)
        self.thread.join()
