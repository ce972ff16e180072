"""blktrace events → one record per request: the binary per-CPU files, blkparse's
default text output, and the ftrace `blk` tracer's classic lines all end up here.

`Pairer` follows each request through queue (Q), merges (M, F), splits (X),
requeues (R), issue (D) and completion (C), the way btt does, and counts what
it could not pair instead of guessing. Zero-length flushes follow the kernel's
flush machinery: the submitter's empty PREFLUSH write completes (`C WS 0 [0]`)
after a separate device flush (`D FN`, `C FN`) that nobody queued; the former
becomes an `op=flush` record with the submitter's pid and no issue time, the
latter a flush record with pid 0, as the live recorder writes them.
"""

from __future__ import annotations

import heapq
import re
import struct
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

import schemas
from iotape.errors import IotapeError

OP = schemas.enum("op")
FLAG = {k: 1 << v for k, v in schemas.bits("flag").items()}
DT = schemas.record_dtype()

# struct blk_io_trace (include/uapi/linux/blktrace_api.h), version 7, little-endian:
# magic sequence time sector bytes action pid device cpu error pdu_len
TRACE = struct.Struct("<IIQQIIIIIHH")
MAGIC = 0x65617400
VERSION = 7
# The largest payload the kernel writes is a notify message (BLK_TN_MAX_MSG 128) or a
# cgroup id plus a remap; anything far larger is a corrupt length, not a payload.
MAX_PDU = 4096

# Category bits (enum blktrace_cat), in action >> 16.
TC_READ, TC_WRITE, TC_FLUSH, TC_SYNC = 1 << 0, 1 << 1, 1 << 2, 1 << 3
TC_PC, TC_NOTIFY, TC_AHEAD, TC_META = 1 << 9, 1 << 10, 1 << 11, 1 << 12
TC_DISCARD, TC_FUA = 1 << 13, 1 << 15
TA_CGROUP = 1 << 8
# enum blktrace_act → the letters blkparse prints.
ACTIONS = "?QMFGSRDCPUTIXBA"
TN_PROCESS, TN_TIMESTAMP = 0, 1
# rwbs letters → category bits (kernel/trace/blktrace.c fill_rwbs, read backwards).
_RWBS_OP = {"D": TC_DISCARD, "W": TC_WRITE, "R": TC_READ, "N": TC_READ}
_RWBS_FLAG = {"F": TC_FUA, "A": TC_AHEAD, "S": TC_SYNC, "M": TC_META, "E": 0}


@dataclass(slots=True)
class Event:
    time: int
    act: str
    cat: int
    dev: int
    sector: int
    bytes: int
    pid: int
    error: int = 0
    new_sector: int = 0
    cgroup: int = 0


def op_flags(cat: int, nbytes: int) -> tuple[int, int]:
    """(op, flags) of a request from its blktrace category bits."""
    flags = 0
    if cat & TC_SYNC:
        flags |= FLAG["sync"]
    if cat & TC_FUA:
        flags |= FLAG["fua"]
    if cat & TC_META:
        flags |= FLAG["meta"]
    if cat & TC_AHEAD:
        flags |= FLAG["readahead"]
    if cat & TC_DISCARD:
        return OP["discard"], flags
    if cat & TC_FLUSH:
        if nbytes == 0:
            # An empty PREFLUSH write or the device flush itself: both are flushes.
            return OP["flush"], flags | (FLAG["preflush"] if cat & TC_WRITE else 0)
        flags |= FLAG["preflush"]
    return (OP["write"] if cat & TC_WRITE else OP["read"]), flags


def rwbs_cat(rwbs: str) -> int:
    """Category bits from an rwbs string such as `FWS`, `RA`, `FN`, `WFS`."""
    cat, i = 0, 0
    if len(rwbs) > 1 and rwbs[0] == "F" and rwbs[1] in "DWRN":
        cat, i = TC_FLUSH, 1
    if i >= len(rwbs) or rwbs[i] not in _RWBS_OP:
        raise ValueError(f"rwbs {rwbs!r}: no R, W, D or N")
    cat |= _RWBS_OP[rwbs[i]]
    for ch in rwbs[i + 1 :]:
        if ch not in _RWBS_FLAG:
            raise ValueError(f"rwbs {rwbs!r}: unknown letter {ch!r}")
        cat |= _RWBS_FLAG[ch]
    return cat


@dataclass(slots=True)
class _Req:
    q: int
    issue: int
    dev: int
    sector: int
    bytes: int
    cat: int
    pid: int
    cgroup: int
    done: int = 0  # bytes completed so far (partial completions)


@dataclass
class Pairer:
    """Pair Q/D/C (with merges, splits, requeues, remaps) into records.

    Feed events in time order with `add`; `take()` hands out the finished records
    since the last call; `finish()` counts what is left unpaired.
    """

    comms: dict[int, bytes] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    unpaired: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    first_time: int | None = None

    def __post_init__(self) -> None:
        self._queued: dict[tuple[int, int], deque[_Req]] = defaultdict(deque)
        self._ends: dict[tuple[int, int], tuple[int, int]] = {}
        self._empty: dict[int, deque[_Req]] = defaultdict(deque)
        self._inflight: dict[tuple[int, int], deque[_Req]] = defaultdict(deque)
        self._flushes: dict[int, deque[_Req]] = defaultdict(deque)
        self._final: set[tuple[int, int]] = set()
        self._out: list[tuple] = []

    # ------------------------------------------------------------------ events

    def add(self, e: Event) -> None:
        self.counts[e.act] += 1
        if e.cat & TC_PC:
            self.counts["passthrough"] += 1
            return
        handler = _HANDLERS.get(e.act)
        if handler is not None:
            handler(self, e)

    def _q(self, e: Event) -> None:
        r = _Req(e.time, 0, e.dev, e.sector, e.bytes, e.cat, e.pid, e.cgroup)
        if e.bytes == 0:
            self._empty[e.dev].append(r)
            return
        self._queued[(e.dev, e.sector)].append(r)
        self._ends[(e.dev, e.sector + e.bytes // 512)] = (e.dev, e.sector)

    def _pop_queued(self, key: tuple[int, int]) -> _Req | None:
        fifo = self._queued.get(key)
        if not fifo:
            return None
        r = fifo.popleft()
        if not fifo:
            del self._queued[key]
        end = (r.dev, r.sector + r.bytes // 512)
        if self._ends.get(end) == key:
            del self._ends[end]
        return r

    def _back_merge(self, e: Event) -> None:
        # The bio at e.sector joins the request that ends where it starts.
        bio = self._pop_queued((e.dev, e.sector))
        owner = self._ends.get((e.dev, e.sector))
        target = self._queued.get(owner)[-1] if owner and self._queued.get(owner) else None
        if target is None:
            if bio is not None:
                self._queued[(e.dev, e.sector)].appendleft(bio)
            self.unpaired["merge_without_request"] += 1
            return
        del self._ends[(e.dev, e.sector)]
        target.bytes += e.bytes
        target.q = min(target.q, bio.q) if bio else target.q
        self._ends[(e.dev, target.sector + target.bytes // 512)] = owner

    def _front_merge(self, e: Event) -> None:
        # The bio at e.sector joins the request that starts where it ends.
        bio = self._pop_queued((e.dev, e.sector))
        target = self._pop_queued((e.dev, e.sector + e.bytes // 512))
        if target is None:
            if bio is not None:
                self._queued[(e.dev, e.sector)].appendleft(bio)
            self.unpaired["merge_without_request"] += 1
            return
        target.sector, target.bytes = e.sector, target.bytes + e.bytes
        if bio is not None:
            target.q, target.pid = min(target.q, bio.q), bio.pid if bio.q < target.q else target.pid
        self._queued[(e.dev, e.sector)].append(target)
        self._ends[(e.dev, target.sector + target.bytes // 512)] = (e.dev, e.sector)

    def _split(self, e: Event) -> None:
        r = self._pop_queued((e.dev, e.sector))
        if r is None or not e.sector < e.new_sector < e.sector + r.bytes // 512:
            self.unpaired["split_without_queue"] += 1
            if r is not None:
                self._queued[(e.dev, e.sector)].appendleft(r)
            return
        head = (e.new_sector - e.sector) * 512
        tail = _Req(r.q, 0, r.dev, e.new_sector, r.bytes - head, r.cat, r.pid, r.cgroup)
        r.bytes = head
        for part in (r, tail):
            self._queued[(e.dev, part.sector)].append(part)
            self._ends[(e.dev, part.sector + part.bytes // 512)] = (e.dev, part.sector)

    def _issue(self, e: Event) -> None:
        if e.bytes == 0:
            # A zero-length dispatch is the device flush the flush machinery issues.
            r = _Req(0, e.time, e.dev, e.sector, 0, e.cat, 0, 0)
            self._flushes[e.dev].append(r)
            return
        r = self._pop_queued((e.dev, e.sector))
        if r is None:
            self.unpaired["issue_without_queue"] += 1
            r = _Req(0, e.time, e.dev, e.sector, e.bytes, e.cat, e.pid, e.cgroup)
        r.issue = e.time
        r.bytes = e.bytes  # the dispatched size is the truth, whatever merges we saw
        r.cat |= e.cat & ~(TC_READ | TC_WRITE)
        self._inflight[(e.dev, e.sector)].append(r)

    def _requeue(self, e: Event) -> None:
        fifo = self._inflight.get((e.dev, e.sector))
        if not fifo:
            self.unpaired["requeue_without_issue"] += 1
            return
        r = fifo.popleft()
        if not fifo:
            del self._inflight[(e.dev, e.sector)]
        self.counts["requeued"] += 1
        self._queued[(e.dev, e.sector)].appendleft(r)
        self._ends[(e.dev, e.sector + r.bytes // 512)] = (e.dev, e.sector)

    def _complete(self, e: Event) -> None:
        key = (e.dev, e.sector)
        if e.bytes == 0:
            self._complete_empty(e)
            return
        fifo = self._inflight.get(key)
        if fifo:
            r = fifo.popleft()
            if not fifo:
                del self._inflight[key]
        else:
            # Bio-based drivers (dm, md) complete without a dispatch.
            r = self._pop_queued(key)
            if r is None:
                self.unpaired["complete_without_issue"] += 1
                return
            self.unpaired["complete_without_issue_paired_to_queue"] += 1
        r.done += e.bytes
        if r.done < r.bytes:
            # A partial completion (older kernels): the rest completes at its own sector.
            self._inflight[(e.dev, r.sector + r.done // 512)].appendleft(r)
            return
        self._emit(r, e.time, e.error)
        if r.cat & (TC_FUA | TC_FLUSH):
            # Requests run through the flush machinery end once more with zero bytes.
            self._final.add((r.dev, r.sector))

    def _complete_empty(self, e: Event) -> None:
        if not e.cat & TC_WRITE and self._flushes.get(e.dev):
            self._emit(self._flushes[e.dev].popleft(), e.time, e.error)
            return
        if (e.dev, e.sector) in self._final:
            self._final.discard((e.dev, e.sector))
            self.counts["flush_sequence_end"] += 1
            return
        if self._empty.get(e.dev):
            self._emit(self._empty[e.dev].popleft(), e.time, e.error)
            return
        if self._flushes.get(e.dev):
            self._emit(self._flushes[e.dev].popleft(), e.time, e.error)
            return
        self.unpaired["complete_without_issue"] += 1

    def _notify(self, e: Event) -> None:
        pass

    def _emit(self, r: _Req, t: int, error: int) -> None:
        op, flags = op_flags(r.cat, r.bytes)
        self._out.append(
            (r.q, r.issue, t, r.dev, r.sector * 512, r.bytes, op, flags, error, r.pid, r.cgroup)
        )

    # ------------------------------------------------------------------ output

    def take(self, base: int) -> np.ndarray:
        """Finished records since the last call, times relative to `base`."""
        out = np.zeros(len(self._out), dtype=DT)
        if not self._out:
            return out
        cols = np.array(self._out, dtype=np.int64).T
        self._out = []
        q, d, c = cols[0], cols[1], cols[2]
        out["ts_queue_ns"] = np.where(q > 0, np.maximum(q - base, 0), 0)
        out["ts_issue_ns"] = np.where(d > 0, np.maximum(d - base, 0), 0)
        out["ts_complete_ns"] = np.maximum(c - base, 0)
        out["dev"], out["offset"], out["bytes"] = cols[3], cols[4], cols[5]
        out["op"], out["flags"] = cols[6], cols[7]
        # blktrace stores -errno as an unsigned 16-bit value; blkparse prints it signed.
        out["error"] = cols[8].astype(np.uint16).view(np.int16)
        out["pid"] = out["tid"] = cols[9]
        out["cgroup_id"] = cols[10].astype(np.uint64)
        pids = cols[9]
        if self.comms:
            out["comm"] = [self.comms.get(int(p), b"") for p in pids]
        return out

    def finish(self) -> dict[str, int]:
        """Count what never completed; returns the unpaired counters."""
        self.unpaired["queued_never_issued"] += sum(len(f) for f in self._queued.values())
        self.unpaired["queued_never_issued"] += sum(len(f) for f in self._empty.values())
        self.unpaired["issued_never_completed"] += sum(len(f) for f in self._inflight.values())
        self.unpaired["issued_never_completed"] += sum(len(f) for f in self._flushes.values())
        self._queued.clear()
        self._empty.clear()
        self._inflight.clear()
        self._flushes.clear()
        return {k: v for k, v in sorted(self.unpaired.items()) if v}


_HANDLERS: dict[str, Callable[[Pairer, Event], None]] = {
    "Q": Pairer._q,
    "M": Pairer._back_merge,
    "F": Pairer._front_merge,
    "X": Pairer._split,
    "D": Pairer._issue,
    "R": Pairer._requeue,
    "C": Pairer._complete,
}


# --------------------------------------------------------------------------- binary


@dataclass
class BinaryInfo:
    """What the binary reader learns besides events: names and the wall-clock anchor."""

    comms: dict[int, bytes]
    wall_anchor: tuple[int, int] | None = None  # (trace time, wall ns) from a TN_TIMESTAMP
    remaps: int = 0
    messages: int = 0


def read_binary(
    f: BinaryIO, name: str, info: BinaryInfo, block: int = 1 << 22
) -> Iterator[tuple[int, int, Event]]:
    """(time, sequence, event) of one per-CPU file, in file order; notify records feed `info`."""
    buf = b""
    pos = 0  # byte offset of buf[0] in the file
    i = 0
    while True:
        more = f.read(block)
        if more:
            buf = buf[i:] + more
            pos += i
            i = 0
        n = len(buf)
        while n - i >= TRACE.size:
            magic, seq, t, sector, nbytes, action, pid, dev, _cpu, err, pdu_len = TRACE.unpack_from(
                buf, i
            )
            if magic & 0xFFFFFF00 != MAGIC:
                raise IotapeError(
                    f"{name}: byte {pos + i}: field magic: {magic:#010x} is not a "
                    "blktrace record (0x656174XX, little-endian)"
                )
            if magic & 0xFF != VERSION:
                raise IotapeError(
                    f"{name}: byte {pos + i}: field magic: blktrace version {magic & 0xFF}, "
                    f"only version {VERSION} is read"
                )
            if pdu_len > MAX_PDU:
                raise IotapeError(f"{name}: byte {pos + i}: field pdu_len: {pdu_len} is too large")
            end = i + TRACE.size + pdu_len
            if end > n:
                break
            pdu = buf[i + TRACE.size : end]
            at = pos + i
            i = end
            cat, low = action >> 16, action & 0xFFFF
            if cat & TC_NOTIFY:
                _notify(low & 0xFF, pid, t, pdu, info)
                continue
            cgroup = 0
            if low & TA_CGROUP:
                if len(pdu) < 8:
                    raise IotapeError(f"{name}: byte {at}: field pdu_len: no cgroup id")
                cgroup = int.from_bytes(pdu[:8], "little")
                pdu = pdu[8:]
            act_no = low & 0xFF
            act = ACTIONS[act_no] if act_no < len(ACTIONS) else "?"
            e = Event(t, act, cat, dev, sector, nbytes, pid, err, 0, cgroup)
            if act == "X" and len(pdu) >= 8:
                e.new_sector = int.from_bytes(pdu[:8], "big")
            elif act == "A":
                info.remaps += 1
            yield t, seq, e
        if not more:
            if n - i:
                raise IotapeError(
                    f"{name}: byte {pos + i}: field pdu_len: file ends inside a record "
                    f"({n - i} bytes left)"
                )
            return


def _notify(kind: int, pid: int, t: int, pdu: bytes, info: BinaryInfo) -> None:
    if kind == TN_PROCESS:
        info.comms[pid] = pdu.split(b"\0", 1)[0][:16]
    elif kind == TN_TIMESTAMP and len(pdu) >= 8:
        sec, nsec = struct.unpack_from("<II", pdu)
        if info.wall_anchor is None:
            info.wall_anchor = (t, sec * 1_000_000_000 + nsec)
    else:
        info.messages += 1


def merge_cpus(streams: Iterable[Iterator[tuple[int, int, Event]]]) -> Iterator[Event]:
    """One time-ordered stream from the per-CPU streams (each already in time order)."""
    streams = list(streams)
    if len(streams) == 1:
        for _, _, e in streams[0]:
            yield e
        return
    for _, _, e in heapq.merge(*streams, key=lambda x: (x[0], x[1])):
        yield e


# --------------------------------------------------------------------------- text

# blkparse: "259,0  1  7  0.000056992  0  C  RA 2348060440 + 8 [0]"
# ftrace blk_classic has no sequence column: "7,0  1  2530.974341911 18942  Q  RS 0 + 8 [dd]"
_DEV = re.compile(r"^(\d+),(\d+)$")
_TIME = re.compile(r"^(\d+)\.(\d{1,9})$")


class BadLine(ValueError):
    """A text line that is not an event: the field and why."""

    def __init__(self, fld: str, why: str) -> None:
        super().__init__(f"field {fld}: {why}")


def parse_text_line(line: str) -> Event | None:
    """One event from a blkparse (default format) or ftrace blk_classic line.

    Returns None for lines that are not events of a request (plug, unplug, messages).
    Raises BadLine for a line that looks like an event but is malformed.
    """
    f = line.split()
    m = _DEV.match(f[0]) if f else None
    if m is None:
        raise BadLine("device", f"{f[0] if f else line!r} is not MAJOR,MINOR")
    has_seq = len(f) > 3 and _TIME.match(f[3]) is not None
    k = 3 if has_seq else 2
    if len(f) < k + 4:
        raise BadLine("action", "line ends early")
    tm = _TIME.match(f[k])
    if tm is None:
        raise BadLine("time", f"{f[k]!r} is not SECONDS.NANOSECONDS")
    t = int(tm.group(1)) * 1_000_000_000 + int(tm.group(2).ljust(9, "0"))
    if not f[k + 1].isdigit():
        raise BadLine("pid", f"{f[k + 1]!r} is not a number")
    pid = int(f[k + 1])
    act = f[k + 2]
    dev = (int(m.group(1)) << 20) | int(m.group(2))
    if act not in "QMFGSRDCXIBA" or len(act) != 1:
        return None  # P, U, T, m (message) and others say nothing about one request
    try:
        cat = rwbs_cat(f[k + 3])
    except ValueError as e:
        raise BadLine("rwbs", str(e)) from None
    rest = f[k + 4 :]
    sector, nbytes, err, new_sector = 0, 0, 0, 0
    try:
        if rest and rest[0].isdigit():
            sector = int(rest[0])
            if len(rest) > 2 and rest[1] == "+":
                nbytes = int(rest[2]) * 512
            elif len(rest) > 2 and rest[1] == "/":
                new_sector = int(rest[2])
        if act == "C" and rest and rest[-1].startswith("[") and rest[-1].endswith("]"):
            err = int(rest[-1][1:-1])
    except ValueError:
        raise BadLine("sector", f"{' '.join(rest)!r} is not SECTOR + COUNT") from None
    e = Event(t, act, cat, dev, sector, nbytes, pid, err & 0xFFFF, new_sector)
    return e


def text_comm(line: str) -> tuple[int, bytes] | None:
    """(pid, comm) named on a Q line's `[comm]`, for the records' comm column."""
    if " Q " not in line:
        return None
    lb, rb = line.rfind("["), line.rfind("]")
    if lb < 0 or rb < lb:
        return None
    name = line[lb + 1 : rb]
    if name == "(null)":
        return None
    f = line.split()
    k = 3 if len(f) > 3 and _TIME.match(f[3]) else 2
    return (int(f[k + 1]), name.encode()[:16]) if f[k + 1].isdigit() else None


# blkparse's per-CPU and total summary: the self-check reads these.
_EVENTS = re.compile(r"^Events \((\d+),(\d+)\): (\d+) entries")
_QUEUED = re.compile(r"Reads Queued:\s+(\d+),.*Writes Queued:\s+(\d+),")
_SECTION = re.compile(r"^(CPU\d+|Total) \((\d+),(\d+)\):")


@dataclass
class Summary:
    """blkparse's footer: event and queue counts per device."""

    events: dict[str, int] = field(default_factory=dict)
    queued_cpu: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    queued_total: dict[str, int] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # our own event lines per device
    queued: dict[str, int] = field(default_factory=dict)  # our own Q lines per device
    _section: tuple[str, str] | None = None

    def feed(self, line: str) -> bool:
        """True when the line belongs to the summary."""
        s = line.strip()
        m = _SECTION.match(s)
        if m:
            self._section = (m.group(1), f"{m.group(2)},{m.group(3)}")
            return True
        m = _EVENTS.match(s)
        if m:
            self.events[f"{m.group(1)},{m.group(2)}"] = int(m.group(3))
            return True
        m = _QUEUED.search(s)
        if m and self._section:
            n = int(m.group(1)) + int(m.group(2))
            kind, dev = self._section
            if kind == "Total":
                self.queued_total[dev] = n
            else:
                self.queued_cpu[dev] += n
            return True
        return bool(s) and (
            s.startswith(("Throughput", "Skips", "Input file"))
            or (":" in s and not _DEV.match(s.split()[0]))
        )

    def check(self) -> dict:
        """Compare our own counts with blkparse's; {"ok": bool, ...}."""
        lines, queued = self.lines, self.queued
        out: dict = {"present": bool(self.events)}
        bad = []
        for dev, n in self.events.items():
            if lines.get(dev, 0) != n:
                bad.append(f"{dev}: {lines.get(dev, 0)} event lines, summary says {n}")
        want_q = self.queued_total or self.queued_cpu
        for dev, n in want_q.items():
            if queued.get(dev, 0) != n:
                bad.append(f"{dev}: {queued.get(dev, 0)} queued, summary says {n}")
        out["ok"] = not bad
        out["mismatches"] = bad
        return out
