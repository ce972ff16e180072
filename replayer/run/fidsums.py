"""What `replay fidelity` sums of each trace's requests (Side: per-second counts and
bytes, reads, sizes) and of the pairs' issue-time errors (Drift), batch by batch
(fidstream.py feeds them): the figures' state, never a column per request.
"""

from __future__ import annotations

import numpy as np

from replayer.plan.source import OP
from replayer.run import native

SIZE_TABLE = 1 << 22  # request sizes below it are counted in a table, not sorted
SIZES_C = 1024  # distinct sizes a batch's tally in C keeps (more: numpy counts them)


class Side:
    """One trace's requests in one stream (or all): what `_figures` reads of them."""

    def __init__(self, nbins: int) -> None:
        self.n = self.data = self.reads = 0
        self.iops = np.zeros(nbins)
        self.mb = np.zeros(nbins)
        self.sizes: dict[int, int] = {}

    def add(self, t: np.ndarray, r: np.ndarray, m: np.ndarray | None = None) -> None:
        """Requests `r` (those of mask `m`) at aligned times `t` (ns)."""
        self.merge(self.tally(t, r, m))

    def tally(self, t: np.ndarray, r: np.ndarray, m: np.ndarray | None = None) -> tuple:
        """What `add` adds (merge): a batch's tally once for two Sides that take
        the same rows (all streams and the only one). In one pass in C
        (src/tally.c); this is its numpy twin (IOTAPE_POSTREPLAY_PURE=1)."""
        if (got := _tally_c(t, r, m, len(self.iops))) is not None:
            return got
        nbytes, op = (r["bytes"], r["op"]) if m is None else (r["bytes"][m], r["op"][m])
        t = t if m is None else t[m]
        sec = t // 1_000_000_000
        ok = (sec >= 0) & (sec < len(self.iops))
        iops = np.bincount(sec[ok], minlength=len(self.iops))
        mb = np.bincount(sec[ok], weights=nbytes[ok].astype(np.float64), minlength=len(self.iops))
        d = op != OP["flush"]
        reads = int((op[d] == OP["read"]).sum())
        sizes = nbytes[d]
        if len(sizes) and int(sizes.max()) < SIZE_TABLE:
            c = np.bincount(sizes, minlength=0)
            u = np.flatnonzero(c)
            c = c[u]
        else:
            u, c = np.unique(sizes, return_counts=True)
        return len(t), iops, mb, int(d.sum()), reads, u.tolist(), c.tolist()

    def merge(self, tally: tuple) -> None:
        n, iops, mb, data, reads, u, c = tally
        self.n += n
        self.iops += iops
        self.mb += mb
        self.data += data
        self.reads += reads
        for k, v in zip(u, c, strict=True):
            self.sizes[k] = self.sizes.get(k, 0) + v

    def read_fraction(self) -> float | None:
        return round(float(self.reads / self.data), 4) if self.data else None


def _tally_c(t: np.ndarray, r: np.ndarray, m: np.ndarray | None, nbins: int) -> tuple | None:
    """Side.tally in src/tally.c; None where numpy does it (IOTAPE_POSTREPLAY_PURE, a
    batch of more than SIZES_C distinct sizes)."""
    lib = native.lib()
    if lib is None:
        return None
    nb, op = r["bytes"], r["op"]
    if t.dtype != np.int64 or nb.dtype != np.uint32 or op.dtype != np.uint8:
        return None
    mask = None if m is None else np.ascontiguousarray(m, bool)
    iops, mb = np.empty(nbins, np.int64), np.empty(nbins)
    counts = np.empty(3, np.int64)
    sizes, size_counts = np.empty(SIZES_C, np.uint32), np.empty(SIZES_C, np.int64)
    k = lib.side_tally(t.ctypes.data, t.strides[0], nb.ctypes.data, nb.strides[0], op.ctypes.data,
                       op.strides[0], None if mask is None else mask.ctypes.data, len(t), nbins,
                       OP["flush"], OP["read"], iops.ctypes.data, mb.ctypes.data,
                       counts.ctypes.data, sizes.ctypes.data, size_counts.ctypes.data,
                       SIZES_C)  # fmt: skip
    if k < 0:
        return None
    n, data, reads = counts.tolist()
    return n, iops, mb, data, reads, sizes[:k].tolist(), size_counts[:k].tolist()


class Drift:
    """fidelity._drift from sums merged batch by batch (Chan et al.'s co-moments)."""

    def __init__(self) -> None:
        self.n, self.mt, self.me, self.ctt, self.cte = 0, 0.0, 0.0, 0.0, 0.0
        self.lo, self.hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min

    def add(self, t: np.ndarray, e: np.ndarray) -> None:
        if not len(t):
            return
        tb, eb = t.astype(np.float64), e.astype(np.float64)
        nb, mt, me = len(tb), float(tb.mean()), float(eb.mean())
        dt = tb - mt
        ctt, cte = float((dt * dt).sum()), float((dt * (eb - me)).sum())
        n = self.n + nb
        dmt, dme = mt - self.mt, me - self.me
        self.ctt += ctt + dmt * dmt * self.n * nb / n
        self.cte += cte + dmt * dme * self.n * nb / n
        self.mt += dmt * nb / n
        self.me += dme * nb / n
        self.n = n
        self.lo, self.hi = min(self.lo, int(t.min())), max(self.hi, int(t.max()))

    def value(self) -> float | None:
        if self.n < 2 or self.lo == self.hi:
            return None
        return round(float(self.cte / self.ctt * 1e9) / 1e6, 4)
