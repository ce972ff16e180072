"""`replay run --record`, after fio: give each request of the recorded replay the
stream of the plan job that issued it, a batch at a time.

fio's threads all carry fio's name, so the recorder labels the whole replay
`other`. A replayed read/write/discard is matched to the plan's iolog entry with
the same (op, offset, size), the k-th with the k-th in time order; every other
request of the same thread (its flushes: fio's `sync`) gets that thread's stream.

`relabel` streams: the plan's iologs are merged in time order a few hundred
lines of each at a time (each log is in time order; pieces are short logs, a
plan of lanes has up to 2,000 logs spanning the whole trace), the recording
comes in time-ordered batches (ordered.py), and they pair as fidelity's traces
do (pairing.py, within the same horizon, both clocks counting from their first
request). What it keeps whole is the label of each request (2 bytes a request)
and the stream of each thread; the trace is then rewritten chunk by chunk.
`relabel_in_memory` is the version that held the plan and the recording whole
(the reference of the tests).
"""

from __future__ import annotations

import contextlib
import heapq
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

import schemas
from base.errors import IotapeError
from recorder.tracefile import TraceWriter, open_trace, trace_sha256, write_trace
from replayer.plan import iolog
from replayer.plan.dependent import HEADER as DEPENDENT_HEADER
from replayer.plan.model import Manifest
from replayer.plan.source import OP, request_times
from replayer.run import fidelity as fid
from replayer.run import fidstream, logblocks, native, ordered
from replayer.run.pairing import HORIZON_NS
from replayer.run.results import Relabel

CODES = {"read": OP["read"], "write": OP["write"], "trim": OP["discard"]}
LABELS = "from the replay plan's jobs (iotape replay run)"


def _entries(log: Path) -> list[list[str]]:
    lines = log.read_text().splitlines()
    if lines and lines[0] == DEPENDENT_HEADER:
        return _dependent_entries(lines[1:])
    # A plan of lanes writes version-2 logs (entries timed by their wait lines).
    f = iolog.entry_times_us(lines[1:])
    return [x for _t, x in f if x[2] in CODES]


def _dependent_entries(lines: list[str]) -> list[list[str]]:
    """A dependent plan's log ("ID AFTER THINK ACTION OFFSET LENGTH", dependent.py)
    as iolog entries [ID, -, action, offset, length]: its requests have no times
    before they run, so the plan's id (issue order) stands in for one. What a line
    has past its sixth field (`or AFTER THINK`, `join DONE ISSUED`) says when it
    goes, not what it is."""
    out = []
    for ln in lines:
        x = ln.split()
        if len(x) >= 6 and not ln.startswith(";"):
            action = x[3].split("+")[0]
            if action in CODES:
                out.append([x[0], "-", action, x[4], x[5]])
    return out


def _job_logs(jobdir: Path, man: Manifest, names: list[str]) -> Iterator[tuple[Path, int]]:
    """(log, its stream's index in `names`) of each plan job that has a log; a
    stream not yet in `names` is appended."""
    for j in man.jobs:
        log = jobdir / "iologs" / f"{j.name}.log"
        if not log.exists():
            continue
        if j.stream not in names:
            names.append(j.stream)
        yield log, names.index(j.stream)


def _logs(jobdir: Path, man: Manifest) -> tuple[list[tuple[int, int, Path]], list[str]]:
    """(first entry's time in us, stream index, log) of each log with entries, by
    time; and the stream names the indexes point into."""
    names: list[str] = []
    logs = []
    for log, s in _job_logs(jobdir, man, names):
        with open(log) as f:
            next(f, None)
            first = next((x for _t, x in iolog.iter_entry_times_us(f) if x[2] in CODES), None)
        if first is not None:
            logs.append((int(first[0]), s, log))
    logs.sort(key=lambda x: x[0])
    return logs, names


def _compact(
    t_us: np.ndarray, op: np.ndarray, off: np.ndarray, size: np.ndarray, stream: int, t0_us: int
) -> np.ndarray:
    a = np.zeros(len(t_us), ordered.COMPACT)
    a["t"] = (t_us - t0_us) * 1000
    a["op"] = op
    a["offset"] = off
    a["bytes"] = size
    a["stream"] = stream
    return a


class _LogReader:
    """One plan log, read a block at a time. A plan of lanes has up to 2,000 logs
    that each span the whole trace: holding them whole is the plan's size, and
    holding them open can pass the process's file limit, so each block reopens
    the log where the last one stopped. The lines are parsed in C (logblocks.py)."""

    BYTES = 1 << 15  # about 500 entries of a plan of lanes (a wait line before each)
    # What all logs' blocks may hold together: a plan of few logs reads larger
    # blocks (2 logs of a 2.2 M-request replay: 2,098 blocks of 32 KiB, ~0.1 ms
    # each of opening, parsing and copying).
    ALL_BYTES = 1 << 20

    def __init__(self, log: Path, stream: int, t0_us: int, block: int | None = None) -> None:
        self.log, self.stream, self.t0_us = log, stream, t0_us
        self.block = block or self.BYTES
        self.pos: int | None = None  # None: before the header line
        self.now = 0  # the last wait's time (v2 logs)
        self.done = False
        self.last_ns = 0  # the time of the last entry read: the rest come at or after it

    def _lines(self, f) -> bytes:
        """The next whole lines, about a block of them (all that is left at the end)."""
        buf = f.read(self.block)
        while buf:
            cut = buf.rfind(b"\n") + 1
            if cut:
                f.seek(cut - len(buf), os.SEEK_CUR)
                return buf[:cut]
            more = f.read(self.block)  # a line longer than a block
            if not more:
                break
            buf += more
        self.done = True
        return buf + b"\n" if buf else buf

    def read(self) -> np.ndarray:
        """The next block's read/write/trim entries (possibly none, once done)."""
        got: list[np.ndarray] = []
        with open(self.log, "rb") as f:
            if self.pos is None:
                f.readline()
            else:
                f.seek(self.pos)
            while not got and not self.done:
                t, op, off, size, self.now = logblocks.parse(self._lines(f), self.now)
                if len(t):
                    got.append(_compact(t, op, off, size, self.stream, self.t0_us))
            self.pos = f.tell()
        a = got[0] if got else np.zeros(0, ordered.COMPACT)
        if len(a):
            self.last_ns = int(a["t"][-1])
        return a


def planned_batches(
    logs: list[tuple[int, int, Path]], batch: int | None = None
) -> Iterator[np.ndarray]:
    """The plan's entries as ordered.COMPACT batches (t in ns since the first entry),
    in _plan_requests' order: time, then op, offset, size and stream.

    A k-way merge of the time-ordered logs: everything earlier than the least time
    any unfinished log has reached (or the next unopened log starts at) is final
    and goes out sorted, once a batch's worth has been read since the last time
    (sorting what is held after every block, a block of each of 2,000 logs, made
    the merge quadratic); the log that holds that least time is read next."""
    t0 = logs[0][0] if logs else 0
    block_bytes = max(_LogReader.BYTES, _LogReader.ALL_BYTES // max(1, len(logs)))
    pending = list(reversed(logs))  # popped from the end: earliest first
    active: list[tuple[int, int, _LogReader]] = []  # a heap by the time each reached
    pool: list[np.ndarray] = []
    fresh = emitted = 0
    while True:
        marks = [active[0][0]] if active else []
        if pending:
            marks.append((pending[-1][0] - t0) * 1000)
        upto = min(marks) if marks else None
        if pool and (upto is None or fresh >= (batch or ordered.BATCH)):
            a = ordered.cat(pool)
            final = a["t"] < upto if upto is not None else np.ones(len(a), bool)
            out = ordered.take(a, final)
            out = ordered.take(out, _plan_order(out))
            out["n"] = np.arange(emitted, emitted + len(out))
            emitted += len(out)
            if len(out):
                yield out
            rest = ordered.take(a, ~final)
            pool, fresh = ([rest] if len(rest) else []), 0
        if upto is None:
            return
        if pending and (pending[-1][0] - t0) * 1000 == upto:
            _, stream, log = pending.pop()
            reader = _LogReader(log, stream, t0, block_bytes)
        else:
            reader = heapq.heappop(active)[2]
        block = reader.read()
        if len(block):
            pool.append(block)
            fresh += len(block)
        if not reader.done:
            heapq.heappush(active, (reader.last_ns, id(reader), reader))


def _plan_order(a: np.ndarray) -> np.ndarray:
    """The order of ordered.COMPACT rows by time, op, offset, size and stream (ties
    in row order): np.lexsort's, in C where it is there (src/planorder.c)."""
    lib = native.lib()
    if lib is None or not ordered.COMPACT_C:
        return np.lexsort((a["stream"], a["bytes"], a["offset"], a["op"], a["t"]))
    a = np.ascontiguousarray(a)
    order = np.argsort(a["t"], kind="stable")
    if lib.plan_order(a.ctypes.data, len(a), order.ctypes.data) != 0:
        raise MemoryError("ordering the plan's entries ran out of memory")
    return order


class _Labels(fidstream.Sink):
    """Each paired request's plan stream (by its place among the replayable
    requests), and each thread's stream: that of its pair whose plan entry
    comes first (time, then place). Neither depends on the order the pairs come
    in, so they come as soon as they form (fidstream.Sink.ordered)."""

    ordered = False

    def __init__(self, n: int, sid: np.ndarray) -> None:
        self.label = np.full(n, -1, np.int16)
        self.sid = sid
        self._first: dict[int, tuple[int, int, int]] = {}  # tid: (t, n, stream)

    @property
    def tid(self) -> dict[int, int]:
        return {t: v[2] for t, v in self._first.items()}

    def paired(self, o: np.ndarray, r: np.ndarray) -> None:
        s = self.sid[o["stream"]]
        self.label[r["n"]] = s
        order = np.lexsort((o["n"], o["t"], r["tid"]))
        tids = r["tid"][order]
        first = order[np.r_[True, tids[1:] != tids[:-1]]] if len(order) else order
        rows = zip(
            r["tid"][first].tolist(), o["t"][first].tolist(), o["n"][first].tolist(),
            s[first].tolist(), strict=True,
        )  # fmt: skip
        for t, tt, n, k in rows:
            held = self._first.get(t)
            if held is None or (tt, n) < held[:2]:
                self._first[t] = (tt, n, k)


def _stream_ids(header: dict, names: list[str]) -> tuple[dict[str, int], np.ndarray]:
    by_name = {v: int(k) for k, v in (header.get("streams") or {}).items() if str(k).isdigit()}
    for k, v in schemas.stream_names().items():
        by_name.setdefault(v, int(k))
    new = max([*by_name.values(), 0]) + 1
    for n in names:
        if n not in by_name:
            by_name[n], new = new, new + 1
    return by_name, np.array([by_name[n] for n in names], dtype=np.int64)


def relabel(trace: Path, jobdir: Path, man: Manifest, horizon_ns: int = HORIZON_NS) -> Relabel:
    """Relabel the recorded replay `trace` by plan job, rewriting it in place; its
    metadata says so (see the module doc)."""
    logs, names = _logs(Path(jobdir), man)
    try:
        # scan reads the header and counts what is replayable: one read of the
        # trace fewer than asking for the header first.
        scan: ordered.Scan | None = ordered.scan(trace) if logs else None
    except IotapeError:
        scan = None  # nothing a plan entry can pair with: only the threads' rule applies
    if scan is not None:
        header, total = dict(scan.header), scan.count
    else:
        header, _, total = ordered._app_flush(trace)
    meta = dict(header.get("metadata") or {})
    # What this trace replays, so that the store pairs it with its source (and with
    # other replays of it) as the same workload: analyzer/analyses/workloads.py.
    meta["replay_of"] = replay_of(man, jobdir)
    header["metadata"] = meta
    if not logs or not total:
        return _rewrite(trace, header, None, None)
    by_name, sid = _stream_ids(header, names)
    labels = _Labels(scan.count if scan else 0, sid)
    if scan is not None:
        # Small batches: what a step holds is a few times its batch (898 MiB peak at
        # 4x fidelity's on a 2.1 M-request full-rate replay, ~320 MiB at 1/4, no
        # slower). A replay slower than its plan still steps by what the pairing
        # holds (fidstream._at_least).
        batch = ordered.BATCH // 4
        plan_b, rec_b = planned_batches(logs, batch), ordered.batches(scan, batch)
        fidstream.drive_batches(plan_b, rec_b, labels, horizon_ns)
    header["streams"] = {str(v): k for k, v in sorted(by_name.items(), key=lambda kv: kv[1])}
    meta["stream_labels"] = LABELS
    return _rewrite(trace, header, scan, labels)


def _relabelled(c: np.ndarray, keep: np.ndarray, lab: np.ndarray, tid: dict[int, int]):
    """A chunk with its new streams, and how many of its requests got one."""
    out = c.copy()
    stream = c["stream"].astype(np.int64)
    got = np.full(len(c), -1, np.int64)
    got[keep] = lab
    for t in np.unique(c["tid"][(got < 0) & (c["tid"] != 0)]).tolist():
        if t in tid:
            got[(got < 0) & (c["tid"] == t)] = tid[t]
    done = got >= 0
    stream[done] = got[done]
    out["stream"] = stream.astype(c["stream"].dtype)
    return out, int(done.sum())


def _rewrite(
    trace: Path, header: dict, scan: ordered.Scan | None, labels: _Labels | None
) -> Relabel:
    """Copy `trace` chunk by chunk under `header`, with the labels, then replace it.
    The footer carries what the recorder counted (lost, pre_start, in flight at
    stop): rewriting the labels must not lose it."""
    tmp = Path(str(trace) + ".relabel")
    n = done = at = 0
    tid = labels.tid if labels is not None else {}
    try:
        with open_trace(trace) as t, TraceWriter(tmp, header) as w:
            footer = dict(t.footer or {})
            for c in t.iter_chunks():
                n += len(c)
                if labels is None:
                    w.write(c)
                    continue
                keep = ordered._keep(c, scan.app_flush) if scan else np.zeros(len(c), bool)
                k = int(keep.sum())
                out, d = _relabelled(c, keep, labels.label[at : at + k], tid)
                at, done = at + k, done + d
                w.write(out)
            # Read the footer only after iterating: iteration checks it.
            w.close(dict(t.footer or footer))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, trace)
    return Relabel(relabelled=done, requests=n)


def _plan_requests(jobdir: Path, man: Manifest) -> tuple[np.ndarray, list[str]]:
    """Every read/write/trim in the plan's iologs, in time order, as records with
    op, offset, bytes and stream (an index into the returned stream names).
    Held as arrays, one log at a time: a long plan has millions of entries."""
    names: list[str] = []
    codes = {"read": OP["read"], "write": OP["write"], "trim": OP["discard"]}
    cols: list[list[np.ndarray]] = [[], [], [], [], []]
    for log, s in _job_logs(jobdir, man, names):
        f = _entries(log)
        if not f:
            continue
        cols[0].append(np.array([int(x[0]) for x in f], np.int64))
        cols[1].append(np.array([codes[x[2]] for x in f], np.uint8))
        cols[2].append(np.array([int(x[3]) for x in f], np.uint64))
        cols[3].append(np.array([int(x[4]) for x in f], np.uint32))
        cols[4].append(np.full(len(f), s, np.int64))
    n = sum(len(c) for c in cols[0])
    a = np.zeros(n, dtype=[("op", "u1"), ("offset", "u8"), ("bytes", "u4"), ("stream", "i8")])
    if n:
        t, op, off, size, stream = (np.concatenate(c) for c in cols)
        # The same order as sorting (time, op, offset, bytes, stream) tuples.
        order = np.lexsort((stream, size, off, op, t))
        a["op"], a["offset"], a["bytes"], a["stream"] = (
            op[order],
            off[order],
            size[order],
            stream[order],
        )
    return a, names


def relabel_in_memory(trace: Path, jobdir: Path, man: Manifest, by_thread: bool = False) -> Relabel:
    """`relabel` with the plan and the recording held whole: the reference.

    fio's threads all carry fio's name, so the recorder labels the whole replay
    `other`. A replayed read/write/discard is matched to the plan's iolog entry with
    the same (op, offset, size), the k-th with the k-th in time order; every other
    request of the same thread (its flushes: fio's `sync`) gets that thread's stream.
    The trace is rewritten in place; its metadata says so.

    `by_thread` (a closed-loop plan, whose ids are in plan order, a slice after
    another, not in time order: a request repeated in two streams may pair with
    the other's): each of iotape-lanes' threads runs one job, so every request of
    a thread gets the stream most of its matched requests got."""
    with open_trace(trace) as t:
        header = dict(t.header)
        footer = dict(t.footer or {})
        r = t.read_all()
    planned, names = _plan_requests(Path(jobdir), man)
    meta = dict(header.get("metadata") or {})
    # What this trace replays, so that the store pairs it with its source (and with
    # other replays of it) as the same workload: analyzer/analyses/workloads.py.
    meta["replay_of"] = replay_of(man, jobdir)
    header["metadata"] = meta
    if not len(planned) or not len(r):
        _rewrite_whole(trace, header, r, footer)
        return Relabel(relabelled=0, requests=len(r))
    by_name, sid = _stream_ids(header, names)
    order = np.argsort(request_times(r), kind="stable")
    io, ir = fid.match(planned, r[order])
    rec_idx = order[ir]
    stream = r["stream"].astype(np.int64).copy()
    labelled = np.zeros(len(r), bool)
    stream[rec_idx] = sid[planned["stream"][io]]
    labelled[rec_idx] = True
    # The rest of a thread's requests (its syncs) go with the thread's stream.
    tids, first = np.unique(r["tid"][rec_idx], return_index=True)
    tid_stream = dict(zip(tids.tolist(), stream[rec_idx][first].tolist(), strict=True))
    if by_thread:
        for t in tids.tolist():
            own = rec_idx[r["tid"][rec_idx] == t]
            vals, counts = np.unique(stream[own], return_counts=True)
            tid_stream[t] = int(vals[np.argmax(counts)])
            if t != 0:
                stream[r["tid"] == t] = tid_stream[t]
    for i in np.flatnonzero(~labelled & (r["tid"] != 0)).tolist():
        s = tid_stream.get(int(r["tid"][i]))
        if s is not None:
            stream[i] = s
            labelled[i] = True
    r["stream"] = stream.astype(r["stream"].dtype)
    header["streams"] = {str(v): k for k, v in sorted(by_name.items(), key=lambda kv: kv[1])}
    meta["stream_labels"] = "from the replay plan's jobs (iotape replay run)"
    _rewrite_whole(trace, header, r, footer)
    return Relabel(relabelled=int(labelled.sum()), requests=len(r))


def _rewrite_whole(trace: Path, header: dict, r: np.ndarray, footer: dict) -> None:
    tmp = Path(str(trace) + ".relabel")
    # The footer carries what the recorder counted (lost, pre_start, in flight at
    # stop): rewriting the labels must not lose it.
    write_trace(tmp, header, r, footer)
    os.replace(tmp, trace)


def replay_of(man: Manifest, jobdir: Path | None = None) -> dict:
    """The source trace (path and content hash, which is its run id in the store),
    how the plan scaled it, and the plan (`replay fidelity` pairs through its mapping)."""
    src = Path(man.trace)
    digest = ""
    if src.is_file():
        with contextlib.suppress(OSError):
            digest = trace_sha256(src)
    scaling = man.scaling.data() if man.scaling else None
    out = {"trace": str(src), "trace_sha256": digest, "mode": man.mode,
           "time_scale": man.time_scale, "scaling": scaling}  # fmt: skip
    if man.closed_loop:
        # `replay fidelity` of this recording says its open-loop figures do not apply.
        out["timing"] = man.timing
    if jobdir is not None:
        out["plan"] = str(Path(jobdir).resolve() / "plan.json")
    return out
