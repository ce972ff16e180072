"""build/libingest.so (`make native`): the C parts of ingest, histograms.c and names.c.

Each has a numpy twin that gives the same values where the library is not built,
or where its switch asks for it (IOTAPE_HIST_PURE=1, IOTAPE_NAMES_PURE=1: the
references the tests hold C to).
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

LIBRARY = Path(__file__).resolve().parent / "build" / "libingest.so"


@cache
def _library() -> ctypes.CDLL | None:
    if not LIBRARY.exists():
        return None
    try:
        so = ctypes.CDLL(str(LIBRARY))
    except OSError:
        return None
    p, i64, u64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64
    so.iot_hist_open.argtypes = [u64, i64]
    so.iot_hist_open.restype = p
    so.iot_hist_close.argtypes = [p]
    so.iot_hist_close.restype = None
    so.iot_hist_reset.argtypes = [p]
    so.iot_hist_reset.restype = None
    so.iot_hist_add.argtypes = [p, i64, p, p, p, p, p, p, p, ctypes.c_uint16, i64, u64, p]
    so.iot_hist_add.restype = i64
    so.iot_hist_merge.argtypes = [p, p]
    so.iot_hist_merge.restype = i64
    so.iot_hist_keys.argtypes = [p]
    so.iot_hist_keys.restype = i64
    so.iot_hist_rows.argtypes = [p, p, p, p, p, p]
    so.iot_hist_rows.restype = i64
    so.iot_names_code.argtypes = [i64, p, p, p, i64]
    so.iot_names_code.restype = i64
    return so


def lib(pure: str) -> ctypes.CDLL | None:
    """The library, or None where it is not built or the switch `pure` is set."""
    if os.environ.get(pure):
        return None
    return _library()
