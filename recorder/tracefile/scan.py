"""Scan a whole trace past damage: every intact chunk, and each damaged byte range.

Every chunk can be checked on its own: its magic, its header CRC (which makes its
record count and sequence number trustworthy) and its payload CRC. After a fault
the scan looks for the next byte where such a chunk starts with a later sequence
number, so a bad sector or a torn copy costs the chunks it touches, not the rest
of the file. The sequence numbers then say how many chunks each range held.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from recorder.tracefile.blocks import (
    ChunkInfo,
    Unsupported,
    check_chunk,
    chunk_records,
    declared_gaps,
    footer_from_trailer,
    peek_head,
)
from recorder.tracefile.format import (
    CHUNK_MAGIC,
    FOOTER_HEAD,
    FOOTER_HEADER_SIZE,
    FOOTER_MAGIC,
    SCHED_OP,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    WAKE_OP,
    ZCHUNK_MAGIC,
    Defect,
    TraceFormatError,
)
from recorder.tracefile.reader import open_trace

_CHUNK_PAT = struct.pack("<I", CHUNK_MAGIC)
_ZCHUNK_PAT = struct.pack("<I", ZCHUNK_MAGIC)
_FOOTER_PAT = struct.pack("<I", FOOTER_MAGIC)


@dataclass
class Damage:
    """A damaged byte range and what it cost."""

    offset: int
    length: int
    reason: str
    # Sequence numbers first_chunk .. first_chunk + chunks - 1 are missing.
    first_chunk: int
    chunks: int
    # Records those chunks held: exact when every missing chunk's header survived
    # (or the footer tells the total), else a lower bound.
    events: int
    events_exact: bool
    # Completion times (relative to mono_start_ns) of the intact records around it.
    after_ns: int | None
    before_ns: int | None
    intact_after: int = 0


@dataclass
class _Kept:
    offset: int
    end: int
    seq: int
    count: int
    first_ns: int
    last_ns: int
    wakes: int  # records with op WAKE_OP: wake records in a version 3 or 4 file
    sched: int  # records with op SCHED_OP: sched records in a version 4 file


@dataclass
class _Raw:
    offset: int
    end: int
    reason: str
    seq: int  # the chunk expected at `offset`
    next_seq: int | None  # the chunk found at `end`; None when the range runs to the end
    headers: dict[int, int]  # seq -> count of chunk headers intact inside the range


@dataclass
class ScanReport:
    """What a file holds: its intact chunks, and each damaged range between them."""

    path: str
    file_bytes: int
    header: dict
    data_offset: int = 0
    chunks: int = 0
    events: int = 0
    # Where the intact prefix ends (the first fault), and what it holds.
    valid_end: int = 0
    valid_events: int = 0
    last_complete_ns: int = 0
    # Wake records in the intact chunks (docs/trace-format.md "Wake records"); None
    # in a file before version 3, which holds none.
    wakes: int | None = None
    # Sched records in the intact chunks ("Sched records"); None before version 4.
    sched: int | None = None
    problem: str | None = None
    problem_offset: int | None = None
    problem_reason: str | None = None
    footer: dict | None = None
    footer_present: bool = False
    trailer_present: bool = False
    footer_consistent: bool = False
    dropped_chunks: int = 0
    dropped_events: int = 0
    # The footer found in a damaged file (at its end or inside the damage): it still
    # holds the capture's loss counters.
    damaged_footer: dict | None = None
    damage: list[Damage] = field(default_factory=list)
    # (offset, end) of every intact chunk, in file order.
    kept: list[tuple[int, int]] = field(default_factory=list, repr=False)

    @property
    def complete(self) -> bool:
        return self.problem is None

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["kept"]
        d["complete"] = self.complete
        return d


def scan(path: str | os.PathLike) -> ScanReport:
    """Validate a whole file, going on past every fault.

    Raises `TraceFormatError` only when the header is bad (nothing can be trusted).
    """
    with open_trace(path, strict=False) as t:
        mm, size = t.mapped, t.file_size
        rep = ScanReport(
            path=t.path,
            file_bytes=size,
            header=t.header,
            data_offset=t.data_offset,
            valid_end=t.data_offset,
        )
        rep.trailer_present = bool(
            size - t.data_offset >= TRAILER_SIZE and mm[size - 8 : size] == TRAILER_MAGIC
        )
        kept: list[_Kept] = []
        for info, records in t._walk():
            kept.append(_kept(info, records))
            rep.valid_end = info.end
        rep.valid_events = sum(k.count for k in kept)
        if t.problem is None:
            rep.footer = t.footer
            rep.footer_present = rep.footer_consistent = True
            _totals(rep, kept, t.has_wakes, t.has_sched)
            return rep
        rep.problem = str(t.problem)
        rep.problem_offset = t.problem.offset
        rep.problem_reason = t.problem.reason
        hint = footer_from_trailer(mm, t.data_offset, size)
        stop = hint[1] if hint and hint[1] >= rep.valid_end else size
        seq = kept[-1].seq + 1 if kept else 0
        with memoryview(mm) as mv:
            try:
                raws = _resync(mm, mv, rep.valid_end, stop, seq, t.gaps, kept)
            except Unsupported as u:
                raise TraceFormatError(t.path, u.offset, u.reason) from None
        footer = dict(hint[0]) if hint and stop < size else _salvage_footer(mm, raws)
        rep.damaged_footer = footer
        rep.footer_present = footer is not None
        _totals(rep, kept, t.has_wakes, t.has_sched)
        rep.damage = _damage(raws, kept, footer, rep.events)
        rep.dropped_chunks = sum(d.chunks for d in rep.damage)
        rep.dropped_events = sum(d.events for d in rep.damage)
    return rep


def _kept(info: ChunkInfo, records: np.ndarray) -> _Kept:
    done = records["ts_complete_ns"]
    wakes = int(np.count_nonzero(records["op"] == WAKE_OP))
    sched = int(np.count_nonzero(records["op"] == SCHED_OP))
    return _Kept(
        info.offset, info.end, info.seq, info.count, int(done.min()), int(done.max()), wakes,
        sched,
    )  # fmt: skip


def _totals(rep: ScanReport, kept: list[_Kept], has_wakes: bool, has_sched: bool) -> None:
    rep.chunks = len(kept)
    rep.wakes = sum(k.wakes for k in kept) if has_wakes else None
    rep.sched = sum(k.sched for k in kept) if has_sched else None
    rep.events = sum(k.count for k in kept)
    rep.last_complete_ns = max((k.last_ns for k in kept), default=0)
    rep.kept = [(k.offset, k.end) for k in kept]


def _resync(
    mm: mmap.mmap,
    mv: memoryview,
    pos: int,
    stop: int,
    seq: int,
    declared: dict[int, int],
    kept: list[_Kept],
) -> list[_Raw]:
    """Walk [pos, stop) from a fault: intact chunks are appended to `kept`, and each
    range between them (or a jump in the sequence numbers) becomes a _Raw."""
    raws: list[_Raw] = []
    while pos < stop:
        try:
            info = _chunk_at(mv, pos, stop, seq)
        except Defect as d:
            nxt, found, headers = _next_chunk(mm, mv, pos, stop, seq)
            raws.append(_Raw(pos, nxt, d.reason, seq, found.seq if found else None, headers))
            if found is None:
                break
            info, pos = found, nxt
        else:
            if info.seq > seq and declared.get(seq) != info.seq - seq:
                # Whole chunks cut out cleanly: no damaged byte, but chunks are missing.
                reason = f"chunk {seq}: missing, the next chunk is {info.seq}"
                raws.append(_Raw(pos, pos, reason, seq, info.seq, {}))
        kept.append(_kept(info, chunk_records(mm, info)))
        seq = info.seq + 1
        pos = info.end
    return raws


def _chunk_at(mv: memoryview, pos: int, stop: int, seq: int) -> ChunkInfo:
    if stop - pos < 4:
        raise Defect(pos, f"{stop - pos} stray bytes where a chunk should start")
    if mv[pos : pos + 4] not in (_CHUNK_PAT, _ZCHUNK_PAT):
        found = bytes(mv[pos : pos + 4]).hex(" ")
        what = "zero fill (power loss?)" if not any(mv[pos : pos + 4]) else "garbage or corruption"
        raise Defect(pos, f"chunk {seq}: expected a chunk, found bytes {found} ({what})")
    return check_chunk(mv, pos, stop, seq, None)


def _next_chunk(
    mm: mmap.mmap, mv: memoryview, pos: int, stop: int, seq: int
) -> tuple[int, ChunkInfo | None, dict[int, int]]:
    """The next intact chunk at or after `pos` with a sequence number of at least `seq`,
    and the chunk headers that survived on the way."""
    headers: dict[int, int] = {}
    # The next place of each magic, found again only once the walk has passed it.
    nxt = {pat: mm.find(pat, pos, stop) for pat in (_CHUNK_PAT, _ZCHUNK_PAT)}
    while (pos := min((p for p in nxt.values() if p >= pos), default=-1)) >= 0:
        head = peek_head(mv, pos, stop)
        if head is not None and head[0] >= seq:
            try:
                return pos, check_chunk(mv, pos, stop, seq, None), headers
            except Unsupported:
                raise
            except Defect:
                headers.setdefault(*head)
        pos += 1
        for pat, at in nxt.items():
            if 0 <= at < pos:
                nxt[pat] = mm.find(pat, pos, stop)
    return stop, None, headers


def _salvage_footer(mm: mmap.mmap, raws: list[_Raw]) -> dict | None:
    """The first footer intact inside a damaged range: the capture's counters survive.

    Its JSON and CRC are all that is checked: bytes inserted or deleted before it
    move it off the 8-byte alignment (and its trailer's offset) that a reader wants."""
    for r in raws:
        pos = r.offset
        while (pos := mm.find(_FOOTER_PAT, pos, r.end)) >= 0:
            if r.end - pos >= FOOTER_HEADER_SIZE:
                _, json_len, json_crc, _ = FOOTER_HEAD.unpack_from(mm, pos)
                start = pos + FOOTER_HEADER_SIZE
                data = mm[start : start + json_len] if start + json_len <= r.end else b""
                if data and zlib.crc32(data) == json_crc:
                    try:
                        footer = json.loads(data.decode("utf-8"))
                    except (ValueError, RecursionError):
                        footer = None
                    if isinstance(footer, dict):
                        return footer
            pos += 1
    return None


def _damage(raws: list[_Raw], kept: list[_Kept], footer: dict | None, kept_events: int) -> list:
    declared = declared_gaps(footer)
    written = _written_chunks(footer, declared)
    out: list[Damage] = []
    for r in raws:
        lo = r.seq
        if r.next_seq is not None:
            hi = r.next_seq
        else:
            hi = max([lo, written or 0] + [s + 1 for s in r.headers])
        missing = _minus(lo, hi, declared)
        chunks = sum(b - a for a, b in missing)
        if chunks == 0 and r.end == r.offset:
            continue
        inside = {s: c for s, c in r.headers.items() if any(a <= s < b for a, b in missing)}
        before = [k for k in kept if k.end <= r.offset]
        after = [k for k in kept if k.offset >= r.end]
        out.append(
            Damage(
                offset=r.offset,
                length=r.end - r.offset,
                reason=r.reason,
                first_chunk=missing[0][0] if missing else lo,
                chunks=chunks,
                events=sum(inside.values()),
                events_exact=len(inside) == chunks,
                after_ns=max(k.last_ns for k in before) if before else None,
                before_ns=min(k.first_ns for k in after) if after else None,
                intact_after=len(after),
            )
        )
    if written is not None and not any(r.next_seq is None for r in raws):
        # The chunks after the last one kept are gone without a trace of their bytes.
        last = max(k.seq for k in kept) + 1 if kept else 0
        tail = sum(b - a for a, b in _minus(last, written, declared))
        if tail > 0:
            end = max((k.end for k in kept), default=0)
            last_ns = max((k.last_ns for k in kept), default=None)
            out.append(
                Damage(end, 0, f"chunk {last}: missing", last, tail, 0, False, last_ns, None)
            )
    _fill_from_footer(out, footer, declared, kept_events)
    return out


def _written_chunks(footer: dict | None, declared: dict[int, int]) -> int | None:
    """How many chunks the writer wrote, by the footer (a repaired one counts its gaps)."""
    chunks = (footer or {}).get("chunks")
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 0:
        return None
    return chunks + sum(declared.values())


def _minus(lo: int, hi: int, declared: dict[int, int]) -> list[tuple[int, int]]:
    """[lo, hi) less the sequence numbers an earlier repair already recorded as missing."""
    out = [(lo, hi)] if hi > lo else []
    for first, n in declared.items():
        nxt = []
        for a, b in out:
            if first + n <= a or first >= b:
                nxt.append((a, b))
                continue
            if a < first:
                nxt.append((a, first))
            if first + n < b:
                nxt.append((first + n, b))
        out = nxt
    return out


def _fill_from_footer(
    out: list[Damage], footer: dict | None, declared: dict[int, int], kept_events: int
) -> None:
    """When the footer survived and one range's count is unknown, the footer's total
    tells it."""
    f = footer or {}
    events = f.get("events")
    unknown = [d for d in out if not d.events_exact]
    if len(unknown) != 1 or not isinstance(events, int) or isinstance(events, bool):
        return
    earlier = sum(
        g.get("events", 0)
        for g in f.get("gaps") or []
        if isinstance(g, dict) and isinstance(g.get("events"), int)
    )
    rest = events + earlier - kept_events - sum(d.events for d in out if d.events_exact)
    if rest >= unknown[0].events:
        unknown[0].events = rest
        unknown[0].events_exact = True
