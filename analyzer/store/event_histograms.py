"""A run's latency histograms, built while its events are written (DuckDB store).

The server's first look at a run is its whole histogram per device, op and stream
(`queries` hist_device / hist_queue, analyses.hist_rows). Built here from the
row groups as they are written (histograms.c, or numpy), it is kept in
`run_histograms` and read back in place of the scan: the same rows the query
gives. The bucket's floor(log2 v) is taken from the float exponent, exact; the
query's float log2 rounds up just below a power of two from about 2^48 ns (three
days) on, so a run with a latency past LIMIT_NS gets no stored histogram and is
scanned as before.

The rows go to the store keyed: a key (dev, op, stream, metric, bucket packed in
64 bits) with count, sum, min and max, in key order; the store's insert unpacks
the key (duckdb_sql.histograms_insert).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pyarrow as pa

import schemas
from analyzer.store import native
from analyzer.store.event_batches import as_arrow, numbers
from analyzer.store.interface import Reader, StoreError
from analyzer.store.queries import MAX_NS, METRICS, duckdb_sql

TABLE = duckdb_sql.HISTOGRAMS
# The (later, issue, earlier) columns of each metric, as queries.METRICS computes it.
_SPANS = {"device": ("ts_complete_ns", "ts_issue_ns"), "queue": ("ts_issue_ns", "ts_queue_ns")}
assert set(_SPANS) == set(METRICS)
# The metric's name by its bit in the key (bit 15).
NAMES = list(_SPANS)
# A row that says "built" for runs with no known latency at all. Versioned: runs
# stored before complete_unseen records were left out of device time have "built"
# and are scanned instead, by the query that leaves them out.
BUILT = "built-v2"
UNSEEN = np.uint16(1 << schemas.bits("flag")["complete_unseen"])
LIMIT_NS = 1 << 47
# Row groups' partials on numpy's way are folded into one every this many, so that
# what a run holds until its end does not grow with its length.
FOLD_PARTIALS = 8
# The cells one writer's C table holds before it sets its rows aside (a capture
# has ~1,200 keys, a synthetic trace of every size, op and stream ~34,000: 1-2 MiB).
MAX_BYTES = 32 << 20
PURE = "IOTAPE_HIST_PURE"


class Gathered:
    """One writer thread's histograms of a run, its row groups added as they are
    written (add() is not to be shared between threads; merged() joins them). In
    C, one table of cells for the whole run (past MAX_BYTES, its rows so far are
    set aside as a partial and it starts again); numpy's way, each row group's
    partial, folded every FOLD_PARTIALS. close() frees the C table."""

    def __init__(self) -> None:
        self.so = native.lib(PURE)
        self.h: int | None = None
        if self.so is not None:
            self.h = self.so.iot_hist_open(LIMIT_NS, MAX_BYTES)
            if not self.h:
                raise MemoryError("latency histograms")
        self.parts: list[pa.Table | None] = []
        self.past = False  # a latency at or past LIMIT_NS: no histogram for the run

    def add(self, t: pa.Table) -> None:
        if self.past or not t.num_rows:
            return
        if self.h is None:
            self.parts.append(partial(t))
            self.past = self.parts[-1] is None
            if len(self.parts) >= FOLD_PARTIALS and not self.past:
                self.parts = [_concat(self.parts)]
            return
        for b in t.to_batches():
            c = {name: np.ascontiguousarray(numbers(b.column(name))) for name in _COLUMNS}
            for i, (later, earlier) in enumerate(_SPANS.values()):
                self._add_c(c, i, later, earlier)
                if self.past:
                    return

    def _add_c(self, c: dict[str, np.ndarray], metric: int, later: str, earlier: str) -> None:
        assert self.so is not None
        names = ["dev", "op", "stream", later, earlier, "ts_complete_ns"]
        flags = "flags" if later == "ts_complete_ns" else None
        done, at, n = ctypes.c_int64(0), 0, len(c["dev"])
        while True:
            ptrs = [c[k].ctypes.data + at * c[k].itemsize for k in names]
            got = self.so.iot_hist_add(
                self.h, n - at, *ptrs,
                c[flags].ctypes.data + 2 * at if flags else None, int(UNSEEN), metric,
                MAX_NS, ctypes.byref(done),
            )  # fmt: skip
            if got == -2:  # its cells at MAX_BYTES: the rows so far set aside
                self.parts.append(_rows_c(self.so, self.h))
                self.so.iot_hist_reset(self.h)
                at += done.value
                continue
            if got == -1:
                self.past = True
            elif got < 0:
                raise MemoryError("latency histograms")
            return

    def close(self) -> None:
        h, self.h = self.h, None
        if h is not None and self.so is not None:
            self.so.iot_hist_close(h)


def merged(gathered: list[Gathered]) -> pa.Table | None:
    """The run's keyed rows (k, n, s, lo, hi) in key order from what each writer
    gathered; None if a latency was past LIMIT_NS."""
    if any(g.past for g in gathered):
        return None
    parts = [p for g in gathered for p in g.parts]
    tables = [g for g in gathered if g.h is not None]
    if tables:
        so, h = tables[0].so, tables[0].h
        assert so is not None
        for g in tables[1:]:
            if so.iot_hist_merge(h, g.h) < 0:
                raise MemoryError("latency histograms")
        whole = _rows_c(so, h)
        # Rows set aside at MAX_BYTES (a run of very many keys): added up in numpy.
        return _concat([*parts, whole]) if parts else whole
    return keyed(parts)


def _rows_c(so: ctypes.CDLL, h: int | None) -> pa.Table:
    n = so.iot_hist_keys(h)
    k = np.empty(n, np.uint64)
    cols = [np.empty(n, np.int64) for _ in range(4)]
    if so.iot_hist_rows(h, k.ctypes.data, *(c.ctypes.data for c in cols)) != n:
        raise MemoryError("latency histograms")
    return _table(k, *cols)


def keyed(parts: list[pa.Table | None]) -> pa.Table | None:
    """Row groups' partials (numpy's way) as the run's keyed rows in key order; None
    if one of them is."""
    if any(p is None for p in parts):
        return None
    if not parts:
        return _table(np.zeros(0, np.uint64), *(np.zeros(0, np.int64) for _ in range(4)))
    return _concat(parts)


def _concat(parts: list) -> pa.Table:
    t = pa.concat_tables(parts)
    return _agg2(*(t[c].to_numpy() for c in ("k", "n", "s", "lo", "hi")))


def _table(k: np.ndarray, n: np.ndarray, s: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> pa.Table:
    """The keyed rows as Arrow, the arrays' buffers as they are (pa.table of numpy
    arrays would import numpy.ma, ~10 ms, to look for masks)."""
    cols = {"k": k, "n": n, "s": s, "lo": lo, "hi": hi}
    return pa.table({c: as_arrow(np.ascontiguousarray(v)) for c, v in cols.items()})


_COLUMNS = ("dev", "op", "stream", "flags", "ts_queue_ns", "ts_issue_ns", "ts_complete_ns")


def partial(t: pa.Table) -> pa.Table | None:
    """One row group's histograms: a key (dev, op, stream, metric, bucket packed in 64
    bits) with count, sum, min and max; None past LIMIT_NS."""
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
    v = np.concatenate(vals)
    return _agg2(np.concatenate(keys), np.ones(len(v), np.int64), v, v, v)


def _agg2(k: np.ndarray, n: np.ndarray, s: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> pa.Table:
    """Rows of the same key as one (counts and sums added, least and greatest), in
    key order. In numpy: Table.group_by imports pyarrow.acero, .dataset and .compute
    (~40 ms of a command's start)."""
    order = np.argsort(k, kind="stable")
    ks = k[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]]) if len(ks) else np.zeros(0, np.intp)
    out = [ks[starts]]
    for v, f in ((n, np.add), (s, np.add), (lo, np.minimum), (hi, np.maximum)):
        out.append(f.reduceat(v[order], starts) if len(v) else v.astype(np.int64))
    return _table(*out)


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
