"""A trace's replayable requests in time order, a batch at a time.

`replayer.plan.source.load` reads a whole trace, filters it and sorts it by request
time: 80 bytes a record, 2.3 GB for an hour at 8k IOPS. Fidelity needs the same
requests in the same order, but only a few columns of them, and never all at once.

A recording is written in completion order, so its chunks are nearly in issue
order: a request is at most one latency away from its place. `scan` reads each
chunk's earliest and latest request time first; `batches` then loads chunks in
file order and hands out every held request with a time at or before the earliest
time of any chunk not yet loaded (a later chunk's requests at that very time sort
after the held ones anyway, since ties keep file order). What stays held is the
disorder of the file: a few thousand requests for a recording, the whole trace
only for a file whose requests are in no time order at all (a trace without
times, which every batch then waits for).

The order, the filter, the time origin and the errors are `source.load`'s
exactly; the tests compare the two.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

import schemas
from base.errors import IotapeError
from recorder.tracefile import RECORD_DTYPE, RECORD_SIZE, open_trace
from recorder.tracefile.codec import decode_records
from replayer.plan.source import DEVICE_FLUSH, OP, replayable, request_times
from replayer.run import native

# The columns fidelity and relabelling use; `n` is the request's place among the
# trace's replayable requests in file order, which breaks ties in time.
COMPACT = np.dtype(
    [
        ("t", "<i8"),
        ("n", "<i8"),
        ("offset", "<u8"),
        ("bytes", "<u4"),
        ("dev", "<u4"),
        ("tid", "<u4"),
        ("op", "u1"),
        ("stream", "u1"),
    ],
    align=True,
)
# Copies go through a view of whole rows: numpy moves a structured array's rows
# field by field, ten times slower (0.2 s a million rows). Rows are picked as
# 8-byte words by np.compress / take along the rows (boolean indexing of the 2-D
# view is 4x slower) and joined as opaque records (concatenating the 2-D view is
# 3x slower).
WORDS = COMPACT.itemsize // 8
_ROW = np.dtype((np.void, COMPACT.itemsize))
BATCH = 1 << 18  # requests loaded between two hand-outs (33 s at 8k IOPS)
# src/compact.c writes COMPACT rows as a C struct of this layout.
_C_LAYOUT = {
    "t": 0,
    "n": 8,
    "offset": 16,
    "bytes": 24,
    "dev": 28,
    "tid": 32,
    "op": 36,
    "stream": 37,
}
COMPACT_C = (
    COMPACT.itemsize == 40 and {k: v[1] for k, v in (COMPACT.fields or {}).items()} == _C_LAYOUT
)


@dataclass
class Scan:
    """What one read of a trace tells before its requests are put in order."""

    path: Path
    header: dict
    app_flush: bool
    count: int
    t0: int  # the earliest request time: the trace's 0
    timed: bool
    tmin: np.ndarray  # per chunk, of its replayable requests (int64 max when none)
    stream_ids: list[int]
    streams: dict[int, str] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return self.t_last

    t_last: int = 0

    def stream_name(self, sid: int) -> str:
        return self.streams.get(int(sid), f"stream{int(sid)}")

    def metadata(self) -> dict:
        return dict(self.header.get("metadata") or {})


def _words(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint64).reshape(len(a), WORDS)


def take(a: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """a[sel] for COMPACT rows (an index or a mask)."""
    w = _words(a)
    sel = np.asarray(sel)
    rows = np.compress(sel, w, axis=0) if sel.dtype == bool else w.take(sel, axis=0)
    return rows.reshape(-1).view(COMPACT)


def cat(parts: list[np.ndarray]) -> np.ndarray:
    """np.concatenate of COMPACT arrays."""
    if len(parts) == 1:
        return parts[0]
    rows = [np.ascontiguousarray(p).view(_ROW) for p in parts]
    return np.concatenate(rows).view(COMPACT)


def _app_flush(path: Path) -> tuple[dict, bool, int]:
    """(header, whether any flush came from a process, records in the file)."""
    found, total = False, 0
    with open_trace(path) as trace:
        header = dict(trace.header)
        for c in trace.iter_chunks():
            total += len(c)
            found = found or bool(((c["op"] == OP["flush"]) & (c["pid"] != 0)).any())
    return header, found, total


def _in_c(c: np.ndarray) -> tuple[Any, ...] | None:
    """(library, then the chunk's arguments to src/compact.c: records, count, size,
    field offsets, kept ops, flush op, device-flush flag); None where numpy does
    the chunk (IOTAPE_POSTREPLAY_PURE, another record layout, a strided view)."""
    lib = native.lib()
    offs = _c_offsets(c.dtype) if lib is not None else None
    if lib is None or offs is None or not c.flags.c_contiguous:
        return None
    return (lib, c.ctypes.data, len(c), c.dtype.itemsize, offs.ctypes.data, _OP_OK.ctypes.data,
            OP["flush"], DEVICE_FLUSH)  # fmt: skip


def _keep(c: np.ndarray, app_flush: bool) -> np.ndarray:
    if (a := _in_c(c)) is not None:
        mask = np.empty(len(c), bool)
        a[0].keep_rows(*a[1:], int(app_flush), mask.ctypes.data)
        return mask
    keep = replayable(c)
    if app_flush:  # replayable() decides per chunk; the whole file decides here
        keep &= ~((c["op"] == OP["flush"]) & (c["pid"] == 0))
    return keep


class _Tally:
    """What scan counts of the requests one rule of flushes keeps."""

    def __init__(self) -> None:
        self.count, self.tmax = 0, 0
        self.tmins: list[int] = []
        self.seen = np.zeros(256, np.int64)
        self.bad: str | None = None  # the first misaligned request's error

    def add(self, path: Path, r: np.ndarray) -> None:
        bad = (r["op"] != OP["flush"]) & (r["offset"] % 512 != 0)
        i = int(np.flatnonzero(bad)[0]) if bad.any() else -1
        t = request_times(r)
        tmin = int(t.min()) if len(t) else np.iinfo(np.int64).max
        tmax = int(t.max()) if len(t) else 0
        seen = np.bincount(r["stream"], minlength=256)
        self.tally(path, len(r), tmin, tmax, i, int(r["offset"][i]) if i >= 0 else 0, seen)

    def tally(
        self, path: Path, n: int, tmin: int, tmax: int, bad: int, offset: int, seen: np.ndarray
    ) -> None:
        """A chunk's `n` kept requests: their least and greatest request time, the
        place of the first misaligned one among them (-1: none) and its offset,
        and their count per stream."""
        if self.bad is None and bad >= 0:
            self.bad = (
                f"{path}: record {self.count + bad}: field offset: {offset} is not 512-aligned"
            )
        self.tmins.append(tmin)
        self.tmax = max(self.tmax, tmax)
        self.seen += seen
        self.count += n


def scan(path: str | Path) -> Scan:
    """Read `path` once for its order and its errors (`source.load`'s). Raises IotapeError.

    Which flushes a replay issues depends on the whole file (whether any came from
    a process: _keep), so each chunk is tallied under both rules, the second only
    where it differs (a chunk with kernel flushes), and the file picks one at the
    end: one read of the trace, where reading it first for the rule made two."""
    path = Path(path)
    found, total = False, 0
    tallies = {False: _Tally(), True: _Tally()}
    with open_trace(path) as trace:
        header = dict(trace.header)
        for c in trace.iter_stored():
            total += len(c) // RECORD_SIZE if c.dtype == np.uint8 else len(c)
            in_c = _scan_c(path, c, tallies)
            if in_c is not None:
                found = found or in_c
                continue
            c = _records(c)
            flush = c["op"] == OP["flush"]
            found = found or bool((flush & (c["pid"] != 0)).any())
            base = replayable(c)
            kernel = flush & (c["pid"] == 0) & base
            r = c[base]
            tallies[False].add(path, r)
            tallies[True].add(path, c[base & ~kernel] if kernel.any() else r)
    if not isinstance(header.get("devices", []), list):
        raise IotapeError(f"{path}: header field devices: not a list")
    if total == 0:
        raise IotapeError(f"{path}: the trace holds no requests to replay")
    app_flush = found
    got = tallies[app_flush]
    if got.bad is not None:
        raise IotapeError(got.bad)
    count, tmins, tmax, seen = got.count, got.tmins, got.tmax, got.seen
    if count == 0:
        raise IotapeError(f"{path}: the trace holds no read, write, flush or discard requests")
    tmin = np.array(tmins, np.int64)
    timed = tmax > 0
    t0 = int(tmin.min()) if timed else 0
    streams = {int(k): str(v) for k, v in (header.get("streams") or {}).items() if str(k).isdigit()}
    for k, v in schemas.stream_names().items():
        streams.setdefault(k, v)
    ids = np.flatnonzero(seen).tolist()
    out = Scan(path, header, app_flush, count, t0, timed, tmin, ids, streams)
    out.t_last = tmax - t0 if timed else 0
    return out


# The record fields src/compact.c reads, in its order, with the types it reads.
_C_FIELDS = (("ts_queue_ns", "<u8"), ("ts_issue_ns", "<u8"), ("ts_complete_ns", "<u8"),
             ("dev", "<u4"), ("offset", "<u8"), ("bytes", "<u4"), ("op", "u1"),
             ("flags", "<u2"), ("pid", "<u4"), ("tid", "<u4"), ("stream", "u1"))  # fmt: skip
_OP_OK = np.zeros(256, np.uint8)
_OP_OK[[OP["read"], OP["write"], OP["flush"], OP["discard"], OP["write-zeroes"]]] = 1


@cache
def _c_offsets(dt: np.dtype) -> np.ndarray | None:
    """The offsets of _C_FIELDS in records of `dt`; None where a field is missing
    or of another type (numpy's _compact then)."""
    fields = dict(dt.fields or {})
    out = []
    for name, kind in _C_FIELDS:
        f = fields.get(name)
        if f is None or f[0] != np.dtype(kind):
            return None
        out.append(f[1])
    return np.array(out, np.int64)


def _records(c: np.ndarray) -> np.ndarray:
    """A chunk of Trace.iter_stored as records (a delta-split chunk's planes decoded)."""
    return decode_records(c, len(c) // RECORD_SIZE) if c.dtype == np.uint8 else c


@cache
def _narrow() -> tuple[np.ndarray, np.ndarray] | None:
    """(planes, offsets) for src/compact.c's *_planes: the first plane of each group
    of 8 that holds a byte of _C_FIELDS (the narrow records' words), and each
    field's offset in a narrow record; None where the record layout does not
    allow (numpy decodes whole records then)."""
    offs = _c_offsets(RECORD_DTYPE)
    if offs is None or RECORD_SIZE % 8:
        return None
    sizes = [np.dtype(kind).itemsize for _, kind in _C_FIELDS]
    groups = sorted({b // 8 for o, n in zip(offs.tolist(), sizes, strict=True)
                     for b in range(o, o + n)})  # fmt: skip
    narrow = [groups.index(o // 8) * 8 + o % 8 for o in offs.tolist()]
    return np.array(groups, np.int64), np.array(narrow, np.int64)


def _planes_in_c(c: np.ndarray) -> tuple[Any, ...] | None:
    """_in_c's for a chunk's planes (Trace.iter_stored): (library, then the planes,
    count, groups, how many, narrow offsets, kept ops, flush op, device-flush
    flag); None where numpy decodes its records instead."""
    lib = native.lib()
    lay = _narrow() if lib is not None else None
    if lib is None or lay is None or c.dtype != np.uint8 or not c.flags.c_contiguous:
        return None
    groups, offs = lay
    return (lib, c.ctypes.data, len(c) // RECORD_SIZE, groups.ctypes.data, len(groups),
            offs.ctypes.data, _OP_OK.ctypes.data, OP["flush"], DEVICE_FLUSH)  # fmt: skip


def _scan_c(path: Path, c: np.ndarray, tallies: dict[bool, _Tally]) -> bool | None:
    """Tally chunk `c` (records or planes: Trace.iter_stored) under both rules in C
    (src/compact.c's scan_chunk): whether it holds a flush of a process; None
    where the library or the records' layout does not allow (numpy tallies it
    then)."""
    stats = np.empty(10, np.int64)
    seen = np.empty((2, 256), np.int64)
    if (p := _planes_in_c(c)) is not None:
        found = p[0].scan_planes(*p[1:], stats.ctypes.data, seen.ctypes.data)
        if found < 0:
            raise MemoryError("reading a chunk's requests ran out of memory")
    elif (a := _in_c(np.ascontiguousarray(_records(c)))) is not None:
        found = a[0].scan_chunk(*a[1:], stats.ctypes.data, seen.ctypes.data)
    else:
        return None
    for rule in (False, True):
        n, tmin, tmax, bad, off = stats[5 * rule : 5 * rule + 5].tolist()
        tallies[rule].tally(path, n, tmin, tmax, bad, off, seen[int(rule)])
    return bool(found)


def _compact(c: np.ndarray, s: Scan, first: int) -> np.ndarray:
    """The COMPACT rows of chunk `c` (records or planes: Trace.iter_stored)."""
    if COMPACT_C and (p := _planes_in_c(c)) is not None:
        out = np.empty(p[2], COMPACT)
        k = p[0].compact_planes(*p[1:], int(s.app_flush), first, s.t0, int(s.timed),
                                out.ctypes.data)  # fmt: skip
        if k < 0:
            raise MemoryError("reading a chunk's requests ran out of memory")
        return out[:k]
    c = _records(c)
    if COMPACT_C and (a := _in_c(c)) is not None:
        out = np.empty(len(c), COMPACT)
        k = a[0].compact_rows(*a[1:], int(s.app_flush), first, s.t0, int(s.timed),
                              out.ctypes.data)  # fmt: skip
        if k < 0:
            raise MemoryError("reading a chunk's requests ran out of memory")
        return out[:k]
    r = c[_keep(c, s.app_flush)]
    out = np.empty(len(r), COMPACT)
    out["t"] = request_times(r) - s.t0 if s.timed else 0
    out["n"] = np.arange(first, first + len(r))
    for col in ("offset", "bytes", "dev", "tid", "op", "stream"):
        out[col] = r[col]
    return out


def batches(s: Scan, batch: int = BATCH) -> Iterator[np.ndarray]:
    """The replayable requests of a scanned trace as COMPACT arrays, in time order
    (ties in file order), `t` in ns since the first request."""
    after = np.append(np.minimum.accumulate(s.tmin[::-1])[::-1], np.iinfo(np.int64).max)
    held: list[np.ndarray] = []
    new, first = 0, 0
    with open_trace(s.path) as trace:
        for i, c in enumerate(trace.iter_stored()):
            part = _compact(c, s, first)
            first += len(part)
            held.append(part)
            new += len(part)
            last = i + 1 == len(s.tmin)
            if new < batch and not last:
                continue
            a = cat(held)
            # By time, ties in file order: a stable sort by time alone is
            # lexsort((n, t)) here (half its work), as equal times already stand in
            # file order: what was held back from the last batch was sorted so, and
            # comes before the chunks read since, each in file order.
            a = take(a, np.argsort(a["t"], kind="stable"))
            upto = min(int(after[i + 1]) - s.t0, np.iinfo(np.int64).max) if s.timed else 0
            # Untimed: every request is at 0 and file order is time order.
            cut = len(a) if last or not s.timed else int(np.searchsorted(a["t"], upto, "right"))
            if cut:
                yield a[:cut]
            held, new = [a[cut:]], 0
