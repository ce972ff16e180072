"""Read a trace into what a replay needs: the requests to issue, in order, with their times.

Flushes: one application flush, one replayed flush. A trace holds one op=flush
record per application flush (the submitter's empty PREFLUSH write, its pid;
docs/trace-format.md, "Flushes"); it maps to fio's `sync` action, and replaying
it makes the kernel issue the device flush again. The device's own flush request
is a record only where no application flush was seen for it (flag
`device_flush`), and traces written before that model have it as a second
record with pid 0. Those are dropped whenever the trace has an application
flush, since replaying both would flush twice; a trace with device flushes
only (no submitter seen) replays them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import schemas
from base.errors import IotapeError
from recorder.tracefile import open_trace

OP = schemas.enum("op")
FLAG = schemas.bits("flag")
FUA = 1 << FLAG["fua"]
PREFLUSH = 1 << FLAG["preflush"]
DEVICE_FLUSH = 1 << FLAG["device_flush"]


@dataclass
class Source:
    """The requests to replay, sorted by `t_ns` (ns since the first of them)."""

    path: Path
    header: dict
    records: np.ndarray
    t_ns: np.ndarray
    timing: str  # "issue", "arrival" (no latency known) or "none" (order only)
    streams: dict[int, str]
    notes: list[str] = field(default_factory=list)

    @property
    def duration_ns(self) -> int:
        return int(self.t_ns[-1]) if len(self.t_ns) else 0

    def stream_name(self, sid: int) -> str:
        return self.streams.get(int(sid), f"stream{int(sid)}")

    def metadata(self) -> dict:
        return dict(self.header.get("metadata") or {})

    def device_names(self) -> dict[int, str]:
        return {int(d["dev"]): str(d.get("name", d["dev"])) for d in self.header.get("devices", [])}


def request_times(r: np.ndarray) -> np.ndarray:
    """When each request reached the device: issue time, else queue time (the
    submitter's flush is never issued itself), else completion (imported traces)."""
    t = r["ts_issue_ns"].astype(np.int64)
    t = np.where(t > 0, t, r["ts_queue_ns"].astype(np.int64))
    return np.where(t > 0, t, r["ts_complete_ns"].astype(np.int64))


def replayable(r: np.ndarray) -> np.ndarray:
    """Mask of the records a replay issues (see the module doc for flushes)."""
    op = r["op"]
    keep = np.isin(op, [OP["read"], OP["write"], OP["flush"], OP["discard"], OP["write-zeroes"]])
    data = op != OP["flush"]
    keep &= ~data | (r["bytes"] > 0)
    if app_flushes(r).any():
        keep &= ~device_flushes(r)
    return keep


def device_flushes(r: np.ndarray) -> np.ndarray:
    """Mask of the device's own flush requests: flagged, or (older traces) pid 0."""
    flush = r["op"] == OP["flush"]
    return flush & (((r["flags"] & DEVICE_FLUSH) != 0) | (r["pid"] == 0))


def app_flushes(r: np.ndarray) -> np.ndarray:
    """Mask of the flushes an application asked for (see the module doc)."""
    return (r["op"] == OP["flush"]) & ~device_flushes(r)


def load(path: str | Path) -> Source:
    """The trace at `path`, checked, filtered and time-ordered. Raises IotapeError."""
    path = Path(path)
    with open_trace(path) as trace:
        header = trace.header
        records = trace.read_all()
    if not isinstance(header.get("devices", []), list):
        raise IotapeError(f"{path}: header field devices: not a list")
    if len(records) == 0:
        raise IotapeError(f"{path}: the trace holds no requests to replay")
    records = records[replayable(records)]
    if len(records) == 0:
        raise IotapeError(f"{path}: the trace holds no read, write, flush or discard requests")
    data = records["op"] != OP["flush"]
    bad = data & (records["offset"] % 512 != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise IotapeError(
            f"{path}: record {i}: field offset: {records['offset'][i]} is not 512-aligned"
        )
    t = request_times(records)
    notes: list[str] = []
    if not (t > 0).any():
        timing = "none"
        t = np.zeros(len(records), dtype=np.int64)
        notes.append(
            "the trace has no times (e.g. a fio v2 iolog): requests are replayed "
            "in order, back to back"
        )
    else:
        has_latency = (records["ts_complete_ns"] > records["ts_issue_ns"]) & (
            records["ts_issue_ns"] > 0
        )
        timing = "issue" if has_latency.any() else "arrival"
        if timing == "arrival":
            notes.append(
                "the trace has no latency (issue = completion): its one time is "
                "used as the issue time"
            )
    order = np.argsort(t, kind="stable")
    records = records[order]
    t = t[order]
    t = t - t[0]
    streams = {int(k): str(v) for k, v in (header.get("streams") or {}).items() if str(k).isdigit()}
    for k, v in schemas.stream_names().items():
        streams.setdefault(k, v)
    return Source(path, header, records, t, timing, streams, notes)


def max_in_flight(r: np.ndarray, t_ns: np.ndarray) -> int:
    """The most requests of `r` outstanding at once, from issue and completion times."""
    lat = r["ts_complete_ns"].astype(np.int64) - r["ts_issue_ns"].astype(np.int64)
    ok = (r["ts_issue_ns"] > 0) & (lat > 0)
    if not ok.any():
        return 1
    start = t_ns[ok]
    end = start + lat[ok]
    times = np.concatenate([end, start])
    # Completions sort before issues at the same instant: they free the slot first.
    delta = np.concatenate([-np.ones(len(end), np.int64), np.ones(len(start), np.int64)])
    order = np.lexsort((delta, times))
    return max(1, int(np.cumsum(delta[order]).max()))


ACTIONS = ["read", "write", "sync", "trim", "write+fua", "write+preflush", "write+preflush+fua"]


def lane_action_codes(r: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Each request's iotape-lanes action (lanes.c): read, write, sync, trim or a
    write with +fua and/or +preflush, as (ACTIONS, its index into them): no
    Python string a request."""
    op, flags = r["op"], r["flags"]
    code = np.full(len(r), 1, np.int8)
    code[op == OP["read"]] = 0
    code[op == OP["flush"]] = 2
    code[op == OP["discard"]] = 3
    w = code == 1
    fua, pre = w & ((flags & FUA) != 0), w & ((flags & PREFLUSH) != 0)
    code[fua & ~pre] = 4
    code[pre & ~fua] = 5
    code[pre & fua] = 6
    return ACTIONS, code
