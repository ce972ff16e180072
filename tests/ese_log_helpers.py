"""Reading the reference engine's log files in tests: the records session.c writes."""

from __future__ import annotations

import struct
from collections.abc import Iterator

REC_MAGIC = 0x31434552
REC_OP_DB_SHIFT = 8  # session.c's record: the database above the operation's byte
_MIN_RECORD = 208


def log_records(buf: bytes) -> Iterator[tuple[int, int, int]]:
    """(offset, op field, page runs) of each record of a log file, in log order; a
    record never spans a 4 KiB segment's padding, so a bad one skips to the next."""
    pos = 4096
    while pos + 16 <= len(buf):
        magic, rl, op, nruns = struct.unpack_from("<IIII", buf, pos)
        if magic != REC_MAGIC or rl < _MIN_RECORD or pos + rl > len(buf):
            if pos % 4096 == 0:
                break
            pos = (pos + 4095) // 4096 * 4096
            continue
        yield pos, op, nruns
        pos += rl
