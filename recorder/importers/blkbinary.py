"""blktrace's binary per-CPU files (`blktrace -d DEV -o NAME`: NAME.blktrace.CPU)."""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from base.errors import IotapeError
from recorder.importers.blktrace import (
    ACTIONS,
    MAGIC,
    MAX_PDU,
    TA_CGROUP,
    TC_NOTIFY,
    TN_PROCESS,
    TN_TIMESTAMP,
    TRACE,
    VERSION,
    Event,
)


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
            if t >= _LIMIT or sector >= _SECTOR_LIMIT:  # inline: this loop runs per record
                _out_of_range(name, at, t, sector)
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


# The trace record holds times and byte offsets as signed 64-bit numbers; a sector
# leaves room for the request's bytes (at most 4 GiB) below 2^63.
_LIMIT = 1 << 63
_SECTOR_LIMIT = (_LIMIT - (1 << 32)) // 512


def _out_of_range(name: str, at: int, t: int, sector: int) -> None:
    """A time or sector the trace record cannot hold is a damaged record, not a crash."""
    if t >= _LIMIT:
        raise IotapeError(f"{name}: byte {at}: field time: {t} ns is past 2^63 ns")
    raise IotapeError(f"{name}: byte {at}: field sector: {sector} is past 2^63 bytes")


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
