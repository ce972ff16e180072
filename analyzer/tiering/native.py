"""The sequential cache simulations of `analyzer.tiering`, in C, with Python references.

LRU, S3-FIFO, Belady's MIN and LRU stack distances are state machines over one access
after another; numpy cannot vectorise them without O(n log^2 n) tricks. So they are a
few dozen lines of C, compiled on first use with the system compiler (`cc`, which
`make setup` installs) into a cache directory keyed by the source's hash, and called
through ctypes: no build step, no new dependency. Where no compiler works, the
Python versions below run instead (the same results, about 100x slower); they are
also the reference the tests and the benchmark hold the C to.

Every simulator takes dense unit ids (0..n_units-1) in access order and writes one
flag byte per access: HIT, INSERTED (the unit was brought into the cache), EVICTED
(a unit left the cache to make room).
"""

from __future__ import annotations

import ctypes
import hashlib
import heapq
import os
import subprocess
import tempfile
from collections import OrderedDict, deque
from functools import cache
from pathlib import Path

import numpy as np

HIT, INSERTED, EVICTED = 1, 2, 4
NEVER = np.iinfo(np.int64).max  # stack distance of a first access; next use of a last one

C_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { HIT = 1, INSERTED = 2, EVICTED = 4 };

/* LRU over a doubly linked list of unit ids; -1 ends it. */
int lru(int64_t n, const int32_t *ids, int32_t n_units, int64_t cap, uint8_t *flags) {
    int32_t *prev = malloc(sizeof(int32_t) * n_units), *next = malloc(sizeof(int32_t) * n_units);
    uint8_t *in = calloc(n_units, 1);
    if (!prev || !next || !in) { free(prev); free(next); free(in); return -1; }
    int32_t head = -1, tail = -1;
    int64_t size = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t u = ids[i];
        uint8_t f = 0;
        if (in[u]) {
            f = HIT;
            if (u != head) {  /* unlink, then push at the head */
                next[prev[u]] = next[u];
                if (next[u] >= 0) prev[next[u]] = prev[u]; else tail = prev[u];
                prev[u] = -1; next[u] = head; prev[head] = u; head = u;
            }
        } else if (cap > 0) {
            f = INSERTED;
            if (size == cap) {
                int32_t v = tail;
                tail = prev[v];
                if (tail >= 0) next[tail] = -1; else head = -1;
                in[v] = 0; size--; f |= EVICTED;
            }
            in[u] = 1; size++;
            prev[u] = -1; next[u] = head;
            if (head >= 0) prev[head] = u; else tail = u;
            head = u;
        }
        flags[i] = f;
    }
    free(prev); free(next); free(in);
    return 0;
}

/* LRU stack distance of every access (Mattson): the number of distinct units touched
   since the previous access to the same unit; -1 for a first access. A Fenwick tree
   over positions marks each unit's latest access, so a distance is one range sum. */
int stack_distances(int64_t n, const int32_t *ids, int32_t n_units, int64_t *out) {
    int64_t *last = malloc(sizeof(int64_t) * n_units);
    int32_t *bit = calloc(n + 1, sizeof(int32_t));
    if (!last || !bit) { free(last); free(bit); return -1; }
    for (int32_t u = 0; u < n_units; u++) last[u] = -1;
    for (int64_t i = 0; i < n; i++) {
        int32_t u = ids[i];
        int64_t p = last[u];
        if (p < 0) {
            out[i] = -1;
        } else {
            int64_t s = 0;  /* marks in (p, i): prefix(i) - prefix(p + 1) */
            for (int64_t k = i; k > 0; k -= k & -k) s += bit[k];
            for (int64_t k = p + 1; k > 0; k -= k & -k) s -= bit[k];
            out[i] = s;
            for (int64_t k = p + 1; k <= n; k += k & -k) bit[k]--;
        }
        for (int64_t k = i + 1; k <= n; k += k & -k) bit[k]++;
        last[u] = i;
    }
    free(last); free(bit);
    return 0;
}

/* S3-FIFO (Yang et al., SOSP'23): a small FIFO (10 %) that filters one-hit wonders,
   a main FIFO with 2-bit frequencies and reinsertion, and a ghost FIFO of ids
   evicted from the small queue (as many as the main queue holds). */
enum { NONE = 0, SMALL = 1, MAIN = 2 };
typedef struct { int32_t *buf; int64_t cap, head, len; } ring;
static void push(ring *r, int32_t u) { r->buf[(r->head + r->len++) % r->cap] = u; }
static int32_t pop(ring *r) {
    int32_t u = r->buf[r->head];
    r->head = (r->head + 1) % r->cap; r->len--;
    return u;
}

int s3fifo(int64_t n, const int32_t *ids, int32_t n_units, int64_t cap, uint8_t *flags) {
    if (cap <= 0) { memset(flags, 0, n); return 0; }
    int64_t s_cap = cap / 10 > 0 ? cap / 10 : 1;
    int64_t m_cap = cap - s_cap > 0 ? cap - s_cap : 1;
    uint8_t *where = calloc(n_units, 1), *freq = calloc(n_units, 1);
    int64_t *ghost_seq = malloc(sizeof(int64_t) * n_units);
    /* Units coming back from the ghost go straight to main, so main may briefly
       hold more than m_cap: both rings can hold the whole cache. */
    ring S = {malloc(sizeof(int32_t) * (cap + 1)), cap + 1, 0, 0};
    ring M = {malloc(sizeof(int32_t) * (cap + 1)), cap + 1, 0, 0};
    if (!where || !freq || !ghost_seq || !S.buf || !M.buf) {
        free(where); free(freq); free(ghost_seq); free(S.buf); free(M.buf); return -1;
    }
    for (int32_t u = 0; u < n_units; u++) ghost_seq[u] = -1;
    int64_t ghosts = 0;  /* ids sent to the ghost so far; the last m_cap are remembered */
    for (int64_t i = 0; i < n; i++) {
        int32_t u = ids[i];
        if (where[u] != NONE) { if (freq[u] < 3) freq[u]++; flags[i] = HIT; continue; }
        uint8_t f = INSERTED;
        int in_ghost = ghost_seq[u] >= 0 && ghosts - ghost_seq[u] <= m_cap;
        /* make room for one: until one unit has left the cache */
        while (S.len + M.len >= cap) {
            if (S.len > 0 && (S.len >= s_cap || M.len == 0)) {
                int32_t v = pop(&S);
                if (freq[v] > 0) {  /* accessed again while small: to main */
                    freq[v] = 0; where[v] = MAIN;
                    if (M.len >= m_cap) {  /* main is full: evict from it first */
                        for (;;) {
                            int32_t w = pop(&M);
                            if (freq[w] > 0) { freq[w]--; push(&M, w); continue; }
                            where[w] = NONE; f |= EVICTED; break;
                        }
                    }
                    push(&M, v);
                    if (f & EVICTED) break;
                } else {
                    where[v] = NONE; ghost_seq[v] = ghosts++; f |= EVICTED; break;
                }
            } else {
                int32_t w = pop(&M);
                if (freq[w] > 0) { freq[w]--; push(&M, w); continue; }
                where[w] = NONE; f |= EVICTED; break;
            }
        }
        freq[u] = 0;
        if (in_ghost) { where[u] = MAIN; push(&M, u); ghost_seq[u] = -1; }
        else { where[u] = SMALL; push(&S, u); }
        flags[i] = f;
    }
    free(where); free(freq); free(ghost_seq); free(S.buf); free(M.buf);
    return 0;
}

/* Belady's MIN with bypass: on a miss with a full cache, the unit whose next use is
   furthest away (the newcomer included) is the one left out. A max-heap of
   (next use, unit) with stale entries skipped; next[i] is the index of the next
   access to ids[i], or INT64_MAX. */
typedef struct { int64_t key; int32_t u; } item;
static void up(item *h, int64_t k) {
    item x = h[k];
    while (k > 0 && h[(k - 1) / 2].key < x.key) { h[k] = h[(k - 1) / 2]; k = (k - 1) / 2; }
    h[k] = x;
}
static void down(item *h, int64_t len, int64_t k) {
    item x = h[k];
    for (;;) {
        int64_t c = 2 * k + 1;
        if (c >= len) break;
        if (c + 1 < len && h[c + 1].key > h[c].key) c++;
        if (h[c].key <= x.key) break;
        h[k] = h[c]; k = c;
    }
    h[k] = x;
}

int belady(int64_t n, const int32_t *ids, const int64_t *next, int32_t n_units, int64_t cap,
           uint8_t *flags) {
    int64_t *cur = malloc(sizeof(int64_t) * n_units);  /* next use of a cached unit; -1 if out */
    item *h = malloc(sizeof(item) * (n + 1));
    if (!cur || !h) { free(cur); free(h); return -1; }
    for (int32_t u = 0; u < n_units; u++) cur[u] = -1;
    int64_t len = 0, size = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t u = ids[i];
        int64_t nx = next[i];
        if (cur[u] >= 0) {
            flags[i] = HIT;
            cur[u] = nx; h[len] = (item){nx, u}; up(h, len++);
            continue;
        }
        flags[i] = 0;
        if (cap <= 0) continue;
        if (size == cap) {
            while (len > 0 && cur[h[0].u] != h[0].key) { h[0] = h[--len]; down(h, len, 0); }
            if (h[0].key <= nx) continue;  /* the newcomer is needed last: bypass */
            cur[h[0].u] = -1; h[0] = h[--len]; down(h, len, 0); size--;
            flags[i] |= EVICTED;
        }
        flags[i] |= INSERTED;
        cur[u] = nx; size++;
        h[len] = (item){nx, u}; up(h, len++);
        if (len > 2 * cap + 1024) {  /* drop stale entries so the heap stays small */
            int64_t k = 0;
            for (int64_t j = 0; j < len; j++) if (cur[h[j].u] == h[j].key) h[k++] = h[j];
            len = k;
            for (int64_t j = len / 2; j-- > 0;) down(h, len, j);
        }
    }
    free(cur); free(h);
    return 0;
}

/* The report's counts in one pass: per access, key = interval * 16 + op * 8 + hit * 4
   + (inserted | evicted << 1); the accesses and their bytes per key. */
int tally(int64_t n, const int64_t *t, int64_t t0, int64_t step, const int8_t *op,
          const uint8_t *hit, const uint8_t *flags, const int64_t *nbytes, int64_t n_keys,
          int64_t *count, int64_t *bytes) {
    for (int64_t i = 0; i < n; i++) {
        int64_t k = (t[i] - t0) / step * 16 + op[i] * 8 + (hit[i] ? 4 : 0) + ((flags[i] >> 1) & 3);
        if (k < 0 || k >= n_keys) return -2;
        count[k]++;
        bytes[k] += nbytes[i];
    }
    return 0;
}

/* Accesses and bytes per unit (the skew curve). */
void unit_tally(int64_t n, const int32_t *uid, const int64_t *nbytes, int64_t *count,
                int64_t *bytes) {
    for (int64_t i = 0; i < n; i++) {
        count[uid[i]]++;
        bytes[uid[i]] += nbytes[i];
    }
}
"""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "iotape"


@cache
def _lib() -> ctypes.CDLL | None:
    """The compiled simulators, built once per source version; None if no compiler works."""
    if os.environ.get("IOTAPE_TIERING_PURE"):
        return None
    digest = hashlib.sha256(C_SOURCE.encode()).hexdigest()[:16]
    so = _cache_dir() / f"tiering-{digest}.so"
    if not so.exists():
        try:
            so.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
                src = Path(tmp) / "tiering.c"
                src.write_text(C_SOURCE)
                out = Path(tmp) / so.name
                cc = os.environ.get("CC", "cc")
                subprocess.run(
                    [
                        cc,
                        "-std=c11",
                        "-Wall",
                        "-Wextra",
                        "-Werror",
                        "-O2",
                        "-shared",
                        "-fPIC",
                        "-o",
                        str(out),
                        str(src),
                    ],
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
                # Rename into place: a concurrent build never sees a half-written file.
                os.replace(out, so)
        except (OSError, subprocess.SubprocessError):
            return None
    lib = ctypes.CDLL(str(so))
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
