"""Server: how fast `GET /runs/{id}/latency` answers over a 10-million-event run.

Measured through the app (HTTP handling and JSON included, via Starlette's test
client in this process), on a DuckDB store:

- histogram, cold: percentiles from the log-linear histogram, built by one GROUP BY
  (the in-process cache emptied before each request);
- pre-aggregated: after the run's histogram cube (device x op x stream x bucket)
  is built, as `iotape serve` does in the background at start: the whole run, and
  filters by op, stream and device, answered from the cube without a scan;
- exact: `exact=true`, order statistics per op and stream and overall;
- compare: `GET /compare` of the run with itself, cold (two histograms, bootstrap).

Peer, in the same run: one direct DuckDB query of the exact percentiles over the
run's events (quantile_disc, no grouping), on the same files: in turn with the
exact request, round by round, on a cursor of the app's connection
(`peer_in_turn`, the ratio `exact_vs_peer`), and again after, on a connection of
its own. Beside the latter: the store's exact-statistics query (both metrics, per
op and stream and overall; the exact request's fallback since exact_select,
issue 36) run directly on DuckDB (`exact_query_direct`).

Goal (issue 6): percentiles over 10 M events well under a second.
Writes JSON to bench/results/server.json.

Run: `.venv/bin/python bench/server.py [--events 10000000] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def timed(fn, rounds: int, before=None) -> dict:
    times = []
    for _ in range(rounds):
        if before:
            before()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return {"median_s": statistics.median(times), "min_s": min(times), "rounds": rounds}


PEER_SQL = (
    'SELECT count(*), quantile_disc("ts_complete_ns" - "ts_issue_ns", '
    "[0.5, 0.9, 0.99, 0.999, 0.9999]) FROM events WHERE run_id = $r "
    'AND "ts_issue_ns" > 0 AND "ts_complete_ns" >= "ts_issue_ns"'
)


def _api(c: Any, rounds: int, run_id: str) -> tuple[dict[str, dict], dict, dict]:
    """The endpoints' timings, cold and pre-aggregated; the exact and the histogram answer."""
    from analyzer.analyses import histograms

    def get(url: str) -> None:
        r = c.get(url)
        assert r.status_code == 200, r.text

    results: dict[str, dict] = {}
    clear = histograms.clear_cache
    results["histogram_cold"] = timed(lambda: get("/runs/big/latency"), rounds, clear)
    clear()
    t = time.perf_counter()
    histograms.prewarm(c.app.state.store, threading.Event())
    results["prewarm_build_s"] = {"seconds": time.perf_counter() - t}
    for label, q in (("", ""), ("_op", "?op=read"), ("_op_stream_device",
                     "?op=write&stream=db-write&device=sda")):  # fmt: skip
        results[f"preaggregated{label}"] = timed(lambda q=q: get(f"/runs/big/latency{q}"), rounds)
    # The exact request and the peer in turn, round by round, the peer on a cursor
    # of the app's own DuckDB connection (same engine, settings and files): load
    # from outside moves both alike.
    exact, peer = [], []
    with c.app.state.store.per_request() as cur:
        for _ in range(rounds):
            exact.append(timed(lambda: get("/runs/big/latency?exact=true"), 1, clear))
            peer.append(timed(lambda: cur.rows(PEER_SQL, {"r": run_id}), 1))
    results["exact"], results["peer_in_turn"] = _med(exact), _med(peer)
    results["compare_cold"] = timed(lambda: get("/compare?base=big&candidate=big"), rounds, clear)
    return results, c.get("/runs/big/latency?exact=true").json(), c.get("/runs/big/latency").json()


def _med(rs: list[dict]) -> dict:
    """One timing of rounds timed one at a time."""
    times = [r["median_s"] for r in rs]
    return {"median_s": statistics.median(times), "min_s": min(times), "rounds": len(rs)}


def _peer(db: Path, run_id: str, rounds: int) -> tuple[dict, dict]:
    """The peer: DuckDB alone, exact percentiles in one query; and the store's exact
    query, run the same way (in turn, round by round)."""
    import duckdb

    from analyzer.store import event_files
    from analyzer.store.queries import EventFilter
    from analyzer.store.queries.core import QUERIES

    con = duckdb.connect(str(db), read_only=True)
    try:
        # The store's events are Parquet files; the same view the store makes.
        con.execute(event_files.view_sql(event_files.parts_dir(str(db))))
        ours = QUERIES["exact_latency"].sql("duckdb")
        params = EventFilter().params(run_id)
        peer, direct = [], []
        for _ in range(rounds):
            peer.append(timed(lambda: con.execute(PEER_SQL, {"r": run_id}).fetchall(), 1))
            direct.append(timed(lambda: con.execute(ours, params).fetchall(), 1))
        return _med(peer), _med(direct)
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "server.json")
    args = ap.parse_args()

    from fastapi.testclient import TestClient
    from store import make_trace  # bench/store.py: the same synthetic trace as the ingest bench

    from analyzer.analyses.histograms import RELATIVE_ERROR
    from analyzer.server.app import create_app
    from analyzer.server.config import Settings
    from analyzer.store.ingest import ingest
    from analyzer.store.opener import opened

    with tempfile.TemporaryDirectory(prefix="iotape-bench-server-") as tmp:
        trace, db = Path(tmp) / "big.iot", Path(tmp) / "s.duckdb"
        make_trace(trace, args.events)
        with opened(str(db)) as s:
            run_id = ingest(s, trace, name="big").run_id
        trace.unlink()
        with TestClient(create_app(Settings(db=str(db)))) as c:
            results, body, approx = _api(c, args.rounds, run_id)
        peer, direct = _peer(db, run_id, args.rounds)
        results["peer_duckdb_exact_query"] = peer
        results["exact_query_direct"] = direct

    exact_p = body["device"]["all"]["percentiles"]
    approx_p = approx["device"]["all"]["percentiles"]
    out = {
        "bench": "server",
        "events": args.events,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "results": results,
        "histogram_vs_exact_relative_error": {
            k: abs(approx_p[k] - exact_p[k]) / exact_p[k] for k in exact_p if exact_p[k]
        },
        "ratio": {
            "exact_vs_peer": results["exact"]["median_s"] / results["peer_in_turn"]["median_s"],
            "exact_vs_peer_after": results["exact"]["median_s"] / peer["median_s"],
            "query_shape": direct["median_s"] / peer["median_s"],
            "request_vs_its_query": results["exact"]["median_s"] / direct["median_s"],
        },
        "error_bound": RELATIVE_ERROR,
        "goal": "percentiles over 10 M events well under a second",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
