"""A block of a plan's iolog lines parsed in C, not in a Python loop per line.

Relabelling (relabel.py) reads every read/write/trim entry of the plan's iologs.
Split in Python (iolog.iter_entry_times_us) that is about 1.5 us an entry here,
and a plan of lanes has a `wait` line before most entries: seconds for a replay
of a few million requests. src/logparse.c does the same in one pass over the
bytes (build/liblogparse.so, `make native`), with the loop's rules. Where a
block is not in the shape iotape writes (fields split by one space, plain
numbers of at most 18 digits, ASCII), the C code says so and the loop parses
it, so that the answer and its errors stay the loop's; IOTAPE_LOGPARSE_PURE=1
runs the loop always (the reference the tests hold the C code to).
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

import numpy as np

from base.errors import IotapeError
from replayer.plan import iolog
from replayer.plan.source import OP

CODES = {"read": OP["read"], "write": OP["write"], "trim": OP["discard"]}
LIBRARY = Path(__file__).resolve().parents[1] / "build" / "liblogparse.so"

Entries = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]


@cache
def _lib() -> ctypes.CDLL | None:
    if os.environ.get("IOTAPE_LOGPARSE_PURE"):
        return None
    if not LIBRARY.exists():
        raise IotapeError(f"the iolog parser's C library {LIBRARY} is missing: run `make native`")
    try:
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as e:
        raise IotapeError(
            f"the iolog parser's C library does not load ({e}): run `make native`"
        ) from None
    p = ctypes.c_void_p
    lib.iolog_entries.argtypes = [ctypes.c_char_p, ctypes.c_int64, p, p, p, p, p]
    lib.iolog_entries.restype = ctypes.c_int64
    return lib


def _loop(buf: bytes, now: int) -> Entries:
    """The line-by-line parse relabel's reader did (iolog.iter_entry_times_us)."""
    t, op, off, size = [], [], [], []
    lines = buf.decode().splitlines()
    for tt, x in iolog.iter_entry_times_us(lines, now):
        now = tt
        if x[2] in CODES:
            t.append(tt)
            op.append(CODES[x[2]])
            off.append(int(x[3]))
            size.append(int(x[4]))
    # A wait after the last entry times the next block's first one.
    for text in reversed(lines):
        w = text.split()
        if len(w) == 4 and w[1] == "wait":
            now = int(w[2]) * 1000 + int(w[3])
        if len(w) == 4 or len(w) == 5:
            break
    return (np.array(t, np.int64), np.array(op, np.uint8), np.array(off, np.uint64),
            np.array(size, np.uint32), now)  # fmt: skip


def parse(buf: bytes, now: int = 0) -> Entries:
    """(time in us, op code, offset, size) of each read/write/trim entry of `buf`
    (whole lines, each ending in a newline), and the time the next block goes on
    from: a v2 log's entries take the last wait's time, `now` before any."""
    lib = _lib()
    if lib is None or not buf:
        return _loop(buf, now)
    # An entry takes at least 8 bytes ("F read 0 0\n" has 11).
    cap = len(buf) // 8 + 1
    t = np.empty(cap, np.int64)
    op = np.empty(cap, np.uint8)
    off = np.empty(cap, np.uint64)
    size = np.empty(cap, np.uint32)
    now_io = ctypes.c_int64(now)
    n = lib.iolog_entries(buf, len(buf), ctypes.byref(now_io), t.ctypes.data, op.ctypes.data,
                          off.ctypes.data, size.ctypes.data)  # fmt: skip
    if n < 0:
        return _loop(buf, now)
    return t[:n].copy(), op[:n].copy(), off[:n].copy(), size[:n].copy(), int(now_io.value)
