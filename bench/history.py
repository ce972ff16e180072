"""History: how long `iotape history` takes over 50 runs of 1 M events each.

Ten firmware versions of one device model, five runs each (bench/store.py's
synthetic trace: two devices, 1 M events per run; the version is the `firmware`
tag). Ingested once into DuckDB and into chDB; then, holding
/tmp/iotape-bench.lock, `iotape history --model SSD --tag firmware --json` is run
as a user runs it (a new process each round, so no histogram is cached) against
each store, alternating the two.

Peers in the same run: chDB against DuckDB; and the floor of the work, one DuckDB
query of the exact p50 and p99 per run, op and stream over all the events.

Writes JSON to bench/results/history.json.

Run: `.venv/bin/python bench/history.py [--runs 50] [--events 1000000] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")
LOCK = "/tmp/iotape-bench.lock"


@contextlib.contextmanager
def bench_lock():
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "history.json")
    args = ap.parse_args()

    import duckdb
    from store import make_trace  # bench/store.py: the same synthetic trace as the ingest bench

    from analyzer.store.ingest import ingest
    from analyzer.store.opener import opened

    versions = 10
    with tempfile.TemporaryDirectory(prefix="iotape-bench-history-", dir="/var/tmp") as tmp:
        urls = {"duckdb": f"duckdb://{tmp}/h.duckdb", "chdb": f"chdb://{tmp}/ch"}
        t0 = time.perf_counter()
        with opened(urls["duckdb"]) as duck, opened(urls["chdb"]) as ch:
            for i in range(args.runs):
                trace = Path(tmp) / f"run{i}.iot"
                make_trace(trace, args.events)
                tags = {"firmware": f"{1 + i % versions}.0"}
                for s in (duck, ch):
                    ingest(s, trace, name=f"run{i}", tags=tags)
                trace.unlink()
                print(f"ingested run {i + 1}/{args.runs}", file=sys.stderr)
        built_s = time.perf_counter() - t0

        cmd = ["history", "--model", "SSD", "--tag", "firmware", "--json"]
        times: dict[str, list[float]] = {"duckdb": [], "chdb": [], "duckdb_sql_floor": []}
        answers = {}
        floor_sql = (
            'SELECT run_id, op, stream, quantile_disc("ts_complete_ns" - "ts_issue_ns", 0.5), '
            'quantile_disc("ts_complete_ns" - "ts_issue_ns", 0.99) FROM events '
            "WHERE dev = 259 << 20 GROUP BY ALL"
        )
        with bench_lock():
            for _ in range(args.rounds):
                for engine, url in urls.items():
                    t = time.perf_counter()
                    out = subprocess.run([IOTAPE, *cmd, "--db", url], capture_output=True,
                                         text=True, check=True)  # fmt: skip
                    times[engine].append(time.perf_counter() - t)
                    answers[engine] = json.loads(out.stdout)
                con = duckdb.connect(f"{tmp}/h.duckdb", read_only=True)
                t = time.perf_counter()
                con.execute(floor_sql).fetchall()
                times["duckdb_sql_floor"].append(time.perf_counter() - t)
                con.close()
        # Both engines answer the same history (the same histograms, the same seed).
        same = answers["duckdb"] == answers["chdb"]
        groups = answers["duckdb"]["groups"]
        result = {
            "bench": "history",
            "what": "iotape history --model SSD --tag firmware --json, a new process per round",
            "runs": args.runs,
            "events_per_run": args.events,
            "versions": versions,
            "rounds": args.rounds,
            "store_build_s": round(built_s, 1),
            "groups": len(groups),
            "change_points": sum(len(c) for g in groups for c in g["change_points"].values()),
            "duckdb_equals_chdb": same,
            "seconds": {
                k: {"median": round(statistics.median(v), 3), "min": round(min(v), 3)}
                for k, v in times.items()
            },
            "chdb_over_duckdb": round(
                statistics.median(times["chdb"]) / statistics.median(times["duckdb"]), 2
            ),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
