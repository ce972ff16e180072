"""One step's matching of the pairing (pairing.Pairer._match) in C.

numpy matched each step's held requests with stable argsorts of both sides'
keys, an intersection of the unique keys and up to 33 rounds of that: about
0.4 us a held request per step, the largest cost of relabelling and `replay
fidelity` at NVMe rates. src/pairmatch.c (run/native.py) puts the keys in one
hash table and settles each key on its own, with the same rules, and gives the
pairs in the original's row order (as _match now does). IOTAPE_POSTREPLAY_PURE=1
keeps numpy's match (the reference the tests hold the C code to).
"""

from __future__ import annotations

import numpy as np

from replayer.run import native

Match = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def available() -> bool:
    return native.lib() is not None


def match(ka: np.ndarray, ta: np.ndarray, kb: np.ndarray, tb: np.ndarray, horizon_ns: int) -> Match:
    """(rows of a, rows of b) paired, (gone of a, gone of b): Pairer._match's answer."""
    lib = native.lib()
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
