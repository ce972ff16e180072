"""A run's requests as accesses to fixed-size units: one access per (request, unit)
it touches, units numbered densely so that the policies index plain arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.tiering.events import READ, WRITE, Events
from analyzer.tiering.params import Params


@dataclass
class Accesses:
    """One row per (request, unit) it touches, in request order."""

    req: np.ndarray  # the request of each access
    starts: np.ndarray  # first access of each request
    uid: np.ndarray  # dense unit id (int32)
    nbytes: np.ndarray  # bytes of the request inside this unit
    n_units: int
    identity: bool  # one access per request: req is 0..n-1


def accesses(ev: Events, unit: int) -> Accesses:
    shift = unit.bit_length() - 1
    n = len(ev)
    first = ev.offset >> shift
    last = (ev.offset + np.maximum(ev.nbytes, 1) - 1) >> shift
    if np.array_equal(first, last):  # the common case: no request crosses a unit boundary
        uid, n_units = _dense(ev.dev, first)
        idx = np.arange(n, dtype=np.int64)
        return Accesses(idx, idx, uid, ev.nbytes, n_units, identity=True)
    k = last - first + 1
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(k[:-1], out=starts[1:])
    total = int(k.sum())
    req = np.repeat(np.arange(n, dtype=np.int64), k)
    unit_idx = first[req] + (np.arange(total, dtype=np.int64) - starts[req])
    lo = np.maximum(ev.offset[req], unit_idx << shift)
    hi = np.minimum(ev.offset[req] + ev.nbytes[req], (unit_idx + 1) << shift)
    uid, n_units = _dense(ev.dev[req], unit_idx)
    return Accesses(req, starts, uid, np.maximum(hi - lo, 0), n_units, identity=False)


def _factorize(key: np.ndarray) -> tuple[np.ndarray, int]:
    """Integer keys to ids 0..n-1 in key order: a lookup table where the keys span a
    small range (large units, few devices), else a sort."""
    lo, hi = int(key.min()), int(key.max())
    if hi - lo <= max(4 * len(key), 1 << 24):
        present = np.zeros(hi - lo + 1, dtype=bool)
        rel = key - lo
        present[rel] = True
        ids = np.cumsum(present, dtype=np.int32)
        ids -= 1
        return ids[rel], int(ids[-1]) + 1
    keys, inv = np.unique(key, return_inverse=True)
    return inv.astype(np.int32), len(keys)


def _dense(dev: np.ndarray, unit_idx: np.ndarray) -> tuple[np.ndarray, int]:
    """(device, unit index) pairs to dense unit ids."""
    if len(dev) == 0:
        return np.zeros(0, dtype=np.int32), 0
    if dev[0] == dev[-1] and (dev == dev[0]).all():
        return _factorize(unit_idx)
    dev_i, n_dev = _factorize(dev)
    return _factorize(unit_idx * n_dev + dev_i)


def counted_mask(p: Params, ev: Events, acc: Accesses) -> np.ndarray:
    """Accesses that count as heat, or that a cache looks up and admits."""
    op = ev.op if acc.identity else ev.op[acc.req]
    ok = op == READ
    if p.count_writes:
        ok |= op == WRITE
    if p.max_io_bytes is not None:
        ok &= (ev.nbytes if acc.identity else ev.nbytes[acc.req]) <= p.max_io_bytes
    return ok


def request_hits(acc: Accesses, hit: np.ndarray) -> np.ndarray:
    """A request is a hit when every unit it touches is in the fast tier."""
    if acc.identity or not len(hit):
        return hit
    return np.logical_and.reduceat(hit, acc.starts)
