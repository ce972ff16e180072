"""What the server answers, without HTTP: latency distributions, time series, heat maps
(Jetstress verdicts: verdict.py; run-vs-run comparisons: comparison.py; history: history.py).

Percentiles come from log-linear histograms built in SQL (fio's scheme: 64
sub-buckets per power of two), so a 10-million-event run is one GROUP BY, not a
sort. A value read from a bucket is its midpoint, clamped to the smallest and
largest latency really seen in it, so it is off by at most half a bucket:
1/128 (0.78 %) of the value; values under 64 ns are exact. Exact order statistics
are one query away (`exact=True`).

Bad input raises `BadInput` (the routes make it a 422); a run that does not exist
raises `IotapeError` from the catalog (a 404).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

import schemas
from analyzer.store import catalog, event_histograms, queries
from analyzer.store.interface import Store
from analyzer.store.queries import EventFilter
from iotape.errors import IotapeError
from schemas import percentiles

SUB_BUCKETS = 1 << queries.SUB_BUCKET_BITS
RELATIVE_ERROR = 1 / (2 * SUB_BUCKETS)
LEVELS = percentiles.LEVELS
SCHEME = {
    "kind": "log-linear (fio-style)",
    "sub_buckets_per_power_of_two": SUB_BUCKETS,
    "exact_below_ns": SUB_BUCKETS,
    "relative_error_bound": RELATIVE_ERROR,
    "note": "a percentile read from the histogram is its bucket's midpoint, clamped to the "
    "bucket's observed min and max: within relative_error_bound of the exact order statistic",
}
MAX_INTERVALS = 20_000


class BadInput(IotapeError):
    """A parameter that names nothing in this run, or values that contradict each other."""


# ------------------------------------------------------------------ filters


@dataclass(frozen=True)
class FilterArgs:
    """The filters as a user gives them: names or numbers, seconds."""

    op: str | None = None
    stream: str | None = None
    device: str | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    start_s: float | None = None
    end_s: float | None = None


def _code(value: str, names: dict[str, int], what: str) -> int:
    v = value.strip()
    if v in names:
        return names[v]
    if v.isdigit() and int(v) <= 255:
        return int(v)
    known = ", ".join(sorted(names, key=names.get))
    raise BadInput(f"{what} {value!r}: not one of {known} (or a number 0-255)")


def devices(store: Store, run_id: str) -> list[dict[str, Any]]:
    cols = ["dev", "name", "model", "firmware", "rotational", "logical_block_size"]
    cols += ["capacity_bytes", "partition_name", "partition_start_bytes"]
    return queries.records(store, "run_devices", cols, run_id=run_id)


def stream_names(store: Store, run_id: str) -> dict[int, str]:
    names = dict(schemas.stream_names())
    names.update(dict(queries.run(store, "run_streams", run_id=run_id)))
    return names


def resolve_filter(store: Store, run_id: str, a: FilterArgs) -> EventFilter:
    """Names to ids for this run (streams and devices are per run); checks ranges."""
    f: dict[str, int] = {}
    if a.op is not None:
        f["op"] = _code(a.op, {v: k for k, v in schemas.op_names().items()}, "op")
    if a.stream is not None:
        names = {v: k for k, v in stream_names(store, run_id).items()}
        f["stream"] = _code(a.stream, names, "stream")
    if a.device is not None:
        f["dev"] = _device(store, run_id, a.device)
    lo = a.min_bytes if a.min_bytes is not None else 0
    hi = a.max_bytes if a.max_bytes is not None else queries.MAX_BYTES
    if lo > hi:
        raise BadInput(f"min_bytes {lo} is more than max_bytes {hi}")
    t_from = round(a.start_s * 1e9) if a.start_s is not None else 0
    t_to = round(a.end_s * 1e9) if a.end_s is not None else queries.MAX_NS
    if t_from > t_to:
        raise BadInput(f"start {a.start_s} s is after end {a.end_s} s")
    return EventFilter(min_bytes=lo, max_bytes=hi, t_from_ns=t_from, t_to_ns=t_to, **f)


def _device(store: Store, run_id: str, ref: str) -> int:
    devs = devices(store, run_id)
    for d in devs:
        if ref in (d["name"], d["partition_name"]) and ref:
            return d["dev"]
    major, sep, minor = ref.partition(":")
    if sep and major.isdigit() and minor.isdigit() and int(major) < 4096 and int(minor) < 1 << 20:
        return int(major) << 20 | int(minor)
    known = ", ".join(d["name"] for d in devs) or "none recorded"
    raise BadInput(f"device {ref!r}: not a device of this run ({known}); or give MAJOR:MINOR")


def describe_filter(f: EventFilter) -> dict[str, Any]:
    """The filter as applied, for the response: what the numbers cover."""
    out: dict[str, Any] = {}
    for k in ("op", "stream", "dev"):
        if getattr(f, k) != queries.ANY:
            out[k] = getattr(f, k)
    if f.min_bytes:
        out["min_bytes"] = f.min_bytes
    if f.max_bytes != queries.MAX_BYTES:
        out["max_bytes"] = f.max_bytes
    if f.t_from_ns:
        out["start_s"] = f.t_from_ns / 1e9
    if f.t_to_ns != queries.MAX_NS:
        out["end_s"] = f.t_to_ns / 1e9
    return out


# ------------------------------------------------------------------ histograms

# Runs never change once ready (a run's id is its file's hash), so a histogram of a
# run and filter can be kept: the second look at a run costs no scan at all.
_cache: OrderedDict[tuple, list[tuple]] = OrderedDict()
_cache_lock = threading.Lock()
CACHE_SIZE = 64


def hist_rows(store: Store, run_id: str, f: EventFilter, metric: str) -> list[tuple]:
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


def _cached(store: Store, run_id: str, f: EventFilter, metric: str) -> list[tuple]:
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


def prewarm(store: Store, stop: threading.Event) -> int:
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


def _rank(n: int, q: float) -> int:
    # Rank ceil(n * q), 1-based, as the exact queries; the epsilon keeps 0.9 * 3000
    # from becoming 2700.0000000000005 and the rank 2701.
    return max(1, math.ceil(n * q - 1e-9))


def percentiles_from(h: Hist) -> dict[str, float]:
    n = h.count
    cum = np.cumsum(h.n)
    rep = representative(h)
    out = {name: float(rep[np.searchsorted(cum, _rank(n, q))]) for q, name in LEVELS}
    out["max"] = float(h.hi[-1])
    return out


def summary(h: Hist, cdf_points: int) -> dict[str, Any]:
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
        "percentiles": percentiles_from(h),
        "histogram": [[int(a), int(b), int(c)] for a, b, c in zip(low, high, h.n, strict=True)],
        "cdf": [[int(h.hi[i]), float(cum[i] / n)] for i in idx],
    }


# ------------------------------------------------------------------ latency


def latency(
    store: Store, run_id: str, f: EventFilter, exact: bool = False, cdf_points: int = 200
) -> dict[str, Any]:
    """Device and queue time: overall and per op and stream."""
    ops = schemas.op_names()
    streams = stream_names(store, run_id)
    out: dict[str, Any] = {}
    for metric in ("device", "queue"):
        rows = hist_rows(store, run_id, f, metric)
        groups: dict[tuple[int, int], list[tuple]] = {}
        for r in rows:
            groups.setdefault((r[1], r[2]), []).append(r)
        overall = summary(merge(rows), cdf_points)
        per = [
            {
                "op": op,
                "op_name": ops.get(op, str(op)),
                "stream": st,
                "stream_name": streams.get(st, f"stream-{st}"),
                **summary(merge(g), cdf_points),
            }
            for (op, st), g in sorted(groups.items())
        ]
        if exact:
            _exact_into(store, run_id, f, metric, overall, per)
        out[metric] = {"all": overall, "groups": per}
    return {
        "method": "exact" if exact else "histogram",
        "histogram_scheme": SCHEME,
        "units": "ns",
        "device_time": "complete - issue (at the device)",
        "queue_time": "issue - queue (in the block layer before dispatch)",
        **out,
    }


def _exact_into(store, run_id, f, metric, overall: dict, per: list[dict]) -> None:
    """Replace histogram percentiles by exact order statistics."""
    cols = ["op", "stream", "n", "s", "lo", "hi", *(n for _, n in queries.EXACT_LEVELS)]
    names = [n for _, n in LEVELS]
    p = f.params(run_id)
    rows = queries.records(store, f"exact_{metric}_all", cols, **p)
    rows += queries.records(store, f"exact_{metric}_groups", cols, **p)
    exact = {(r["op"], r["stream"]): r for r in rows}
    for target, key in [(overall, (-1, -1))] + [(g, (g["op"], g["stream"])) for g in per]:
        r = exact.get(key)
        if r and r["n"]:
            pcts = {
                name: float(r[col])
                for name, (_, col) in zip(names, queries.EXACT_LEVELS, strict=True)
            }
            target["percentiles"] = {**pcts, "max": float(r["hi"])}


# ------------------------------------------------------------------ time series


def timeseries(store: Store, run: dict, f: EventFilter, interval_s: float | None) -> dict[str, Any]:
    """IOPS, MB/s, mean queue depth and device latency per interval of completion time."""
    duration = max(int(run["duration_ns"]), 1)
    if interval_s is None:
        # About 200 points, on a round number of milliseconds.
        interval_ns = max(1_000_000, round(duration / 200 / 1e6) * 1_000_000)
    else:
        interval_ns = round(interval_s * 1e9)
        if interval_ns < 1000:
            raise BadInput(f"interval {interval_s} s: the shortest is 1 µs (0.000001)")
    span = min(duration, f.t_to_ns) - min(f.t_from_ns, duration)
    if span // interval_ns + 1 > MAX_INTERVALS:
        raise BadInput(
            f"interval {interval_ns / 1e9:g} s gives more than {MAX_INTERVALS} points over "
            f"{span / 1e9:g} s; give a longer interval or a shorter time window"
        )
    cols = ["k", "ios", "bytes", "nlat", "slat", "max", "p50", "p99"]
    rows = queries.records(store, "timeseries", cols, step=interval_ns, **f.params(run["id"]))
    by_k = {r["k"]: r for r in rows}
    points = []
    secs = interval_ns / 1e9
    if rows:
        for k in range(rows[0]["k"], rows[-1]["k"] + 1):
            r = by_k.get(k)
            if r is None:
                points.append({"t_s": k * secs, "iops": 0.0, "mb_s": 0.0, "queue_depth": 0.0,
                               "lat_mean_ns": None, "p50_ns": None, "p99_ns": None,
                               "max_ns": None})  # fmt: skip
                continue
            has = r["nlat"] > 0
            points.append(
                {
                    "t_s": k * secs,
                    "iops": r["ios"] / secs,
                    "mb_s": r["bytes"] / secs / 1e6,
                    # Little's law: time spent at the device per second of wall time.
                    "queue_depth": (r["slat"] or 0) / interval_ns,
                    "lat_mean_ns": r["slat"] / r["nlat"] if has else None,
                    "p50_ns": r["p50"] if has else None,
                    "p99_ns": r["p99"] if has else None,
                    "max_ns": r["max"] if has else None,
                }
            )
    return {
        "interval_s": secs,
        "queue_depth": "mean requests at the device (Little's law: device time / interval)",
        "points": points,
    }


# ------------------------------------------------------------------ heat map


def heatmap(
    store: Store, run_id: str, f: EventFilter, time_bins: int, offset_bins: int
) -> dict[str, Any]:
    """Requests and bytes over (completion time x offset), one grid per device."""
    names = {d["dev"]: d["name"] for d in devices(store, run_id)}
    cols = ["dev", "ios", "t_lo", "t_hi", "o_lo", "o_hi"]
    out = []
    for ext in queries.records(store, "extent_by_dev", cols, **f.params(run_id)):
        t_step = max(1, -(-(ext["t_hi"] - ext["t_lo"] + 1) // time_bins))
        o_step = max(1, -(-(ext["o_hi"] - ext["o_lo"] + 1) // offset_bins))
        p = {**f.params(run_id), "dev": ext["dev"]}
        cells = queries.run(
            store, "heatmap", t0=ext["t_lo"], t_step=t_step, o0=ext["o_lo"], o_step=o_step, **p
        )
        out.append(
            {
                "dev": ext["dev"],
                "name": names.get(ext["dev"], f"{ext['dev'] >> 20}:{ext['dev'] & 0xFFFFF}"),
                "ios": ext["ios"],
                "t0_s": ext["t_lo"] / 1e9,
                "t_step_s": t_step / 1e9,
                "offset0": ext["o_lo"],
                "offset_step": o_step,
                "time_bins": time_bins,
                "offset_bins": offset_bins,
                "cells": [[int(a), int(b), int(c), int(d)] for a, b, c, d in cells],
            }
        )
    return {"cells": "[time bin, offset bin, requests, bytes]", "devices": out}


def run_summary(store: Store, run: dict, f: EventFilter | None = None) -> dict[str, Any]:
    """A catalog entry for the API: the run, its devices and streams, and what matches `f`."""
    out = {k: v for k, v in run.items() if k not in ("header", "version", "state")}
    out["devices"] = devices(store, run["id"])
    out["streams"] = [
        {"stream": k, "name": v} for k, v in sorted(stream_names(store, run["id"]).items())
    ]
    if f is not None and not f.is_any():
        ios, nbytes = queries.run(store, "filtered_totals", **f.params(run["id"]))[0]
        out["matching"] = {"ios": int(ios), "bytes": int(nbytes or 0), "filter": describe_filter(f)}
    return out


def find_run(store: Store, ref: str) -> dict:
    """The visible run named by id, unique id prefix or name (IotapeError if none)."""
    return catalog.resolve(store, ref)
