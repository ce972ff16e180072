"""Assemble blktrace events into one record per request.

`Pairer` follows each request through queue (Q), merges (M, F), splits (X),
requeues (R), issue (D) and completion (C), the way btt does, and counts what
it could not pair instead of guessing.

Flushes: one record per application flush, as the live recorder writes them
(docs/trace-format.md, "Flushes"). A zero-length PREFLUSH bio (an fsync: `Q FWS`,
or `A`/`Q FWFS <sector> + 0`) is never issued itself; the flush machinery issues
a separate device flush request (`D FN`, `C FN 0 [0]`) and then ends the bio
(`C WS <sector> [0]` or `C WFS <sector> [0]`, no size). The bio becomes the
`op=flush` record (the submitter's pid, its queue and completion times) and the
device flush that served it gives that record its issue time. A device flush
issued for a data or FUA write going through the machinery belongs to that
write (its preflush/fua flag says so). Only a device flush with neither in the
trace (its bio queued before the trace began) is a record of its own: pid 0,
flagged `device_flush`. `device_flushes` counts them all, and how many were linked.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import schemas
from recorder.importers.blktrace import (
    TC_FLUSH,
    TC_FUA,
    TC_PC,
    TC_READ,
    TC_WRITE,
    Event,
    op_flags,
)

DT = schemas.record_dtype()
FLAG = {k: 1 << v for k, v in schemas.bits("flag").items()}
# Not a blktrace category: marks a device flush kept as a record of its own.
_DEVICE_FLUSH = 1 << 31


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
        self.device_flushes = {"issued": 0, "linked": 0}
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
        queue = self._queued.get(owner) if owner else None
        target = queue[-1] if queue else None
        if owner is None or target is None:
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
        queued = self._pop_queued((e.dev, e.sector))
        if queued is None:
            self.unpaired["issue_without_queue"] += 1
            queued = _Req(0, e.time, e.dev, e.sector, e.bytes, e.cat, e.pid, e.cgroup)
        r = queued
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
        r: _Req | None
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
            self._device_flush_done(self._flushes[e.dev].popleft(), e)
            return
        if (e.dev, e.sector) in self._final:
            self._final.discard((e.dev, e.sector))
            self.counts["flush_sequence_end"] += 1
            return
        if self._empty.get(e.dev):
            self._emit(self._empty[e.dev].popleft(), e.time, e.error)
            return
        if self._flushes.get(e.dev):
            self._device_flush_done(self._flushes[e.dev].popleft(), e)
            return
        self.unpaired["complete_without_issue"] += 1

    def _device_flush_done(self, f: _Req, e: Event) -> None:
        """A device flush completed: link it to what it served, else keep it."""
        self.device_flushes["issued"] += 1
        # Every empty PREFLUSH bio waiting when it was issued is served by it
        # (the kernel runs one flush for all pending ones).
        served = [r for r in self._empty.get(e.dev, ()) if r.q <= f.issue and not r.issue]
        for r in served:
            r.issue = f.issue
        if served or self._write_in_flush(e.dev):
            self.device_flushes["linked"] += 1
            return
        f.cat |= _DEVICE_FLUSH
        self._emit(f, e.time, e.error)

    def _write_in_flush(self, dev: int) -> bool:
        """A data write with PREFLUSH or FUA is going through the flush machinery."""
        if any(d == dev for d, _ in self._final):
            return True
        for table in (self._queued, self._inflight):
            for (d, _), fifo in table.items():
                if d == dev and any(r.cat & (TC_FLUSH | TC_FUA) and r.bytes for r in fifo):
                    return True
        return False

    def _notify(self, e: Event) -> None:
        pass

    def _emit(self, r: _Req, t: int, error: int) -> None:
        op, flags = op_flags(r.cat & ~_DEVICE_FLUSH, r.bytes)
        if r.cat & _DEVICE_FLUSH:
            flags = (flags & ~FLAG["preflush"]) | FLAG["device_flush"]
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
