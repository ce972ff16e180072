"""One step's matching of the pairing (pairing.Pairer._match) in C.

numpy matched each step's held requests with stable argsorts of both sides'
keys, an intersection of the unique keys and up to 33 rounds of that: about
0.4 us a held request per step, the largest cost of relabelling and `replay
fidelity` at NVMe rates. src/pairmatch.c (build/libpairmatch.so, `make native`)
puts the keys in one hash table and settles each key on its own, with the same
rules. The pairs come in another order (grouped by key, not sorted by key):
every caller's answer is the same in any order. IOTAPE_PAIRING_PURE=1 keeps
numpy's match (the reference the tests hold the C code to).
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

import numpy as np

from base.errors import IotapeError

LIBRARY = Path(__file__).resolve().parents[1] / "build" / "libpairmatch.so"

Match = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@cache
def _lib() -> ctypes.CDLL | None:
    if os.environ.get("IOTAPE_PAIRING_PURE"):
        return None
    if not LIBRARY.exists():
        raise IotapeError(f"the pairing's C library {LIBRARY} is missing: run `make native`")
    try:
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as e:
        raise IotapeError(
            f"the pairing's C library does not load ({e}): run `make native`"
        ) from None
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    lib.pair_match.argtypes = [p, p, i64, p, p, i64, i64, p, p, p, p]
    lib.pair_match.restype = i64
    return lib


def available() -> bool:
    return _lib() is not None


def match(ka: np.ndarray, ta: np.ndarray, kb: np.ndarray, tb: np.ndarray, horizon_ns: int) -> Match:
    """(rows of a, rows of b) paired, (gone of a, gone of b): Pairer._match's answer."""
    lib = _lib()
    assert lib is not None
    ka = np.ascontiguousarray(ka, np.uint64)
    kb = np.ascontiguousarray(kb, np.uint64)
    ta = np.ascontiguousarray(ta, np.int64)
    tb = np.ascontiguousarray(tb, np.int64)
    na, nb = len(ka), len(kb)
    gone_a, gone_b = np.empty(na, bool), np.empty(nb, bool)
    cap = min(na, nb)
    ia, ib = np.empty(cap, np.int64), np.empty(cap, np.int64)
    n = lib.pair_match(ka.ctypes.data, ta.ctypes.data, na, kb.ctypes.data, tb.ctypes.data, nb,
                       horizon_ns, gone_a.ctypes.data, gone_b.ctypes.data, ia.ctypes.data,
                       ib.ctypes.data)  # fmt: skip
    if n < 0:
        raise MemoryError("the pairing's C matcher ran out of memory")
    return ia[:n], ib[:n], gone_a, gone_b
