"""Projected latency: each request gets the fast device's measured latency for its
op and size class when the simulation served it from the fast tier, else the slow
device's; the mixture's p50, p99 and mean are set beside both pure devices and,
where a replay split by the same placement was measured, that measurement."""

from __future__ import annotations

from typing import cast

import numpy as np

from analyzer.tiering.events import Events
from analyzer.tiering.params import TieringError
from schemas.documents.tiering import Latency, LatencyError, Projection

SIZE_CLASSES = tuple(range(12, 21))  # log2 of the request size: 4 KiB .. 1 MiB and up
# A device's measured latency per (op, size class): sorted samples (ns).
Profile = dict[tuple[int, int], np.ndarray]


def size_class(nbytes: np.ndarray) -> np.ndarray:
    lg = np.ceil(np.log2(np.maximum(nbytes, 1))).astype(np.int64)
    return np.clip(lg, SIZE_CLASSES[0], SIZE_CLASSES[-1])


def profile(ev: Events) -> Profile:
    """A device's measured latency per (op, size class): sorted samples (ns)."""
    ok = ev.lat_ns >= 0
    op, cls, lat = ev.op[ok], size_class(ev.nbytes[ok]), ev.lat_ns[ok]
    out: Profile = {}
    key = op.astype(np.int64) * 64 + cls
    order = np.lexsort((lat, key))
    key, lat = key[order], lat[order]
    bounds = np.flatnonzero(np.diff(key)) + 1
    for s, e in zip(np.r_[0, bounds], np.r_[bounds, len(key)], strict=True):
        if e > s:
            out[(int(key[s] // 64), int(key[s] % 64))] = lat[s:e]
    if not out:
        raise TieringError("the device run has no requests with a known device time")
    return out


def _samples(prof: Profile, op: int, cls: int) -> np.ndarray:
    """The samples of (op, class), else the nearest class of the op, else any op's."""
    if (op, cls) in prof:
        return prof[(op, cls)]
    same = [c for o, c in prof if o == op] or [c for _, c in prof]
    best = min(same, key=lambda c: (abs(c - cls), c))
    ops = [o for o, c in prof if c == best]
    return prof[(op if op in ops else ops[0], best)]


def mean_latency(ev: Events, prof: Profile) -> np.ndarray:
    """Each request's latency (ns): the profile's mean for its op and size class (the
    samples `project` draws its mixture from)."""
    key = ev.op.astype(np.int64) * 64 + size_class(ev.nbytes)
    out = np.empty(len(ev))
    for g in np.unique(key):
        out[key == g] = float(_samples(prof, int(g // 64), int(g % 64)).mean())
    return out


def mixture(groups: list[tuple[float, np.ndarray]]) -> Latency:
    """p50, p99 and mean of a weighted mixture of sample sets (weights: request counts).
    Percentiles are order statistics of the mixture CDF, as PERCENTILE_DISC."""
    groups = [(w, s) for w, s in groups if w > 0]
    if not groups:
        return {"p50_ns": None, "p99_ns": None, "mean_ns": None, "requests": 0}
    vals = np.concatenate([s for _, s in groups])
    wts = np.concatenate([np.full(len(s), w / len(s)) for w, s in groups])
    order = np.argsort(vals, kind="stable")
    vals, cum = vals[order], np.cumsum(wts[order])
    total = sum(w for w, _ in groups)

    def q(level: float) -> float:
        i = int(np.searchsorted(cum, level * total * (1 - 1e-12), side="left"))
        return float(vals[min(i, len(vals) - 1)])

    mean = sum(w * float(s.mean()) for w, s in groups) / total
    return {"p50_ns": q(0.5), "p99_ns": q(0.99), "mean_ns": mean, "requests": int(total)}


def project(ev: Events, req_hit: np.ndarray, fast: Profile, slow: Profile) -> Projection:
    """Per request, the fast device's latency distribution for its op and size class if
    the simulation put it in the fast tier, else the slow device's: the mixture's
    p50/p99/mean, next to the all-slow and all-fast devices on the same requests."""
    key = ev.op.astype(np.int64) * 64 + size_class(ev.nbytes)
    out: dict[str, Latency] = {}
    for name, tier_of in (
        ("projected", req_hit),
        ("slow_only", np.zeros(len(ev), dtype=bool)),
        ("fast_only", np.ones(len(ev), dtype=bool)),
    ):
        groups = []
        for is_fast, prof in ((True, fast), (False, slow)):
            k, n = np.unique(key[tier_of == is_fast], return_counts=True)
            groups += [
                (float(c), _samples(prof, int(g // 64), int(g % 64)))
                for g, c in zip(k, n, strict=True)
            ]
        out[name] = mixture(groups)
    return cast(Projection, out)  # fmt: skip


def measured_latency(ev: Events) -> Latency:
    """A run's own device latency (reads and writes), defined as the projection's."""
    lat = ev.lat_ns[ev.lat_ns >= 0]
    if not len(lat):
        raise TieringError("the measured run has no requests with a known device time")
    return mixture([(float(len(lat)), np.sort(lat))])


def projection_error(projected: Latency, measured: Latency) -> LatencyError:
    """projected / measured - 1 for p50, p99 and mean (0.1: projection 10 % high)."""

    def err(p: float | None, m: float | None) -> float | None:
        return None if not p or not m else p / m - 1.0

    return {
        "p50": err(projected["p50_ns"], measured["p50_ns"]),
        "p99": err(projected["p99_ns"], measured["p99_ns"]),
        "mean": err(projected["mean_ns"], measured["mean_ns"]),
    }
