"""Locality of a trace, and how far a replay's is from its original's.

A cache or a tier in front of the device sees a replay's locality, not its rate:
two traces with the same IOPS, mix and sizes can hit an LRU cache 27 % and
0.5 % of the time. What an LRU cache does depends on the popularity of units and
on how soon they are reused, not on where the hot units lie, so the figures are:
the footprint (distinct units touched), the share of I/O in the hottest 1 % and
10 % of it, the sequential share, and the LRU hit-ratio curve at cache sizes from
0.1 % to 50 % of the original's footprint (one pass of stack distances, the
tiering simulator's). Both traces are measured at the same cache sizes in bytes.

Reads and writes both count (a write-back cache admits both); a request hits
when every unit it touches does.
"""

from __future__ import annotations

import numpy as np

from analyzer.tiering import native
from analyzer.tiering.accesses import accesses
from analyzer.tiering.events import Events, events_from_columns

UNIT = 64 << 10  # the cache unit: what `analyze tiering --unit 64K` uses
FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
GOAL_FROM = 0.01  # the goal holds from 1 % of the footprint (a few units below)
GAP_PP = 3.0  # hit ratio within 3 percentage points ...
GAP_REL = 0.15  # ... or 15 % of the original's, whichever is larger
FOOTPRINT_REL = 0.05


def hit_curve(offset: np.ndarray, nbytes: np.ndarray, caps_units: list[int], unit: int = UNIT):
    """LRU hit ratio (share of requests) at each capacity in units, for requests in order."""
    if not len(offset):
        return np.zeros(len(caps_units)), 0
    ev = Events(
        t_ns=np.arange(len(offset), dtype=np.int64),
        dev=np.zeros(len(offset), np.int64),
        offset=np.asarray(offset, np.int64),
        nbytes=np.maximum(np.asarray(nbytes, np.int64), 1),
        op=np.zeros(len(offset), np.int8),
        lat_ns=np.full(len(offset), -1, np.int64),
    )
    acc = accesses(ev, unit)
    d = native.stack_distances(acc.uid, acc.n_units)
    req = np.sort(np.maximum.reduceat(d, acc.starts))
    hits = np.searchsorted(req, np.asarray(caps_units, np.int64), side="left")
    return hits / len(req), acc.n_units


def caps_for(footprint_units: int) -> list[int]:
    return [max(1, round(f * footprint_units)) for f in FRACTIONS]


def sequential_share(op: np.ndarray, offset: np.ndarray, nbytes: np.ndarray) -> float:
    """Share of requests that start where the previous request of the same kind ended."""
    seq = 0
    for o in np.unique(op).tolist():
        m = op == o
        off, b = offset[m], nbytes[m]
        seq += int((off[1:] == off[:-1] + b[:-1]).sum())
    return round(seq / len(op), 4) if len(op) else 0.0


def hot_shares(offset: np.ndarray, unit: int = UNIT) -> tuple[float, float]:
    """Share of requests in the hottest 1 % and 10 % of the touched units."""
    _, counts = np.unique(offset // unit, return_counts=True)
    c = np.sort(counts)[::-1]
    cum = np.cumsum(c) / c.sum()
    at = lambda f: round(float(cum[max(1, round(f * len(c))) - 1]), 4)  # noqa: E731
    return at(0.01), at(0.1)


def _data(r: np.ndarray, t_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(op, offset, bytes) of the reads and writes, in time order."""
    ev = events_from_columns(t_ns, t_ns, r["dev"], r["offset"], r["bytes"], r["op"].astype(np.int8))
    ok = ev.nbytes > 0
    # Each device is its own address space: keep units of different devices apart.
    _, dev = np.unique(ev.dev[ok], return_inverse=True)
    off = ev.offset[ok] + (dev.astype(np.int64) << 50)
    return ev.op[ok], off, ev.nbytes[ok]


def profile(r: np.ndarray, t_ns: np.ndarray, caps_units: list[int] | None = None) -> dict:
    """Locality figures of one trace; the curve at `caps_units` (default: its own footprint's)."""
    op, off, b = _data(r, t_ns)
    hot1, hot10 = hot_shares(off) if len(off) else (0.0, 0.0)
    fp = len(np.unique(off // UNIT)) if len(off) else 0
    caps = caps_units or caps_for(fp)
    curve, _ = hit_curve(off, b, caps)
    return {
        "footprint_bytes": fp * UNIT,
        "hot1_share": hot1,
        "hot10_share": hot10,
        "sequential_share": sequential_share(op, off, b),
        "lru_caps_bytes": [c * UNIT for c in caps],
        "lru_hit_ratio": [round(float(x), 4) for x in curve],
    }


def tolerance(orig_hit: float) -> float:
    """How far a replay's hit ratio may be from the original's (a fraction)."""
    return max(GAP_PP / 100, GAP_REL * orig_hit)


def compare(o: dict, r: dict) -> dict:
    """Gaps between two profiles taken at the same capacities; `faithful` is the verdict."""
    ho, hr = np.array(o["lru_hit_ratio"]), np.array(r["lru_hit_ratio"])
    gap = np.abs(hr - ho)
    goal = np.array(FRACTIONS) >= GOAL_FROM
    worst = int(np.argmax(np.where(goal, gap, -1)))
    fp_err = abs(r["footprint_bytes"] - o["footprint_bytes"]) / max(o["footprint_bytes"], 1)
    over = [
        f"LRU hit ratio at {FRACTIONS[i] * 100:g} % of the footprint: "
        f"{hr[i] * 100:.1f} % against {ho[i] * 100:.1f} %"
        for i in np.flatnonzero(goal & (gap > np.vectorize(tolerance)(ho) + 1e-9)).tolist()
    ]
    if fp_err > FOOTPRINT_REL:
        over.append(f"footprint {fp_err * 100:.1f} % off")
    return {
        "max_gap_pp": round(float(gap[worst]) * 100, 2),
        "max_gap_at_fraction": FRACTIONS[worst],
        "footprint_error_pct": round(fp_err * 100, 2),
        "faithful": not over,
        "why_not": over,
    }


def figures(o: np.ndarray, to: np.ndarray, r: np.ndarray, tr: np.ndarray) -> dict:
    """[original, replay] locality figures, the replay's curve at the original's sizes."""
    po = profile(o, to)
    caps = [c // UNIT for c in po["lru_caps_bytes"]]
    return side_by_side(po, profile(r, tr, caps))


def side_by_side(po: dict, pr: dict) -> dict:
    """Two profiles as [original, other] pairs, and how far apart (compare)."""
    keys = ("footprint_bytes", "hot1_share", "hot10_share", "sequential_share")
    out: dict = {k: [po[k], pr[k]] for k in keys}
    out["lru_fractions"] = list(FRACTIONS)
    out["lru_caps_bytes"] = po["lru_caps_bytes"]
    out["lru_hit_ratio"] = [po["lru_hit_ratio"], pr["lru_hit_ratio"]]
    out |= compare(po, pr)
    return out
