"""A trace read in pieces, for plans that must not hold every record (a 1-hour
trace at 8,000 IOPS has 29 M of them, 2.3 GB as records).

`scan` reads the file once for what a plan needs to know up front (how many
requests, the time span, each device's furthest byte, which streams, submitters
and writes there are, how far out of time order records come); `sorted_chunks`
then yields the replayable records in time order, a few hundred thousand at a
time, each as a Source whose times count from the whole trace's first request.
The recorder writes records as they complete, so a request can come after later
ones by up to its latency: records are held until no earlier one can follow
(`Scan.lag_ns`, measured in the scan).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import schemas
from base.errors import IotapeError
from recorder.tracefile import RECORD_DTYPE, open_trace
from replayer.plan import compact
from replayer.plan.source import (
    OP,
    Source,
    app_flushes,
    device_flushes,
    replayable,
    request_times,
)

CHUNK = 400_000  # records per yielded chunk, about
SUBMITTERS_KEPT = 65  # steps.MAX_SUBMITTERS + 1: enough to tell "too many"


@dataclass
class Scan:
    """What one pass over the trace found (replayable records only)."""

    path: Path
    header: dict
    requests: int = 0
    t_min: int = -1  # ns, the first request's time
    t_max: int = 0
    timing: str = "none"
    app_flush: bool = False  # an app's flush seen: device flushes are dropped
    lag_ns: int = 0  # the furthest a record comes after a later request's record
    queue_ns: int = 0  # the longest a request waited between queue and issue
    dev_end: dict[int, int] = field(default_factory=dict)
    # One record per (device, stream, pid of "other"'s submitters, writes): a
    # skeleton a plan lays its targets out from as if from the whole trace.
    kinds: dict[tuple[int, int, int, bool], int] = field(default_factory=dict)
    # --remap compact: each device's touched granules (compact.py), None otherwise.
    touched: dict[int, np.ndarray] | None = None
    granule: int = compact.GRANULE


def _note(s: Scan, r: np.ndarray, t: np.ndarray, seen_max: int) -> int:
    """Add one file chunk's replayable records `r` (request times `t`) to `s`."""
    s.requests += len(r)
    s.app_flush |= bool(app_flushes(r).any())
    lo, hi = int(t.min()), int(t.max())
    s.t_min = lo if s.t_min < 0 else min(s.t_min, lo)
    s.t_max = max(s.t_max, hi)
    run = np.maximum.accumulate(np.concatenate([[seen_max], t]))[:-1]
    s.lag_ns = max(s.lag_ns, int((run - t).max()))
    queued, issued = r["ts_queue_ns"].astype(np.int64), r["ts_issue_ns"].astype(np.int64)
    both = (queued > 0) & (issued > 0)
    s.queue_ns = max(s.queue_ns, int((issued - queued)[both].max(initial=0)))
    data = r["op"] != OP["flush"]
    bad = data & (r["offset"] % 512 != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise IotapeError(f"{s.path}: a record's offset {r['offset'][i]} is not 512-aligned")
    end = np.where(data, r["offset"].astype(np.int64) + r["bytes"].astype(np.int64), 0)
    for dev in np.unique(r["dev"]).tolist():
        s.dev_end[dev] = max(s.dev_end.get(dev, 512), int(end[r["dev"] == dev].max()))
    if s.touched is not None:
        for dev, g in compact.touched_by_device(r, data, s.granule).items():
            s.touched[dev] = compact.merge(s.touched.get(dev), g)
    if s.timing != "issue" and (t > 0).any():
        lat = (r["ts_complete_ns"] > r["ts_issue_ns"]) & (r["ts_issue_ns"] > 0)
        s.timing = "issue" if lat.any() else "arrival"
    other = r["stream"] == _other_id()
    pid = np.where(other, r["pid"].astype(np.int64), -1)
    writes = (r["op"] != OP["read"]).astype(np.int64)
    # (stream, pid + 1, writes) packed in one int64 (8 + 33 + 1 bits), unique per
    # device: the rows of np.unique(axis=0) in the same order, at a tenth of its
    # sort (it was most of a 3 M-request scan).
    key = (r["stream"].astype(np.int64) << 34) | ((pid + 1) << 1) | writes
    dev = r["dev"].astype(np.int64)
    for d in np.unique(dev).tolist():
        for x in np.unique(key[dev == d]).tolist():
            k = (d, x >> 34, ((x >> 1) & ((1 << 33) - 1)) - 1, bool(x & 1))
            if k not in s.kinds and (k[2] < 0 or _pids(s, k[0]) < SUBMITTERS_KEPT):
                s.kinds[k] = len(s.kinds)
    return max(seen_max, hi)


def _pids(s: Scan, dev: int) -> int:
    return len({k[2] for k in s.kinds if k[0] == dev and k[2] >= 0})


def _other_id() -> int:
    return next(k for k, v in schemas.stream_names().items() if v == "other")


def scan(path: str | Path, granule: int | None = None) -> Scan:
    """One pass over the trace at `path` (with `granule`: collecting each device's
    touched granules of that size too, for --remap compact). Raises IotapeError."""
    path = Path(path)
    with open_trace(path) as trace:
        s = Scan(path, trace.header, touched={} if granule else None)
        s.granule = granule or compact.GRANULE
        seen = 0
        for raw in trace.iter_chunks():
            r = raw[replayable(raw)]
            if len(r):
                seen = _note(s, r, request_times(r), seen)
    if s.requests == 0:
        raise IotapeError(f"{path}: the trace holds no read, write, flush or discard requests")
    if not isinstance(s.header.get("devices", []), list):
        raise IotapeError(f"{path}: header field devices: not a list")
    if s.timing == "none":
        raise IotapeError(f"{path}: the trace has no times; plan it whole (it is not streamed)")
    return s


def skeleton(s: Scan) -> Source:
    """A Source of one record per kind the scan found, each reaching its device's
    furthest byte, and times spanning the trace: what a plan lays out targets
    and names jobs from, as if from the whole trace."""
    r = np.zeros(len(s.kinds), dtype=RECORD_DTYPE)
    for (dev, sid, pid, writes), i in s.kinds.items():
        r["dev"][i], r["stream"][i], r["pid"][i] = dev, sid, max(pid, 0)
        r["op"][i] = OP["write"] if writes else OP["read"]
        r["bytes"][i] = 512
        r["offset"][i] = s.dev_end[dev] - 512
    t = np.zeros(len(r), np.int64)
    t[-1] = s.t_max - s.t_min
    return Source(s.path, s.header, r, t, s.timing, _streams(s.header))


def _streams(header: dict) -> dict[int, str]:
    out = {int(k): str(v) for k, v in (header.get("streams") or {}).items() if str(k).isdigit()}
    for k, v in schemas.stream_names().items():
        out.setdefault(k, v)
    return out


def sorted_chunks(s: Scan, chunk: int = CHUNK) -> Iterator[Source]:
    """The replayable records in time order, about `chunk` at a time, each as a
    Source with times from the trace's first request (as source.load gives them)."""
    streams = _streams(s.header)
    held_r: list[np.ndarray] = []
    held_t: list[np.ndarray] = []
    seen = 0
    with open_trace(s.path) as trace:
        for raw in trace.iter_chunks():
            r = _keep(raw, s.app_flush)
            if not len(r):
                continue
            t = request_times(r)
            seen = max(seen, int(t.max()))
            held_r.append(r)
            held_t.append(t)
            if sum(len(x) for x in held_t) >= chunk:
                ready, held_r, held_t = _release(held_r, held_t, seen - s.lag_ns)
                if ready is not None:
                    yield Source(s.path, s.header, ready[0], ready[1] - s.t_min, s.timing, streams)
    ready, _, _ = _release(held_r, held_t, None)
    if ready is not None:
        yield Source(s.path, s.header, ready[0], ready[1] - s.t_min, s.timing, streams)


def _keep(raw: np.ndarray, app_flush: bool) -> np.ndarray:
    """The chunk's replayable records, device flushes dropped wherever the whole
    trace has an app's flush (source.replayable decides that per array)."""
    keep = replayable(raw)
    if app_flush:
        keep &= ~device_flushes(raw)
    return raw[keep]


def _release(
    rs: list[np.ndarray], ts: list[np.ndarray], before: int | None
) -> tuple[tuple[np.ndarray, np.ndarray] | None, list[np.ndarray], list[np.ndarray]]:
    """(records with times < `before` (all, with None) in time order, the rest)."""
    if not rs:
        return None, rs, ts
    r = _concat(rs)
    t = np.concatenate(ts)
    order = np.argsort(t, kind="stable")
    r, t = r[order], t[order]
    n = len(t) if before is None else int(np.searchsorted(t, before, side="left"))
    if n == 0:
        return None, [r], [t]
    return (r[:n], t[:n]), [r[n:]], [t[n:]]


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    # Byte-wise, as Trace.read_all does: np.concatenate would pack the dtype.
    out = np.empty(sum(len(p) for p in parts), dtype=RECORD_DTYPE)
    raw = out.view(np.uint8).reshape(len(out), RECORD_DTYPE.itemsize)
    at = 0
    for p in parts:
        raw[at : at + len(p)] = p.view(np.uint8).reshape(len(p), RECORD_DTYPE.itemsize)
        at += len(p)
    return out
