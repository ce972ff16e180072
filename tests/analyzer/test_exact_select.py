"""Exact percentiles selected inside histogram buckets (analyses/exact_select.py):
the same order statistics as DuckDB's quantile_disc and numpy's sort, and the
exact query answers instead where the histogram is not of the events."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pytest
from store_helpers import store_url
from trace_helpers import make_trace, workload_records

import schemas
from analyzer.analyses import exact_select, histograms
from analyzer.analyses.latency import _exact_rows, latency
from analyzer.store import queries
from analyzer.store.ingest import ingest
from analyzer.store.opener import open_store
from analyzer.store.queries import EventFilter

LEVELS = queries.EXACT_LEVELS
UNSEEN = 1 << schemas.bits("flag")["complete_unseen"]


def test_rank_is_the_rank_duckdb_quantile_disc_takes() -> None:
    """quantile_disc of 1..n is the rank it takes: every n up to 1,500, every level."""
    levels = ", ".join(str(q) for q, _ in LEVELS)
    got = duckdb.sql(
        f"SELECT n, quantile_disc(x, [{levels}]) FROM range(1, 1501) a(n), "
        "range(1, 1501) b(x) WHERE x <= n GROUP BY n ORDER BY n"
    ).fetchall()
    assert len(got) == 1500
    for n, qs in got:
        assert qs == [exact_select.rank(n, q) for q, _ in LEVELS], n


@pytest.fixture
def duck(tmp_path: Path):
    s = open_store(store_url("duckdb", tmp_path))
    try:
        yield s
    finally:
        s.close()


def _records(n: int) -> np.ndarray:
    """Wide latencies, a group whose values all tie, values under 64 ns, unseen
    records and requests with no queue time: each a case of the selection."""
    r = workload_records(n, seed=11)
    rng = np.random.default_rng(12)
    lat = np.exp(rng.uniform(np.log(20), np.log(5e7), n)).astype(np.int64)
    lat[r["stream"] == 3] = 700_000  # all equal: min == max in their bucket
    r["ts_complete_ns"] = r["ts_issue_ns"] + lat
    r["ts_queue_ns"][::7] = 0  # queue time unknown
    r["flags"][::13] |= UNSEEN
    return r


def _numpy_rows(r: np.ndarray, f_sel: np.ndarray) -> dict[str, dict[tuple[int, int], list]]:
    dev = (r["ts_complete_ns"] - r["ts_issue_ns"]).astype(np.int64)
    que = (r["ts_issue_ns"] - r["ts_queue_ns"]).astype(np.int64)
    known = {
        "device": f_sel & ((r["flags"] & UNSEEN) == 0),
        "queue": f_sel & (r["ts_queue_ns"] > 0),
    }
    out: dict[str, dict[tuple[int, int], list]] = {}
    for metric, v in (("device", dev), ("queue", que)):
        k = known[metric]
        keys = {(-1, -1): k}
        for op, st in set(zip(r["op"][k].tolist(), r["stream"][k].tolist(), strict=True)):
            keys[(op, st)] = k & (r["op"] == op) & (r["stream"] == st)
        out[metric] = {}
        for key, m in keys.items():
            s = np.sort(v[m])
            out[metric][key] = [int(s[max(1, math.ceil(len(s) * q - 1e-9)) - 1]) for q, _ in LEVELS]
    return out


@pytest.mark.parametrize(
    "f, sel",
    [
        (EventFilter(), lambda r: np.ones(len(r), bool)),
        (EventFilter(op=1), lambda r: r["op"] == 1),
        (EventFilter(min_bytes=32768), lambda r: r["bytes"] >= 32768),
        (EventFilter(t_from_ns=2 * 10**8), lambda r: r["ts_complete_ns"] >= 2 * 10**8),
    ],
)
def test_selection_gives_numpys_and_the_exact_querys_statistics(store, tmp_path, f, sel) -> None:
    r = _records(20_000)
    run_id = ingest(store, make_trace(tmp_path / "x.iot", r, chunk_records=4096)).run_id
    histograms.clear_cache()
    hists = {m: histograms.hist_rows(store, run_id, f, m) for m in ("device", "queue")}
    found = exact_select.select(store, run_id, f, hists)
    assert found is not None  # answered by selection, not by the fallback
    rows, unseen = found
    assert unseen is not None  # the events were read: some level is inside a bucket
    query = _exact_rows(store, run_id, f)
    assert unseen == [
        tuple(map(int, u)) for u in queries.run(store, "unseen_count", **f.params(run_id))
    ]
    want = _numpy_rows(r, sel(r))
    names = [n for _, n in LEVELS]
    for metric in ("device", "queue"):
        by_query = {(q["op"], q["stream"]): q for q in query[metric]}
        assert {(g["op"], g["stream"]) for g in rows[metric]} == set(want[metric])
        for g in rows[metric]:
            key = (g["op"], g["stream"])
            assert [g[n] for n in names] == want[metric][key], (metric, key)
            assert [g[n] for n in names] == [by_query[key][n] for n in names]
            assert (g["n"], g["hi"]) == (by_query[key]["n"], by_query[key]["hi"])


def test_a_histogram_not_of_the_events_falls_back_to_the_exact_query(
    duck, tmp_path, monkeypatch
) -> None:
    r = _records(5_000)
    run_id = ingest(duck, make_trace(tmp_path / "x.iot", r, chunk_records=4096)).run_id
    f = EventFilter()
    hists = {m: histograms.hist_rows(duck, run_id, f, m) for m in ("device", "queue")}
    # Every bucket counted twice: a target bucket then holds half the values it says.
    doubled = {m: [(*h[:4], 2 * h[4], *h[5:]) for h in rows] for m, rows in hists.items()}
    assert exact_select.select(duck, run_id, f, doubled) is None
    # Through latency(), with such histograms: the exact query's answer, numpy's.
    import analyzer.analyses.latency as mod

    real = mod.hist_rows
    monkeypatch.setattr(
        mod,
        "hist_rows",
        lambda *a: [(*h[:4], 2 * h[4], *h[5:]) for h in real(*a)],
    )
    want = _numpy_rows(r, np.ones(len(r), bool))["device"][(-1, -1)]
    got = latency(duck, run_id, f, exact=True)["device"]["all"]["percentiles"]
    assert [got[n] for _, n in histograms.LEVELS] == want


def test_the_servers_guarded_store_answers_by_selection(duck, tmp_path) -> None:
    """The routes' store (Guarded) reads the candidates too, not only rows: the
    server selects rather than falling back to the exact query."""
    import threading

    from analyzer.server.config import Settings
    from analyzer.server.deps import Guarded

    r = _records(5_000)
    run_id = ingest(duck, make_trace(tmp_path / "x.iot", r, chunk_records=4096)).run_id
    g = Guarded(duck, Settings(db=str(tmp_path / "unused.duckdb")), threading.Lock())
    f = EventFilter()
    hists = {m: histograms.hist_rows(g, run_id, f, m) for m in ("device", "queue")}
    found = exact_select.select(g, run_id, f, hists)
    assert found is not None and found[1] is not None
    want = _numpy_rows(r, np.ones(len(r), bool))["queue"][(-1, -1)]
    assert [found[0]["queue"][0][n] for _, n in LEVELS] == want
