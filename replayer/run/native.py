"""The post-replay steps' C code (src/pairmatch.c, compact.c, planorder.c, select.c,
tally.c),
loaded once.

`make native` builds build/libpostreplay.so; ctypes loads it here. Each caller
keeps its numpy version, the reference the tests hold the C code to:
IOTAPE_POSTREPLAY_PURE=1 runs those instead (the same answers, slower).
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

from base.errors import IotapeError

LIBRARY = Path(__file__).resolve().parents[1] / "build" / "libpostreplay.so"


@cache
def lib() -> ctypes.CDLL | None:
    """The library; None where IOTAPE_POSTREPLAY_PURE asks for numpy."""
    if os.environ.get("IOTAPE_POSTREPLAY_PURE"):
        return None
    if not LIBRARY.exists():
        raise IotapeError(f"the post-replay C library {LIBRARY} is missing: run `make native`")
    try:
        so = ctypes.CDLL(str(LIBRARY))
    except OSError as e:
        msg = f"the post-replay C library does not load ({e}): run `make native`"
        raise IotapeError(msg) from None
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    so.pair_match.argtypes = [p, p, i64, p, p, i64, i64, p, p, p, p]
    so.pair_match.restype = i64
    so.compact_rows.argtypes = [p, i64, i64, p, p, ctypes.c_uint8, ctypes.c_uint16, i32, i64,
                                i64, i32, p]  # fmt: skip
    so.compact_rows.restype = i64
    so.keep_rows.argtypes = [p, i64, i64, p, p, ctypes.c_uint8, ctypes.c_uint16, i32, p]
    so.keep_rows.restype = i64
    so.scan_chunk.argtypes = [p, i64, i64, p, p, ctypes.c_uint8, ctypes.c_uint16, p, p]
    so.scan_chunk.restype = ctypes.c_int
    so.scan_planes.argtypes = [p, i64, p, i64, p, p, ctypes.c_uint8, ctypes.c_uint16, p, p]
    so.scan_planes.restype = ctypes.c_int
    so.compact_planes.argtypes = [p, i64, p, i64, p, p, ctypes.c_uint8, ctypes.c_uint16, i32,
                                  i64, i64, i32, p]  # fmt: skip
    so.compact_planes.restype = i64
    so.side_tally.argtypes = [p, i64, p, i64, p, i64, p, i64, i64, ctypes.c_uint8,
                              ctypes.c_uint8, p, p, p, p, p, i64]  # fmt: skip
    so.side_tally.restype = i64
    so.window_times.argtypes = [p, i64, i64, i64, i64, i64, p]
    so.window_times.restype = None
    so.plan_order.argtypes = [p, i64, p]
    so.plan_order.restype = ctypes.c_int
    so.range_hist.argtypes = [p, i64, i64, i64, i64, p]
    so.range_hist.restype = i64
    so.range_take.argtypes = [p, i64, i64, i64, p]
    so.range_take.restype = i64
    return so
