"""Exact order statistics of a run's latencies, selected inside histogram buckets.

The run's log-linear histogram (built at ingest, or by the filter's GROUP BY) holds
each bucket's exact count, min and max. The value of rank k is in the bucket where
the running count first reaches k, at position j = k - (count below) among that
bucket's values; where j is 1 or the bucket's count it is the bucket's min or max,
already known. Otherwise one read of the events keeps only the values inside
those buckets' [min, max] (a few per cent of them) and numpy selects rank j there.

Why: DuckDB's `quantile_disc` gathers every value into its aggregate state: over
10 M events that gathering, not the read (0.08 s), is most of its ~0.8 s, and the
store asks it for four statistics (two metrics, overall and per op and stream).

The answer is the same order statistic `quantile_disc` gives (rank `rank(n, q)`,
held to DuckDB's by tests/analyzer/test_exact_select.py), on either engine. Where
the histogram and the events disagree (a count inside a bucket that is not the
histogram's), or the store reads no Arrow (a bare `Reader`), `select` returns None
and the caller runs the exact query instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzer.analyses.histograms import Hist, merge
from analyzer.store import queries
from analyzer.store.interface import Reader
from analyzer.store.queries import EventFilter

ALL = (-1, -1)
Key = tuple[int, int]


def rank(n: int, q: float) -> int:
    """The 1-based rank `quantile_disc` takes among n values: ceil(n·q), at least 1,
    computed as DuckDB does (n - floor(n - n·q), in doubles)."""
    return max(1, n - math.floor(n - float(n) * q))


@dataclass(frozen=True)
class _Target:
    """A level whose value is the j-th smallest of group's values in [lo, hi]."""

    metric: str
    group: Key
    level: str
    bucket: int
    lo: int
    hi: int
    j: int
    count: int


def _levels(metric: str, group: Key, h: Hist, row: dict[str, Any], todo: list[_Target]) -> None:
    """Fill row's levels that the histogram alone gives; the rest go to `todo`."""
    cum = np.cumsum(h.n)
    total = int(cum[-1])
    row["n"], row["hi"] = total, int(h.hi[-1])
    for q, name in queries.EXACT_LEVELS:
        k = rank(total, q)
        i = int(np.searchsorted(cum, k))
        n, lo, hi = int(h.n[i]), int(h.lo[i]), int(h.hi[i])
        j = k - (int(cum[i]) - n)
        if j == 1 or lo == hi:
            row[name] = lo
        elif j == n:
            row[name] = hi
        else:
            row[name] = None
            todo.append(_Target(metric, group, name, int(h.b[i]), lo, hi, j, n))


def grouped(rows: list[tuple]) -> dict[Key, Hist]:
    """Histogram rows ((dev, op, stream, bucket, n, sum, min, max)) merged overall
    (ALL; absent without rows) and per (op, stream), in key order after ALL."""
    groups: dict[Key, list[tuple]] = {}
    for r in rows:
        groups.setdefault((int(r[1]), int(r[2])), []).append(r)
    out = {ALL: merge(rows)} if rows else {}
    out.update((k, merge(g)) for k, g in sorted(groups.items()))
    return out


def select(
    store: Reader,
    run_id: str,
    f: EventFilter,
    hists: dict[str, list[tuple]],
    merged: dict[str, dict[Key, Hist]] | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], list[tuple[int, int, int]] | None] | None:
    """Each metric's exact rows (as the `exact_latency` query gives them: op, stream,
    n, hi and the levels; (-1, -1) for all) from its histogram rows `hists[metric]`
    ((dev, op, stream, bucket, n, sum, min, max)), and unseen_count's rows where the
    events were read (else None). None where this cannot answer exactly. `merged`:
    `grouped(hists[metric])` for each metric, where the caller has it already."""
    arrow = getattr(store, "arrow", None)
    if arrow is None:
        return None
    out: dict[str, list[dict[str, Any]]] = {}
    todo: list[_Target] = []
    for metric in ("device", "queue"):
        by_key = merged[metric] if merged is not None else grouped(hists[metric])
        rows = []
        for key, h in [(ALL, by_key.get(ALL)), *((k, v) for k, v in by_key.items() if k != ALL)]:
            row: dict[str, Any] = {"op": key[0], "stream": key[1]}
            if h is not None and len(h.n):
                _levels(metric, key, h, row, todo)
            else:
                row["n"] = 0
            rows.append(row)
        out[metric] = rows
    if not todo:
        return out, None
    found = _read(arrow, store.dialect, run_id, f, todo)
    if found is None:
        return None
    values, unseen = found
    for metric, rows in out.items():
        for row in rows:
            for t in todo:
                if (t.metric, t.group) == (metric, (row["op"], row["stream"])):
                    row[t.level] = values[t]
    return out, unseen


def _read(
    arrow: Any, dialect: str, run_id: str, f: EventFilter, todo: list[_Target]
) -> tuple[dict[_Target, int], list[tuple[int, int, int]]] | None:
    """One read of the events: the values inside the targets' buckets, and the
    complete_unseen records per (op, stream); None where a bucket's count differs."""
    if f.is_any():
        # The whole run: the histograms are the stored ones, of every event.
        query, params = "exact_candidates_run", {"run_id": run_id}
    else:
        query, params = "exact_candidates", f.params(run_id)
    tab = arrow(queries.QUERIES[query].sql(dialect), params)
    bins = {m: _bins([t for t in todo if t.metric == m]) for m in ("device", "queue")}
    # A record batch at a time (the engine's chunks, ~100 k rows, zero-copy): columns
    # gathered whole and each pass's result over 10 M rows were fresh arrays of up
    # to 80 MB, whose page faults took most of the time.
    found: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {m: [] for m in bins}
    unseen_keys = []
    for b in tab.to_batches():
        op, st = (b.column(i).to_numpy() for i in (0, 1))
        for col, metric in ((2, "device"), (3, "queue")):
            v = b.column(col).to_numpy()
            idx = np.flatnonzero(_near(*bins[metric], v))
            found[metric].append((v[idx], _group(op[idx], st[idx])))
        u = np.asarray(b.column(4).to_numpy(zero_copy_only=False), dtype=bool)
        if u.any():
            unseen_keys.append(_key(op[u], st[u]))
    kept = {m: _joined(parts) for m, parts in found.items()}
    ks, ns = np.unique(np.concatenate(unseen_keys or [np.zeros(0, np.int64)]), return_counts=True)
    unseen = [(k >> 32, k & 0xFFFFFFFF, n) for k, n in zip(ks.tolist(), ns.tolist(), strict=True)]
    values: dict[_Target, int] = {}
    for metric, (v, k) in kept.items():
        # Kept values by group (one sort of the few kept, by 16-bit keys: numpy's
        # radix sort), so that each group's targets look at its own values only.
        order = np.argsort(k, kind="stable")
        v, k = v[order], k[order]
        for t in (t for t in todo if t.metric == metric):
            if t.group == ALL:
                mine = v
            else:
                g = np.uint16(t.group[0] << 8 | t.group[1])  # k's type: no cast of k
                mine = v[np.searchsorted(k, g) : np.searchsorted(k, g, side="right")]
            sel = mine[(mine >= t.lo) & (mine <= t.hi)]
            if len(sel) != t.count:
                return None  # the histogram is not of these events: ask DuckDB
            values[t] = int(np.partition(sel, t.j - 1)[t.j - 1])
    return values, unseen


def _key(op: np.ndarray, st: np.ndarray) -> np.ndarray:
    return op.astype(np.int64) << 32 | st.astype(np.int64)


def _group(op: np.ndarray, st: np.ndarray) -> np.ndarray:
    """(op, stream), both 8-bit columns, as one 16-bit key."""
    return op.astype(np.uint16) << 8 | st


def _joined(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.uint16)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _bins(todo: list[_Target]) -> tuple[np.ndarray, int]:
    """Linear bins (at most 2^16 + 2) up to the largest hi: whether each may hold a
    value inside one of the targets' [lo, hi] (bin = value >> shift), and the shift."""
    if not todo:
        return np.zeros(1, dtype=bool), 0
    top = max(t.hi for t in todo)
    shift = max(0, top.bit_length() - 16)
    # The last bin stands for every value above top and, by Python indexing, for the
    # unknown ones (-1 >> shift is -1): never near.
    near = np.zeros((top >> shift) + 2, dtype=bool)
    for t in todo:
        near[t.lo >> shift : (t.hi >> shift) + 1] = True
    return near, shift


def _near(near: np.ndarray, shift: int, v: np.ndarray) -> np.ndarray:
    """Whether each value may be inside one of the targets' [lo, hi]: a superset,
    by a lookup in `_bins` (three passes over the values, where comparing with each
    span would take two per span)."""
    c = v >> shift
    np.minimum(c, len(near) - 1, out=c)
    return near[c]
