"""blktrace's vocabulary: the binary record layout, the action and category codes,
and one `Event`, whichever input it came from.

The binary per-CPU files (`blkbinary`), blkparse's default text output and the
ftrace `blk` tracer's classic lines (`blkparse`) all become `Event`s, and
`blkpair.Pairer` assembles them into one record per request.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import schemas

OP = schemas.enum("op")
FLAG = {k: 1 << v for k, v in schemas.bits("flag").items()}

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
