"""A run's latency histograms, built while its events are written (DuckDB store).

The server's first look at a run is its whole histogram per device, op and stream
(`queries` hist_device / hist_queue, analyses.hist_rows). Built here from the
row groups as they are written, in numpy and Arrow's hash aggregation, it is kept
in `run_histograms` and read back in place of the scan: the same rows the query
gives. The bucket's floor(log2 v) is taken from the float exponent, exact; the
query's float log2 rounds up just below a power of two from about 2^48 ns (three
days) on, so a run with a latency past LIMIT_NS gets no stored histogram and is
scanned as before.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa

import schemas
from analyzer.store.interface import Reader, StoreError
from analyzer.store.queries import MAX_NS, METRICS, duckdb_sql

TABLE = duckdb_sql.HISTOGRAMS
# The (later, issue, earlier) columns of each metric, as queries.METRICS computes it.
_SPANS = {"device": ("ts_complete_ns", "ts_issue_ns"), "queue": ("ts_issue_ns", "ts_queue_ns")}
assert set(_SPANS) == set(METRICS)
_NAMES = list(_SPANS)
# A row that says "built" for runs with no known latency at all. Versioned: runs
# stored before complete_unseen records were left out of device time have "built"
# and are scanned instead, by the query that leaves them out.
BUILT = "built-v2"
UNSEEN = np.uint16(1 << schemas.bits("flag")["complete_unseen"])
LIMIT_NS = 1 << 47


LIBRARY = Path(__file__).resolve().parent / "build" / "libhist.so"
# Table entries of the C path to start with (a real capture has ~1,200 keys, a
# synthetic trace of every size, op and stream ~34,000), doubled while a row group
# has more, up to _MAX_CAP; past it, numpy's way.
_CAP = 1 << 16
_MAX_CAP = 1 << 22
_FULL = object()


@cache
def _lib() -> ctypes.CDLL | None:
    """histograms.c (`make native`), or None: numpy's way then, the same rows
    (IOTAPE_HIST_PURE=1 takes it always: the reference the tests hold C to)."""
    if os.environ.get("IOTAPE_HIST_PURE") or not LIBRARY.exists():
        return None
    try:
        so = ctypes.CDLL(str(LIBRARY))
    except OSError:
        return None
    p, i64, u64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64
    so.iot_hist_add.argtypes = [i64, p, p, p, p, p, p, p, ctypes.c_uint16, i64, u64, u64]
    so.iot_hist_add.argtypes += [p, p, p, p, p, i64, i64, p]
    so.iot_hist_add.restype = i64
    return so


def _partial_c(so: ctypes.CDLL, t: pa.Table) -> pa.Table | object | None:
    """`partial` in C, a record batch at a time (no copy of the columns); _FULL
    where the keys do not fit a table of _MAX_CAP."""
    cap = _CAP
    while cap <= _MAX_CAP:
        got = _partial_cap(so, t, cap)
        if got is not _FULL:
            return got
        cap *= 2
    return _FULL


def _partial_cap(so: ctypes.CDLL, t: pa.Table, cap: int) -> pa.Table | object | None:
    keys = np.zeros(cap, np.uint64)
    n, s, lo, hi = (np.zeros(cap, np.int64) for _ in range(4))
    slots = np.full(2 * cap, -1, np.int64)
    out = [a.ctypes.data for a in (keys, n, s, lo, hi)]
    batches = t.to_batches()
    cols = [{c: np.ascontiguousarray(b.column(c).to_numpy()) for c in _COLUMNS} for b in batches]
    used = 0
    for i, (later, earlier) in enumerate(_SPANS.values()):
        for c in cols:
            flags = c["flags"].ctypes.data if later == "ts_complete_ns" else None
            used = so.iot_hist_add(
                len(c["dev"]), c["dev"].ctypes.data, c["op"].ctypes.data,
                c["stream"].ctypes.data, c[later].ctypes.data, c[earlier].ctypes.data,
                c["ts_complete_ns"].ctypes.data, flags, int(UNSEEN), i, MAX_NS, LIMIT_NS,
                *out, used, cap, slots.ctypes.data,
            )  # fmt: skip
            if used == -1:
                return None
            if used == -2:
                return _FULL
    return pa.table({"k": keys[:used], "n": n[:used], "s": s[:used], "lo": lo[:used],
                     "hi": hi[:used]})  # fmt: skip


_COLUMNS = ("dev", "op", "stream", "flags", "ts_queue_ns", "ts_issue_ns", "ts_complete_ns")


def partial(t: pa.Table) -> pa.Table | None:
    """One row group's histograms: a key (dev, op, stream, metric, bucket packed in 64
    bits) with count, sum, min and max; None past LIMIT_NS."""
    so = _lib()
    if so is not None:
        got = _partial_c(so, t)
        if got is not _FULL:
            return cast(pa.Table | None, got)
    base = (
        (t["dev"].to_numpy().astype(np.uint64) << np.uint64(32))
        | (t["op"].to_numpy().astype(np.uint64) << np.uint64(24))
        | (t["stream"].to_numpy().astype(np.uint64) << np.uint64(16))
    )
    # The query's unfiltered bounds: times up to MAX_NS (bytes, a u32, always pass).
    seen = t["ts_complete_ns"].to_numpy() <= np.uint64(MAX_NS)
    keys, vals = [], []
    for i, (later, earlier) in enumerate(_SPANS.values()):
        hi = t[later].to_numpy()
        lo = t[earlier].to_numpy()
        ok = seen & (lo > 0) & (hi >= lo)
        if later == "ts_complete_ns":
            # An upper bound, not a measurement (queries.METRICS).
            ok &= (t["flags"].to_numpy() & UNSEEN) == 0
        # Most row groups keep every row: no gathered copies then.
        every = bool(ok.all())
        d = hi - lo if every else hi[ok] - lo[ok]
        if len(d) and d.max() >= LIMIT_NS:
            return None
        v = d.view(np.int64)  # below LIMIT_NS: the same value
        # floor(log2 v): the exponent bits of v as a double (exact below 2^53).
        e = np.maximum(v, 1).astype(np.float64).view(np.int64)
        e >>= 52
        e -= 1023
        # The bucket: v below 64, else (e - 5) * 64 + (v >> (e - 6)) - 64 (e >= 6).
        sh = e - 6
        np.maximum(sh, 0, out=sh)
        b = v >> sh
        e -= 6
        e <<= 6
        b += e
        small = v < 64
        b[small] = v[small]
        # Buckets stay under 2^12 for any int64; bit 15 tells the metrics apart.
        k = b.view(np.uint64)
        k |= base if every else base[ok]
        k |= np.uint64(i << 15)
        keys.append(k)
        vals.append(v)
    g = pa.table({"k": np.concatenate(keys), "v": np.concatenate(vals)})
    return _agg(g, "v", ("count", "sum", "min", "max"))


def fold(parts: list[pa.Table | None]) -> list[pa.Table | None]:
    """Row groups' partials so far as one: held unfolded, a long run's partials grew
    with its length (about 2 MiB per row group of half a million events)."""
    if any(p is None for p in parts):
        return [None]
    return [_agg2(pa.concat_tables(parts))] if parts else []


def merged(parts: list[pa.Table | None], run_id: str) -> pa.Table | None:
    """The run's rows for `run_histograms` from the row groups' partials (None if one
    of them is)."""
    if any(p is None for p in parts):
        return None
    if parts:
        t = pa.concat_tables(parts)
        t = _agg2(t)
        k = t["k"].to_numpy()
    else:
        t = None
        k = np.zeros(0, dtype=np.uint64)
    metric = np.array(_NAMES, dtype=object)[((k >> np.uint64(15)) & np.uint64(1)).astype(np.int64)]
    cols: dict[str, Any] = {
        "run_id": [run_id] * len(k) + [run_id],
        "metric": [*metric.tolist(), BUILT],
        "dev": np.append((k >> np.uint64(32)).astype(np.int64), -1),
        "op": np.append(((k >> np.uint64(24)) & np.uint64(0xFF)).astype(np.int64), -1),
        "stream": np.append(((k >> np.uint64(16)) & np.uint64(0xFF)).astype(np.int64), -1),
        "b": np.append((k & np.uint64(0x7FFF)).astype(np.int64), -1),
    }
    for c in ("n", "s", "lo", "hi"):
        cols[c] = np.append(t[c].to_numpy() if t is not None else np.zeros(0, np.int64), 0)
    return pa.table(cols)


def _agg(t: pa.Table, col: str, fns: tuple[str, ...]) -> pa.Table:
    r = t.group_by("k", use_threads=False).aggregate([(col, f) for f in fns])
    return pa.table(
        {
            "k": r["k"],
            "n": r[f"{col}_count"],
            "s": r[f"{col}_sum"],
            "lo": r[f"{col}_min"],
            "hi": r[f"{col}_max"],
        }
    )


def _agg2(t: pa.Table) -> pa.Table:
    """Partials of the same key as one (sums, least and greatest), keys in order of
    first sight as Arrow's group_by gives them. In numpy: a few thousand keys, and
    Table.group_by imports pyarrow.acero, .dataset and .compute (~40 ms of a
    command's start) for them."""
    k = t["k"].to_numpy()
    order = np.argsort(k, kind="stable")
    ks = k[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]]) if len(ks) else np.zeros(0, np.intp)
    cols: dict[str, np.ndarray] = {"k": ks[starts]}
    for c, f in (("n", np.add), ("s", np.add), ("lo", np.minimum), ("hi", np.maximum)):
        v = t[c].to_numpy()[order]
        cols[c] = f.reduceat(v, starts) if len(v) else v
    seen = np.argsort(order[starts], kind="stable")  # each key's first row
    return pa.table({c: v[seen] for c, v in cols.items()})


def stored(store: Reader, run_id: str, metric: str) -> list[tuple] | None:
    """The hist query's rows for the run as built at ingest; None where none were (a
    ClickHouse store, a run with latencies past LIMIT_NS, a store from before)."""
    if not store.has_histograms:
        return None
    try:
        found = store.rows(
            duckdb_sql.HISTOGRAMS_READ, {"run_id": run_id, "metric": metric, "built": BUILT}
        )
    except StoreError:
        return None  # no such table: a store from before, opened read-only
    if not any(r[0] == BUILT for r in found):
        return None
    return [tuple(r[1:]) for r in found if r[0] == metric]
