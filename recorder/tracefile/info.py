"""What a trace holds: the header in plain terms and counts over its records.

Reads the file chunk by chunk (constant memory) and counts with numpy. A damaged
file is summarized up to its first fault, and the summary says it needs repair.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np

import schemas
from recorder.tracefile.reader import Trace
from recorder.tracefile.sequence import open_trace


def split_dev(dev: int) -> tuple[int, int]:
    return dev >> 20, dev & ((1 << 20) - 1)


def dev_name(dev: int) -> str:
    major, minor = split_dev(dev)
    return f"{major}:{minor}"


def stream_table(header: dict) -> dict[int, str]:
    """Stream ids to names: the schema's, then the trace's own (user labels)."""
    names = dict(schemas.stream_names())
    for key, name in (header.get("streams") or {}).items():
        try:
            names[int(key)] = str(name)
        except (TypeError, ValueError):
            continue
    return names


def devices_of(header: dict) -> list[dict]:
    """The header's device table, with partition ends filled in for display."""
    out = []
    for d in header.get("devices") or []:
        if not isinstance(d, dict):
            continue
        d = dict(d)
        part = d.get("partition")
        if isinstance(part, dict):
            part = dict(part)
            start, size = part.get("start_bytes"), part.get("size_bytes")
            if isinstance(start, int) and isinstance(size, int):
                part["end_bytes"] = start + size
            d["partition"] = part
        out.append(d)
    return out


class _Counts:
    def __init__(self) -> None:
        self.events = 0
        self.chunks = 0
        self.bytes = 0
        self.errors = 0
        self.op_events = np.zeros(256, dtype=np.int64)
        self.op_bytes = np.zeros(256, dtype=np.int64)
        self.stream_events = np.zeros(256, dtype=np.int64)
        self.stream_bytes = np.zeros(256, dtype=np.int64)
        self.dev: dict[int, list[int]] = {}
        self.first_issue_ns: int | None = None
        self.last_complete_ns = 0
        # Chunks by codec ("none": plain).
        self.codecs: dict[str, int] = {}

    def add(self, r: np.ndarray) -> None:
        size = r["bytes"]
        self.events += len(r)
        self.chunks += 1
        self.bytes += int(size.sum(dtype=np.uint64))
        self.errors += int(np.count_nonzero(r["error"]))
        # float64 weights are exact here: a chunk's byte sum stays below 2**53.
        for codes, events, nbytes in (
            (r["op"], self.op_events, self.op_bytes),
            (r["stream"], self.stream_events, self.stream_bytes),
        ):
            events += np.bincount(codes, minlength=256)
            nbytes += np.bincount(codes, weights=size, minlength=256).astype(np.int64)
        devs, inverse = np.unique(r["dev"], return_inverse=True)
        dev_bytes = np.bincount(inverse, weights=size).astype(np.int64)
        dev_events = np.bincount(inverse)
        for d, e, b in zip(devs.tolist(), dev_events.tolist(), dev_bytes.tolist(), strict=True):
            acc = self.dev.setdefault(d, [0, 0])
            acc[0] += e
            acc[1] += b
        issued = r["ts_issue_ns"][r["ts_issue_ns"] > 0]
        if len(issued):
            low = int(issued.min())
            self.first_issue_ns = (
                low if self.first_issue_ns is None else min(low, self.first_issue_ns)
            )
        self.last_complete_ns = max(self.last_complete_ns, int(r["ts_complete_ns"].max()))


def _by_code(events: np.ndarray, nbytes: np.ndarray, names: dict[int, str], kind: str) -> dict:
    return {
        names.get(code, f"{kind}-{code}"): {
            "id": code,
            "events": int(events[code]),
            "bytes": int(nbytes[code]),
        }
        for code in np.flatnonzero(events).tolist()
    }


def summarize(path: str | os.PathLike, progress: Callable[[int, int], None] | None = None) -> dict:
    """Header and record counts of a trace, as plain JSON-able data.

    `progress(done_bytes, total_bytes)` is called after each chunk.
    """
    with open_trace(path, strict=False) as t:
        counts = _Counts()
        for info, records in t._walk():
            counts.add(t.requests_of(records))  # not a --wakes capture's wake/sched records
            counts.codecs[info.codec] = counts.codecs.get(info.codec, 0) + 1
            if progress:
                progress(info.end, t.file_size)
        return _report(t, counts)


def _report(t: Trace, c: _Counts) -> dict:
    h = t.header
    footer = t.footer if t.problem is None else None
    f = footer or {}
    wall = h.get("wall_start_ns")
    start = (
        datetime.fromtimestamp(wall / 1e9, tz=UTC).isoformat()
        if isinstance(wall, int) and 0 <= wall < 2**63
        else None
    )
    devs = devices_of(h)
    dev_names = {d.get("dev"): d.get("name") for d in devs}
    rec, lost = h.get("recorder"), f.get("lost")
    recorder = rec if isinstance(rec, dict) else {}
    lost = lost if isinstance(lost, dict) else {}
    duration = f.get("duration_ns")
    return {
        "path": t.path,
        "file_bytes": t.file_size,
        # A rotated capture's files read as one (recorder/tracefile/sequence.py).
        "sequence": h.get("sequence"),
        "format_version": h.get("version"),
        "compression": dict(sorted(c.codecs.items())),
        "file_bytes_per_event": round(t.file_size / c.events, 2) if c.events else None,
        "layout_version": (h.get("record") or {}).get("layout_version"),
        "host": h.get("host"),
        "kernel": h.get("kernel"),
        "start": start,
        "wall_start_ns": wall,
        "mono_start_ns": h.get("mono_start_ns"),
        "command_line": h.get("command_line"),
        "backend": recorder.get("backend"),
        "recorder_version": recorder.get("version"),
        "devices": devs,
        "filters": h.get("filters"),
        "streams": {str(k): v for k, v in sorted(stream_table(h).items())},
        "events": c.events,
        "chunks": c.chunks,
        "bytes": c.bytes,
        "errors": c.errors,
        "by_op": _by_code(c.op_events, c.op_bytes, schemas.op_names(), "op"),
        "by_stream": _by_code(c.stream_events, c.stream_bytes, stream_table(h), "stream"),
        "by_device": {
            dev_names.get(d) or dev_name(d): {
                "dev": d,
                "major_minor": dev_name(d),
                "events": e,
                "bytes": b,
            }
            for d, (e, b) in sorted(c.dev.items())
        },
        "first_issue_ns": c.first_issue_ns,
        "last_complete_ns": c.last_complete_ns if c.events else None,
        "duration_ns": duration
        if isinstance(duration, int)
        else (c.last_complete_ns if c.events else 0),
        "lost": lost,
        "lost_total": sum(v for v in lost.values() if isinstance(v, int)),
        "pre_start": f.get("pre_start"),
        "completion_unseen": f.get("completion_unseen", 0),
        "stop_reason": f.get("stop_reason"),
        "repaired": bool(f.get("repaired", False)),
        "dropped_events": f.get("dropped_events", 0),
        "dropped_chunks": f.get("dropped_chunks", 0),
        # Where a repair left holes: byte range, chunks, time range and events lost.
        "gaps": [g for g in f.get("gaps") or [] if isinstance(g, dict)],
        "complete": t.problem is None,
        "needs_repair": t.problem is not None,
        "problem": str(t.problem) if t.problem else None,
        "repair_hint": t.repair_hint if t.problem else None,
    }
