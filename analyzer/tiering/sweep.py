"""Hit ratios for a range of tier sizes.

One pass for `lru` (Mattson's LRU stack distances: a cache of C units hits exactly
the accesses at distance < C), `oracle` (each window's ranking by count) and
`tiering` without a migration budget (each window's placement is the previous
window's top-k by heat, nested in k). Every access gets a "distance": the smallest
capacity in units that serves it; a request is served by a tier of C units when all
of its accesses' distances are < C. With one sort, every capacity is a lookup.
`s3fifo`, `belady` and budgeted `tiering` are not stack algorithms: their sweep runs
once per size, and says so (`one_pass: false`).
"""

from __future__ import annotations

import numpy as np

from analyzer.tiering.accesses import request_hits
from analyzer.tiering.policies import Run
from schemas.documents.tiering import Sweep, SweepPoint


def sweep_capacities(footprint_units: int, unit: int, extra: int | None = None) -> list[int]:
    """Tier sizes for a sweep: powers of two of units up to the footprint, and `extra`."""
    ks = {1 << i for i in range(max(1, footprint_units).bit_length() + 1)}
    ks.add(max(1, footprint_units))
    caps = {k * unit for k in ks}
    if extra is not None:
        caps.add(extra)
    return sorted(caps)


def sweep(r: Run, capacities: list[int]) -> Sweep:
    """Hit ratios (by count and bytes) for every capacity: one pass where the policy
    allows, else one run per size."""
    p, acc = r.p, r.acc
    rows: list[SweepPoint] = []
    if r.one_pass():
        d = r.distance()
        req_d = np.maximum.reduceat(d, acc.starts)
        req_sorted = np.sort(req_d)
        order = np.argsort(d, kind="stable")
        d_sorted = d[order]
        bytes_cum = np.concatenate(([0], np.cumsum(acc.nbytes[order])))
        total_b = int(bytes_cum[-1])
        for cap in capacities:
            k = p.units(cap)
            n_hit = int(np.searchsorted(req_sorted, k, side="left"))
            b_hit = int(bytes_cum[np.searchsorted(d_sorted, k, side="left")])
            rows.append(_row(cap, k, n_hit, len(req_d), b_hit, total_b))
    else:
        for cap in capacities:
            k = p.units(cap)
            hit = r.hits(k).hit
            rh = request_hits(acc, hit)
            b_hit = int(acc.nbytes[hit].sum())
            rows.append(_row(cap, k, int(rh.sum()), len(rh), b_hit, int(acc.nbytes.sum())))
    return {"one_pass": r.one_pass(), "points": rows}


def _row(cap: int, k: int, n_hit: int, n: int, b_hit: int, b: int) -> SweepPoint:
    return {
        "capacity_bytes": cap,
        "units": k,
        "hit_ratio_count": n_hit / n if n else None,
        "hit_ratio_bytes": b_hit / b if b else None,
    }
