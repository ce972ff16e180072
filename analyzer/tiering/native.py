"""The sequential cache simulations of `analyzer.tiering`, in C, with Python references.

LRU, S3-FIFO, Belady's MIN and LRU stack distances are state machines over one access
after another; numpy cannot vectorise them without O(n log^2 n) tricks. So they are a
few dozen lines of C (src/kernels.c), built by `make native` into
build/libtiering.so and called through ctypes. The Python versions below are the
reference the tests and the benchmark hold the C to; IOTAPE_TIERING_PURE=1 runs them
instead (the same results, about 100x slower).

Every simulator takes dense unit ids (0..n_units-1) in access order and writes one
flag byte per access: HIT, INSERTED (the unit was brought into the cache), EVICTED
(a unit left the cache to make room).
"""

from __future__ import annotations

import ctypes
import heapq
import os
from collections import OrderedDict, deque
from functools import cache
from pathlib import Path

import numpy as np

from base.errors import IotapeError

HIT, INSERTED, EVICTED = 1, 2, 4
NEVER = np.iinfo(np.int64).max  # stack distance of a first access; next use of a last one

LIBRARY = Path(__file__).resolve().parent / "build" / "libtiering.so"


@cache
def _lib() -> ctypes.CDLL | None:
    """The C simulators; None where IOTAPE_TIERING_PURE asks for the Python references."""
    if os.environ.get("IOTAPE_TIERING_PURE"):
        return None
    if not LIBRARY.exists():
        raise IotapeError(
            f"the tiering simulator's C library {LIBRARY} is missing: run `make native`"
        )
    try:
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as e:
        raise IotapeError(
            f"the tiering simulator's C library does not load ({e}): run `make native`"
        ) from None
    p = ctypes.c_void_p
    i64, i32 = ctypes.c_int64, ctypes.c_int32
    for name in ("lru", "s3fifo"):
        getattr(lib, name).argtypes = [i64, p, i32, i64, p]
    lib.stack_distances.argtypes = [i64, p, i32, p]
    lib.belady.argtypes = [i64, p, p, i32, i64, p]
    lib.tally.argtypes = [i64, p, i64, i64, p, p, p, p, i64, p, p]
    lib.unit_tally.argtypes = [i64, p, p, p, p]
    lib.unit_tally.restype = None
    return lib


def native() -> bool:
    """Whether the C simulators are in use (else the Python references)."""
    return _lib() is not None


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _check(rc: int) -> None:
    if rc != 0:
        raise MemoryError("tiering simulator: out of memory")


def _ids(ids: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(ids, dtype=np.int32)


def lru(ids: np.ndarray, n_units: int, cap: int) -> np.ndarray:
    ids = _ids(ids)
    lib = _lib()
    if lib is None:
        return lru_reference(ids, cap)
    flags = np.zeros(len(ids), dtype=np.uint8)
    _check(lib.lru(len(ids), _ptr(ids), n_units, cap, _ptr(flags)))
    return flags


def s3fifo(ids: np.ndarray, n_units: int, cap: int) -> np.ndarray:
    ids = _ids(ids)
    lib = _lib()
    if lib is None:
        return s3fifo_reference(ids, cap)
    flags = np.zeros(len(ids), dtype=np.uint8)
    _check(lib.s3fifo(len(ids), _ptr(ids), n_units, cap, _ptr(flags)))
    return flags


def tally(
    t_ns: np.ndarray,
    t0: int,
    step_ns: int,
    op: np.ndarray,
    hit: np.ndarray,
    flags: np.ndarray,
    nbytes: np.ndarray,
    n_intervals: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Accesses and bytes per (interval, op, hit, inserted | evicted << 1), each an
    int64 array of shape (n_intervals, 2, 2, 4)."""
    t_ns = np.ascontiguousarray(t_ns, dtype=np.int64)
    op = np.ascontiguousarray(op, dtype=np.int8)
    hit = np.ascontiguousarray(hit, dtype=np.bool_)
    flags = np.ascontiguousarray(flags, dtype=np.uint8)
    nbytes = np.ascontiguousarray(nbytes, dtype=np.int64)
    shape = (n_intervals, 2, 2, 4)
    lib = _lib()
    if lib is None:
        return tally_reference(t_ns, t0, step_ns, op, hit, flags, nbytes, n_intervals)
    count = np.zeros(shape, dtype=np.int64)
    byt = np.zeros(shape, dtype=np.int64)
    rc = lib.tally(len(t_ns), _ptr(t_ns), t0, step_ns, _ptr(op), _ptr(hit), _ptr(flags),
                   _ptr(nbytes), count.size, _ptr(count), _ptr(byt))  # fmt: skip
    if rc == -2:
        raise ValueError("tally: an access lies outside the report's intervals")
    return count, byt


def tally_reference(
    t_ns: np.ndarray,
    t0: int,
    step_ns: int,
    op: np.ndarray,
    hit: np.ndarray,
    flags: np.ndarray,
    nbytes: np.ndarray,
    n_intervals: int,
) -> tuple[np.ndarray, np.ndarray]:
    key = (t_ns - t0) // step_ns * 16
    key += op.astype(np.int64) * 8
    key += hit.astype(np.int64) * 4
    key += (flags >> 1) & 3
    shape = (n_intervals, 2, 2, 4)
    count = np.bincount(key, minlength=16 * n_intervals).reshape(shape)
    byt = np.bincount(key, weights=nbytes, minlength=16 * n_intervals)
    return count.astype(np.int64), byt.astype(np.int64).reshape(shape)


def unit_tally(uid: np.ndarray, nbytes: np.ndarray, n_units: int) -> tuple[np.ndarray, np.ndarray]:
    """Accesses and bytes per unit (int64)."""
    uid = _ids(uid)
    nbytes = np.ascontiguousarray(nbytes, dtype=np.int64)
    lib = _lib()
    if lib is None:
        count = np.bincount(uid, minlength=n_units).astype(np.int64)
        return count, np.bincount(uid, weights=nbytes, minlength=n_units).astype(np.int64)
    count = np.zeros(n_units, dtype=np.int64)
    byt = np.zeros(n_units, dtype=np.int64)
    lib.unit_tally(len(uid), _ptr(uid), _ptr(nbytes), _ptr(count), _ptr(byt))
    return count, byt


def next_use(ids: np.ndarray) -> np.ndarray:
    """Index of the next access to the same unit, NEVER for the last one (vectorised)."""
    order = np.argsort(ids, kind="stable")
    nxt = np.full(len(ids), NEVER, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def belady(ids: np.ndarray, n_units: int, cap: int) -> np.ndarray:
    ids = _ids(ids)
    nxt = next_use(ids)
    lib = _lib()
    if lib is None:
        return belady_reference(ids, nxt, cap)
    flags = np.zeros(len(ids), dtype=np.uint8)
    _check(lib.belady(len(ids), _ptr(ids), _ptr(nxt), n_units, cap, _ptr(flags)))
    return flags


def stack_distances(ids: np.ndarray, n_units: int) -> np.ndarray:
    """Distinct units since the previous access to the same one; NEVER for a first access.
    An LRU cache of C units hits exactly the accesses with distance < C."""
    ids = _ids(ids)
    lib = _lib()
    if lib is None:
        d = stack_distances_reference(ids)
    else:
        d = np.empty(len(ids), dtype=np.int64)
        _check(lib.stack_distances(len(ids), _ptr(ids), n_units, _ptr(d)))
    d[d < 0] = NEVER
    return d


# ------------------------------------------------------------ Python references
#
# Written for clarity: the textbook form of each policy. The tests check the C against
# them access by access, and bench/tiering.py reports both speeds.


def lru_reference(ids: np.ndarray, cap: int) -> np.ndarray:
    flags = np.zeros(len(ids), dtype=np.uint8)
    cached: OrderedDict[int, None] = OrderedDict()
    for i, u in enumerate(ids.tolist()):
        if u in cached:
            cached.move_to_end(u)
            flags[i] = HIT
        elif cap > 0:
            f = INSERTED
            if len(cached) == cap:
                cached.popitem(last=False)
                f |= EVICTED
            cached[u] = None
            flags[i] = f
    return flags


def s3fifo_reference(ids: np.ndarray, cap: int) -> np.ndarray:
    flags = np.zeros(len(ids), dtype=np.uint8)
    if cap <= 0:
        return flags
    s_cap = max(1, cap // 10)
    m_cap = max(1, cap - s_cap)
    small: deque[int] = deque()
    main: deque[int] = deque()
    # id -> its sequence number among ghost insertions; the last m_cap are remembered
    ghost: dict[int, int] = {}
    ghosts = 0
    freq: dict[int, int] = {}
    where: dict[int, str] = {}

    def evict_main() -> None:
        while True:
            w = main.popleft()
            if freq[w] > 0:
                freq[w] -= 1
                main.append(w)
            else:
                del where[w]
                return

    for i, u in enumerate(ids.tolist()):
        if u in where:
            freq[u] = min(3, freq[u] + 1)
            flags[i] = HIT
            continue
        f = INSERTED
        in_ghost = u in ghost and ghosts - ghost[u] <= m_cap
        while len(small) + len(main) >= cap:
            if small and (len(small) >= s_cap or not main):
                v = small.popleft()
                if freq[v] > 0:
                    freq[v] = 0
                    where[v] = "main"
                    evicted = False
                    if len(main) >= m_cap:
                        evict_main()
                        evicted = True
                    main.append(v)
                    if evicted:
                        f |= EVICTED
                        break
                else:
                    del where[v]
                    ghost[v] = ghosts
                    ghosts += 1
                    f |= EVICTED
                    break
            else:
                evict_main()
                f |= EVICTED
                break
        freq[u] = 0
        ghost.pop(u, None)
        if in_ghost:
            where[u] = "main"
            main.append(u)
        else:
            where[u] = "small"
            small.append(u)
        flags[i] = f
    return flags


def belady_reference(ids: np.ndarray, nxt: np.ndarray, cap: int) -> np.ndarray:
    flags = np.zeros(len(ids), dtype=np.uint8)
    cur: dict[int, int] = {}
    heap: list[tuple[int, int]] = []  # (-next use, unit)
    for i, (u, nx) in enumerate(zip(ids.tolist(), nxt.tolist(), strict=True)):
        if u in cur:
            flags[i] = HIT
            cur[u] = nx
            heapq.heappush(heap, (-nx, u))
            continue
        if cap <= 0:
            continue
        f = INSERTED
        if len(cur) == cap:
            while -heap[0][0] != cur.get(heap[0][1]):
                heapq.heappop(heap)
            if -heap[0][0] <= nx:
                continue
            _, v = heapq.heappop(heap)
            del cur[v]
            f |= EVICTED
        cur[u] = nx
        heapq.heappush(heap, (-nx, u))
        flags[i] = f
    return flags


def stack_distances_reference(ids: np.ndarray) -> np.ndarray:
    out = np.empty(len(ids), dtype=np.int64)
    stack: list[int] = []  # most recent last
    for i, u in enumerate(ids.tolist()):
        if u in stack:
            k = stack[::-1].index(u)
            out[i] = k
            stack.remove(u)
        else:
            out[i] = -1
        stack.append(u)
    return out
