"""What a simulation reports: hit ratios (by count and bytes, read and write), a
timeline with promotions, demotions and migrated bytes as a share of host I/O, and
the skew curve."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from analyzer.tiering import native
from analyzer.tiering.accesses import Accesses, request_hits
from analyzer.tiering.events import READ, WRITE
from analyzer.tiering.policies import Hits, Run
from schemas.documents.tiering import HitRatio, Skew, Timeline


def _ratio(num: np.ndarray, den: np.ndarray) -> Any:
    """num / den as a float (None where den is 0), element by element for arrays."""
    if num.ndim == 0:
        return float(num / den) if den else None
    return [float(a / b) if b else None for a, b in zip(num, den, strict=True)]


def _tallies(
    r: Run, hits: Hits, step_ns: int, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per interval: requests and bytes by (op, hit), units promoted and demoted."""
    ev, acc = r.ev, r.acc
    # One key per access: (interval, op, hit, inserted, evicted). Its counts and its
    # byte sums give every split; with one access per request (the common case) the
    # request counts come from the same tally.
    t_a = ev.t_ns if acc.identity else ev.t_ns[acc.req]
    op_a = ev.op if acc.identity else ev.op[acc.req]
    per, byt4 = native.tally(t_a, r.t0, step_ns, op_a, hits.hit, hits.flags, acc.nbytes, n)
    byt = byt4.sum(axis=3)
    if acc.identity:
        req = per.sum(axis=3)
    else:
        ri = (ev.t_ns - r.t0) // step_ns
        rh = request_hits(acc, hits.hit)
        req = np.bincount(ri * 4 + ev.op * 2 + rh, minlength=4 * n).reshape(n, 2, 2)
    fl = per.sum(axis=(1, 2))  # (interval, inserted | evicted << 1)
    promoted = (fl[:, 1] + fl[:, 3]).astype(np.int64)
    demoted = (fl[:, 2] + fl[:, 3]).astype(np.int64)
    for t, pr, de in hits.moves:
        i = min(n - 1, (t - r.t0) // step_ns)
        promoted[i] += pr
        demoted[i] += de
    return req, byt, promoted, demoted


def report(r: Run, hits: Hits) -> tuple[HitRatio, Timeline]:
    """(overall hit ratios, timeline), from one counting pass over (interval, op, hit,
    inserted/evicted) keys, so that reporting costs no more than the simulation."""
    ev, p = r.ev, r.p
    span = int(ev.t_ns[-1]) - r.t0
    step = p.report_interval_s or max(1e-3, span / 1e9 / 100)  # about 100 points
    step_ns = max(1, round(step * 1e9))
    n = span // step_ns + 1
    req, byt, promoted, demoted = _tallies(r, hits, step_ns, n)
    # A read cache writes only what it fills (evicted clean data is dropped); a tier
    # copies both ways.
    moved = promoted if p.policy in ("lru", "s3fifo", "belady") else promoted + demoted
    migrated = moved * p.unit
    host_bytes = byt.sum(axis=(1, 2))
    total: dict[str, Any] = {"count": {}, "bytes": {}}
    timeline: dict[str, Any] = {
        "interval_s": step_ns / 1e9,
        "t_s": (np.arange(n) * step_ns / 1e9).tolist(),
        "requests": req.sum(axis=(1, 2)).tolist(),
    }
    for name, ops in (("all", slice(None)), ("read", READ), ("write", WRITE)):
        for kind, arr in (("count", req), ("bytes", byt)):
            part = arr[:, ops, :]
            hit, all_ = (part[..., 1], part.sum(axis=-1))
            if name == "all":
                hit, all_ = hit.sum(axis=1), all_.sum(axis=1)
            suffix = "" if name == "all" else "_" + name
            timeline[f"hit_ratio_{kind}{suffix}"] = _ratio(hit, all_)
            total[kind][name] = _ratio(hit.sum(), all_.sum())
    timeline["host_bytes"] = host_bytes.astype(np.int64).tolist()
    timeline["promotions"] = promoted.tolist()
    timeline["demotions"] = demoted.tolist()
    timeline["migrated_bytes"] = migrated.tolist()
    timeline["migrated_share"] = _ratio(migrated, host_bytes)
    total["requests"] = len(ev)
    total["hit_requests"] = int(req[..., 1].sum())
    total["bytes_total"] = int(byt.sum())
    total["bytes_hit"] = int(byt[..., 1].sum())
    total["migrated_bytes"] = int(migrated.sum())
    total["migrated_share"] = _ratio(migrated.sum(), host_bytes.sum())
    return cast(HitRatio, total), cast(Timeline, timeline)


def skew(acc: Accesses, unit: int, points: int = 101) -> Skew:
    """Share of I/O (accesses and bytes) against share of the touched capacity, units
    hottest first; and the capacity that serves 80 % and 100 % of the I/O."""
    counts, byts = native.unit_tally(acc.uid, acc.nbytes, acc.n_units)
    per_unit = counts.astype(np.float64)
    per_unit_bytes = byts.astype(np.float64)
    cum = np.cumsum(np.sort(per_unit)[::-1]) / per_unit.sum()
    cum_b = np.cumsum(np.sort(per_unit_bytes)[::-1]) / max(per_unit_bytes.sum(), 1)
    n = acc.n_units
    idx = np.unique(np.linspace(0, n, points).round().astype(np.int64))
    idx = idx[idx > 0]

    def units_for(share: float, c: np.ndarray) -> int:
        return int(np.searchsorted(c, share - 1e-12) + 1)

    return {
        "footprint_bytes": n * unit,
        "units": n,
        "curve": [
            {
                "capacity_share": float(i / n),
                "io_share": float(cum[i - 1]),
                "bytes_share": float(cum_b[i - 1]),
            }
            for i in idx
        ],
        "capacity_for_80pct_io": units_for(0.8, cum) * unit,
        "capacity_for_100pct_io": units_for(1.0, cum) * unit,
        "capacity_for_80pct_bytes": units_for(0.8, cum_b) * unit,
        "capacity_for_100pct_bytes": units_for(1.0, cum_b) * unit,
    }
