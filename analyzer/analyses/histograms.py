"""A run's latency histograms, and what is read from them: percentiles, summaries.

Percentiles come from log-linear histograms built in SQL (fio's scheme: 64
sub-buckets per power of two), so a 10-million-event run is one GROUP BY, not a
sort. A value read from a bucket is its midpoint, clamped to the smallest and
largest latency really seen in it, so it is off by at most half a bucket:
1/128 (0.78 %) of the value; values under 64 ns are exact.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import cast

import numpy as np

import schemas
from analyzer.analyses.filters import stream_names
from analyzer.store import catalog, event_histograms, queries
from analyzer.store.interface import Reader
from analyzer.store.queries import EventFilter
from schemas import percentiles
from schemas.documents.api import (
    Distribution,
    Excluded,
    ExcludedGroup,
    HistogramScheme,
    Percentiles,
)

SUB_BUCKETS = 1 << queries.SUB_BUCKET_BITS
RELATIVE_ERROR = 1 / (2 * SUB_BUCKETS)
LEVELS = percentiles.LEVELS
SCHEME: HistogramScheme = {
    "kind": "log-linear (fio-style)",
    "sub_buckets_per_power_of_two": SUB_BUCKETS,
    "exact_below_ns": SUB_BUCKETS,
    "relative_error_bound": RELATIVE_ERROR,
    "note": "a percentile read from the histogram is its bucket's midpoint, clamped to the "
    "bucket's observed min and max: within relative_error_bound of the exact order statistic",
}


# Runs never change once ready (a run's id is its file's hash), so a histogram of a
# run and filter can be kept: the second look at a run costs no scan at all.
_cache: OrderedDict[tuple, list[tuple]] = OrderedDict()
_cache_lock = threading.Lock()
CACHE_SIZE = 64


def clear_cache() -> None:
    """Forget every kept histogram (benchmarks time the first look again)."""
    with _cache_lock:
        _cache.clear()


def cached_count() -> int:
    return len(_cache)


def hist_rows(store: Reader, run_id: str, f: EventFilter, metric: str) -> list[tuple]:
    """(dev, op, stream, bucket, n, sum, min, max) rows of the run's `metric` latency.

    The run's whole histogram is grouped by device, op and stream: a filter on those
    alone is answered from it (pre-aggregated, see `prewarm`) without a scan. Size
    and time filters need a scan of their own.
    """
    whole = EventFilter(op=f.op, stream=f.stream, dev=f.dev) == f
    if not whole:
        return _cached(store, run_id, f, metric)
    rows = _cached(store, run_id, EventFilter(), metric)
    if f.is_any():
        return rows
    any_ = queries.ANY
    return [
        r
        for r in rows
        if (f.dev == any_ or r[0] == f.dev)
        and (f.op == any_ or r[1] == f.op)
        and (f.stream == any_ or r[2] == f.stream)
    ]


def _cached(store: Reader, run_id: str, f: EventFilter, metric: str) -> list[tuple]:
    key = (store.url.display(), run_id, f, metric)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    # The whole run's, built at ingest (DuckDB store): no scan at all.
    rows = event_histograms.stored(store, run_id, metric) if f.is_any() else None
    if rows is None:
        rows = queries.run(store, f"hist_{metric}", **f.params(run_id))
    with _cache_lock:
        _cache[key] = rows
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return rows


def prewarm(store: Reader, stop: threading.Event) -> int:
    """Build every visible run's histograms now, newest run first, so that a request
    later finds them made. Returns the runs done before `stop` was set."""
    done = 0
    for run in reversed(catalog.all_runs(store)):
        for metric in ("device", "queue"):
            if stop.is_set():
                return done
            _cached(store, run["id"], EventFilter(), metric)
        done += 1
    return done


@dataclass
class Hist:
    """Non-empty buckets, ascending: index, count, sum, min and max seen in each."""

    b: np.ndarray
    n: np.ndarray
    s: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def count(self) -> int:
        return int(self.n.sum())


def merge(rows: list[tuple]) -> Hist:
    """One histogram from (…, bucket, n, sum, min, max) rows of any groups."""
    if not rows:
        z = np.zeros(0, dtype=np.int64)
        return Hist(z, z, np.zeros(0), z, z)
    a = np.array([r[-5:] for r in rows], dtype=np.float64)
    b, inv = np.unique(a[:, 0].astype(np.int64), return_inverse=True)
    n = np.zeros(len(b), dtype=np.int64)
    s = np.zeros(len(b))
    lo = np.full(len(b), np.iinfo(np.int64).max)
    hi = np.zeros(len(b), dtype=np.int64)
    np.add.at(n, inv, a[:, 1].astype(np.int64))
    np.add.at(s, inv, a[:, 2])
    np.minimum.at(lo, inv, a[:, 3].astype(np.int64))
    np.maximum.at(hi, inv, a[:, 4].astype(np.int64))
    return Hist(b, n, s, lo, hi)


def bucket_edges(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The [low, high] values (ns, inclusive) that bucket indexes `b` hold."""
    b = np.asarray(b, dtype=np.int64)
    e = b // SUB_BUCKETS + 5
    width = np.left_shift(1, np.maximum(e - 6, 0))
    low = np.where(b < SUB_BUCKETS, b, (SUB_BUCKETS + b % SUB_BUCKETS) * width)
    high = np.where(b < SUB_BUCKETS, b, low + width - 1)
    return low, high


def bucket_of(v: int) -> int:
    """The bucket index of a latency, as the SQL computes it (for tests and readers)."""
    if v < SUB_BUCKETS:
        return v
    e = v.bit_length() - 1
    return (e - 5) * SUB_BUCKETS + (v >> (e - 6)) - SUB_BUCKETS


def representative(h: Hist) -> np.ndarray:
    low, high = bucket_edges(h.b)
    return np.clip((low + high) / 2, h.lo, h.hi)


def rank(n: int, q: float) -> int:
    # Rank ceil(n * q), 1-based, as the exact queries; the epsilon keeps 0.9 * 3000
    # from becoming 2700.0000000000005 and the rank 2701.
    return max(1, math.ceil(n * q - 1e-9))


def percentiles_from(h: Hist) -> dict[str, float]:
    n = h.count
    cum = np.cumsum(h.n)
    rep = representative(h)
    out = {name: float(rep[np.searchsorted(cum, rank(n, q))]) for q, name in LEVELS}
    out["max"] = float(h.hi[-1])
    return out


def summary(h: Hist, cdf_points: int) -> Distribution:
    """Count, mean, min/max, percentiles, histogram and CDF of one histogram."""
    n = h.count
    if n == 0:
        return {"count": 0, "mean_ns": None, "min_ns": None, "max_ns": None,
                "percentiles": None, "histogram": [], "cdf": []}  # fmt: skip
    low, high = bucket_edges(h.b)
    cum = np.cumsum(h.n)
    # The CDF at the largest value seen in each bucket is exact; thin it to the points asked.
    idx = np.unique(np.linspace(0, len(h.b) - 1, min(cdf_points, len(h.b))).round().astype(int))
    return {
        "count": n,
        "mean_ns": float(h.s.sum() / n),
        "min_ns": int(h.lo[0]),
        "max_ns": int(h.hi[-1]),
        "percentiles": cast(Percentiles, percentiles_from(h)),
        "histogram": [[int(a), int(b), int(c)] for a, b, c in zip(low, high, h.n, strict=True)],
        "cdf": [(int(h.hi[i]), float(cum[i] / n)) for i in idx],
    }


UNSEEN_WHY = (
    "flag complete_unseen: the kernel never reported these requests' completion; the "
    "recorder kept them with the reuse of their tag as an upper bound, so their device "
    "time is not measured and is left out of every latency figure and verdict"
)


def excluded(
    store: Reader,
    run_id: str,
    f: EventFilter,
    streams_only: set[int] | None = None,
    counted: list[tuple[int, int, int]] | None = None,
) -> Excluded:
    """The records of the selection left out of device time (complete_unseen);
    `counted`: unseen_count's rows where a query that read the events anyway
    counted them (the exact percentiles), so that they are not read again."""
    ops = schemas.op_names()
    names = stream_names(store, run_id)
    rows = counted
    if rows is None:
        rows = queries.run(store, "unseen_count", **f.params(run_id))
    groups: list[ExcludedGroup] = [
        {
            "op": int(op),
            "op_name": ops.get(int(op), str(op)),
            "stream": int(st),
            "stream_name": names.get(int(st), f"stream-{st}"),
            "count": int(n),
        }
        for op, st, n in rows
        if streams_only is None or int(st) in streams_only
    ]
    return {"complete_unseen": sum(g["count"] for g in groups), "why": UNSEEN_WHY, "groups": groups}
