"""A trace's locality figures (replayer.plan.locality.profile) from its requests in
time order, a batch at a time, in memory that grows with its footprint (the
distinct 64 KiB units it touches), not with its length.

profile() needs, per trace, every request's unit and the LRU stack distance of
each; held whole, that is ~100 bytes a request (3 GiB for an hour at 8k IOPS).
Here:

- footprint and hot shares come from a count per unit, merged batch by batch;
- the sequential share carries each op's last end from one batch to the next;
- the LRU curve comes from stack distances taken a piece at a time by the same
  kernel (analyzer.tiering.native): each piece is run behind the LRU stack left
  by the pieces before it (every unit touched so far, once, least recent first),
  which gives each of its accesses exactly the distance it has in the whole
  trace (the units touched since its unit's last use are the ones above it in
  that stack, or touched again in the piece). Only the histogram of request
  distances is kept, so the curve can be read at any cache size afterwards (the
  replay's at the original's sizes).

The answers are profile()'s; the tests compare them.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from analyzer.tiering import native
from replayer.plan import locality
from replayer.plan.source import OP

UNIT = locality.UNIT
SHIFT = UNIT.bit_length() - 1
PIECE = 1 << 18  # requests at least per run of the kernel (and units per merge)


class Profile:
    """profile() of one trace, fed its requests (ordered.COMPACT rows) in time order."""

    def __init__(self) -> None:
        self.devs: dict[int, int] = {}
        self.units: list[np.ndarray] = []  # (unit, count) pairs, merged when large
        self.counts: list[np.ndarray] = []
        self._kept = 0
        self.n = self.seq = 0
        self.last_end: dict[int, int] = {}
        self.stack = np.zeros(0, np.int64)  # every unit so far, least recent first
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._held = 0
        self.dist = np.zeros(0, np.int64)  # requests by stack distance (first uses apart)

    def add(self, r: np.ndarray) -> None:
        keep = (r["op"] <= OP["write"]) & (r["bytes"] > 0)
        if not keep.all():  # (a batch of reads and writes alone is taken as it is)
            r = r[keep]
        if not len(r):
            return
        devs = distinct(r["dev"])
        for d in devs:
            self.devs.setdefault(d, len(self.devs))
        # Each device its own address space (profile() ranks the devices; any
        # one-to-one numbering gives the same figures).
        off = r["offset"].astype(np.int64)
        if len(devs) == 1:
            off += self.devs[devs[0]] << 50
        else:
            known = np.array(sorted(self.devs), np.int64)
            ranks = np.array([self.devs[d] for d in known.tolist()], np.int64)
            off += ranks[np.searchsorted(known, r["dev"].astype(np.int64))] << 50
        nb = r["bytes"].astype(np.int64)
        self.n += len(r)
        self._sequential(r["op"], off, nb)
        u, c = _counts(off >> SHIFT)
        self.units.append(u)
        self.counts.append(c)
        self._kept += len(u)
        if self._kept > 2 * max(len(self.units[0]), PIECE):
            self._merge_units()
        self.pending.append((off, nb))
        self._held += len(off)
        if self._held >= max(len(self.stack), PIECE):
            self._distances()

    def _sequential(self, op: np.ndarray, off: np.ndarray, nb: np.ndarray) -> None:
        ops = distinct(op)
        for o in ops:
            m = op == o if len(ops) > 1 else slice(None)
            start, end = off[m], off[m] + nb[m]
            prev = end[:-1] if o not in self.last_end else np.r_[self.last_end[o], end[:-1]]
            self.seq += int((start[len(start) - len(prev) :] == prev).sum())
            self.last_end[o] = int(end[-1])

    def _merge_units(self) -> None:
        u, inv = factorize(np.concatenate(self.units))
        c = np.bincount(inv, weights=np.concatenate(self.counts)).astype(np.int64)
        self.units, self.counts, self._kept = [u], [c], len(u)

    def _distances(self) -> None:
        """Stack distances of the pending requests, behind the stack so far."""
        if not self.pending:
            return
        off = np.concatenate([p[0] for p in self.pending])
        nb = np.concatenate([p[1] for p in self.pending])
        self.pending, self._held = [], 0
        first, last = off >> SHIFT, (off + nb - 1) >> SHIFT
        whole = bool((first == last).all())  # each request in one unit (small I/O)
        if whole:
            unit = first
        else:
            k = last - first + 1
            starts = np.zeros(len(off), np.int64)
            np.cumsum(k[:-1], out=starts[1:])
            req = np.repeat(np.arange(len(off)), k)
            unit = first[req] + (np.arange(int(k.sum())) - starts[req])
        seq = np.concatenate([self.stack, unit])
        keys, ids = factorize(seq)
        d = native.stack_distances(ids, len(keys))[len(self.stack) :]
        per_req = d if whole else np.maximum.reduceat(d, starts)
        seen = per_req[per_req != native.NEVER]
        h = np.bincount(seen)
        if len(h) > len(self.dist):
            self.dist = np.r_[self.dist, np.zeros(len(h) - len(self.dist), np.int64)]
        self.dist[: len(h)] += h
        # The new stack: each unit once, by its last use.
        last = np.full(len(keys), -1, np.int64)
        np.maximum.at(last, ids, np.arange(len(ids)))
        mark = np.zeros(len(seq), bool)
        mark[last] = True
        self.stack = seq[mark]

    def figures(self, caps_units: list[int] | None = None) -> dict:
        """profile()'s dict."""
        self._distances()
        if self._kept:
            self._merge_units()
        c = self.counts[0] if self.counts else np.zeros(0, np.int64)
        fp = len(c)
        hot1, hot10 = _hot(c) if len(c) else (0.0, 0.0)
        caps = caps_units or locality.caps_for(fp)
        cum = np.r_[0, np.cumsum(self.dist)]
        hits = [int(cum[min(cap, len(self.dist))]) for cap in caps]
        return {
            "footprint_bytes": fp * UNIT,
            "hot1_share": hot1,
            "hot10_share": hot10,
            "sequential_share": round(self.seq / self.n, 4) if self.n else 0.0,
            "lru_caps_bytes": [cap * UNIT for cap in caps],
            "lru_hit_ratio": [round(float(h / self.n), 4) if self.n else 0.0 for h in hits],
        }


def factorize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, each value's index among them as int32): np.unique's
    answer, through a table where the values span a small range (one device's units)."""
    if not len(x):
        return x[:0], np.zeros(0, np.int32)
    lo, hi = int(x.min()), int(x.max())
    if hi - lo > max(4 * len(x), 1 << 24):
        keys, inv = np.unique(x, return_inverse=True)
        return keys, inv.astype(np.int32)
    present = np.zeros(hi - lo + 1, bool)
    present[x - lo] = True
    ids = np.cumsum(present, dtype=np.int32) - 1
    return np.flatnonzero(present) + lo, ids[x - lo]


def distinct(x: np.ndarray) -> list[int]:
    """np.unique(x).tolist(), without its sort where every value is one (the usual
    batch: one device, one op, one stream)."""
    if not len(x):
        return []
    lo, hi = int(x.min()), int(x.max())
    return [lo] if lo == hi else np.unique(x).tolist()


def _counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(x, return_counts=True), by one count per slot of a table where the
    values span a small range (one device's units); np.unique sorts them."""
    if not len(x):
        return np.unique(x, return_counts=True)
    lo, hi = int(x.min()), int(x.max())
    if hi - lo > max(4 * len(x), 1 << 24):
        return np.unique(x, return_counts=True)
    c = np.bincount(x - lo)
    u = np.flatnonzero(c)
    return u + lo, c[u]


def _hot(counts: np.ndarray) -> tuple[float, float]:
    """locality.hot_shares from the count of each unit."""
    c = np.sort(counts)[::-1]
    cum = np.cumsum(c) / c.sum()
    at = lambda f: round(float(cum[max(1, round(f * len(c))) - 1]), 4)  # noqa: E731
    return at(0.01), at(0.1)


def profile(batches: Iterable[np.ndarray], caps_units: list[int] | None = None) -> dict:
    p = Profile()
    for b in batches:
        p.add(b)
    return p.figures(caps_units)
