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
run's events (quantile_disc, no grouping), on the same file.

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "server.json")
    args = ap.parse_args()

    import duckdb
    from fastapi.testclient import TestClient
    from store import make_trace  # bench/store.py: the same synthetic trace as the ingest bench

    from analyzer.analyses import core as analyses
    from analyzer.analyses import histograms
    from analyzer.server.app import create_app
    from analyzer.server.config import Settings
    from analyzer.store.ingest import ingest
    from analyzer.store.interface import opened

    with tempfile.TemporaryDirectory(prefix="iotape-bench-server-") as tmp:
        trace, db = Path(tmp) / "big.iot", Path(tmp) / "s.duckdb"
        make_trace(trace, args.events)
        with opened(str(db)) as s:
            run_id = ingest(s, trace, name="big").run_id
        trace.unlink()

        results: dict[str, dict] = {}
        with TestClient(create_app(Settings(db=str(db)))) as c:

            def get(url: str) -> None:
                r = c.get(url)
                assert r.status_code == 200, r.text

            clear = histograms.clear_cache
            results["histogram_cold"] = timed(lambda: get("/runs/big/latency"), args.rounds, clear)
            clear()
            t = time.perf_counter()
            analyses.prewarm(c.app.state.store, threading.Event())
            results["prewarm_build_s"] = {"seconds": time.perf_counter() - t}
            for label, q in (("", ""), ("_op", "?op=read"), ("_op_stream_device",
                             "?op=write&stream=db-write&device=sda")):  # fmt: skip
                results[f"preaggregated{label}"] = timed(
                    lambda q=q: get(f"/runs/big/latency{q}"), args.rounds
                )
            results["exact"] = timed(
                lambda: get("/runs/big/latency?exact=true"), args.rounds, clear
            )
            results["compare_cold"] = timed(
                lambda: get("/compare?base=big&candidate=big"), args.rounds, clear
            )
            body = c.get("/runs/big/latency?exact=true").json()
            approx = c.get("/runs/big/latency").json()
        # The peer: DuckDB alone, exact percentiles in one query.
        from analyzer.store import event_files

        con = duckdb.connect(str(db), read_only=True)
        # The store's events are Parquet files; the same view the store makes.
        con.execute(event_files.view_sql(event_files.parts_dir(str(db))))
        peer_sql = (
            'SELECT count(*), quantile_disc("ts_complete_ns" - "ts_issue_ns", '
            "[0.5, 0.9, 0.99, 0.999, 0.9999]) FROM events WHERE run_id = $r "
            'AND "ts_issue_ns" > 0 AND "ts_complete_ns" >= "ts_issue_ns"'
        )
        results["peer_duckdb_exact_query"] = timed(
            lambda: con.execute(peer_sql, {"r": run_id}).fetchall(), args.rounds
        )
        con.close()

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
        "error_bound": analyses.RELATIVE_ERROR,
        "goal": "percentiles over 10 M events well under a second",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
