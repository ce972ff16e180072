"""Store ingest: a synthetic 10-million-event trace into DuckDB and into chDB.

Peer, in the same run: DuckDB loading the same events from a Parquet file
(`iotape trace convert` output) into a table of its own file, and DuckDB only
reading that Parquet file. Each measurement runs in a fresh process, so its
peak RSS is its own. Ingest time is end to end: the idempotency key, converting
chunks to Arrow, writing the run's Parquet files and histograms, committing.

Text import: `iotape import` of an MSR-style CSV (--csv-lines lines) to a trace,
beside DuckDB's read_csv of the same file (every column read).

Peak RSS flat in trace length: --rss-events 10000000,50000000 ingests traces of
those lengths into DuckDB, one process each.

Goals (issue 19): >= 5 M events/s into DuckDB and >= 2x the peer load, peak RSS
< 1 GiB; chDB >= 2.5 M events/s; import >= 0.5x read_csv.
Writes JSON to bench/results/store.json (the ratio lines under "ratios", the
ratios as numbers under "ratio"); the ratio lines go to stderr too.

Run: `.venv/bin/python bench/store.py [--events 10000000] [--rounds 2]
[--csv-lines 10000000] [--rss-events 10000000,50000000]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import schemas

ROOT = Path(__file__).resolve().parent.parent


def make_trace(path: Path, n: int) -> None:
    """Plausible records: two devices, a few ops, streams and task names, rising times."""
    from recorder.tracefile import TraceWriter

    header = {
        "mono_start_ns": 0,
        "wall_start_ns": time.time_ns(),
        "host": platform.node(),
        "kernel": platform.release(),
        "recorder": {"backend": "bench", "version": "0"},
        "devices": [
            {"name": "sda", "dev": 8 << 20, "model": "HDD", "firmware": "A1", "rotational": True},
            {"name": "nvme0n1", "dev": 259 << 20, "model": "SSD", "firmware": "B2"},
        ],
    }
    rng = np.random.default_rng(1)
    dt = schemas.record_dtype()
    step = 1_000_000
    with TraceWriter(path, header) as w:
        for start in range(0, n, step):
            k = min(step, n - start)
            r = np.zeros(k, dtype=dt)
            t0 = start * 10_000
            r["ts_queue_ns"] = t0 + np.sort(rng.integers(0, step * 10_000, size=k))
            r["ts_issue_ns"] = r["ts_queue_ns"] + rng.integers(0, 5_000, size=k)
            r["ts_complete_ns"] = r["ts_issue_ns"] + rng.integers(5_000, 2_000_000, size=k)
            r["dev"] = rng.choice([8 << 20, 259 << 20], size=k)
            r["offset"] = rng.integers(0, 1 << 36, size=k) // 4096 * 4096
            r["bytes"] = rng.choice([4096, 32768, 262144, 1 << 20], size=k)
            r["op"] = rng.choice([0, 1, 2], size=k, p=[0.6, 0.38, 0.02])
            r["stream"] = rng.integers(0, 7, size=k)
            r["pid"] = 4242
            r["tid"] = rng.integers(4242, 4260, size=k)
            r["comm"] = rng.choice([b"ese-user0", b"ese-ckpt", b"ese-log", b"ese-bdm"], size=k)
            w.write(r)
        w.close({"stop_reason": "bench"})


# --------------------------------------------------------------------------- children


def child(mode: str, source: str, target: str) -> dict:
    t0 = time.perf_counter()
    out: dict = {"mode": mode}
    if mode in ("duckdb", "chdb", "duckdb-from-parquet"):
        from analyzer.store.ingest import ingest, source_sha256
        from analyzer.store.opener import open_store

        url = f"chdb://{target}" if mode == "chdb" else f"duckdb://{target}"
        h0 = time.perf_counter()
        source_sha256(Path(source))
        out["hash_s"] = time.perf_counter() - h0
        store = open_store(url)
        t0 = time.perf_counter()
        r = ingest(store, source)
        store.close()
        out["events"] = r.events
    elif mode == "peer-load":
        import duckdb

        con = duckdb.connect(target)
        con.execute("CREATE TABLE events AS SELECT * FROM read_parquet($p) LIMIT 0", {"p": source})
        t0 = time.perf_counter()
        con.execute("INSERT INTO events SELECT * FROM read_parquet($p)", {"p": source})
        out["events"] = con.execute("SELECT count(*) FROM events").fetchone()[0]
        con.close()
    elif mode == "import-msr":
        from recorder.importers.core import import_trace

        t0 = time.perf_counter()
        out["events"] = import_trace("msr", [source], target, force=True, argv=[]).events
    elif mode == "peer-read-csv":
        import duckdb

        t0 = time.perf_counter()
        row = (
            duckdb.connect()
            .execute(
                "SELECT count(*), sum(column0), sum(length(column1)), sum(column2), "
                "sum(length(column3)), sum(column4), sum(column5), sum(column6) "
                "FROM read_csv($p, header = false)",
                {"p": source},
            )
            .fetchone()
        )
        out["events"] = int(row[0])
    elif mode == "peer-read":
        import duckdb

        # sum() reads every value; min/max would be answered from Parquet statistics.
        cols = ", ".join(
            f'sum(length("{c}"))' if c == "comm" else f'sum("{c}")' for c in schemas.column_names()
        )
        t0 = time.perf_counter()
        # Column names come from the schema; the path is bound.
        row = (
            duckdb.connect()
            .execute(f"SELECT count(*), {cols} FROM read_parquet($p)", {"p": source})
            .fetchone()
        )
        out["events"] = int(row[0])
    out["seconds"] = time.perf_counter() - t0
    out["events_per_s"] = out["events"] / out["seconds"]
    out["peak_rss_mib"] = _peak_rss_mib()
    return out


def _peak_rss_mib() -> float:
    """This process's own peak: VmHWM belongs to the address space exec made. Linux
    keeps ru_maxrss across exec, so it would count the forking parent's pages too
    (the parent has just written a 50 M-event trace)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure(mode: str, source: Path, target: Path) -> dict:
    p = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(source), str(target)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return json.loads(p.stdout.strip().splitlines()[-1])


def write_msr_csv(path: Path, n: int) -> None:
    """MSR Cambridge lines (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime)."""
    rng = np.random.default_rng(2)
    step = 1_000_000
    with path.open("w") as f:
        for start in range(0, n, step):
            k = min(step, n - start)
            t = 128_166_372_000_000_000 + (start + np.arange(k)) * 100
            rw = np.where(rng.random(k) < 0.4, "Write", "Read")
            off = rng.integers(0, 1 << 30, k) // 8 * 4096
            size = rng.choice([4096, 8192, 32768, 65536], k)
            lat = rng.integers(200, 50_000, k)
            cols = (t.tolist(), rw.tolist(), off.tolist(), size.tolist(), lat.tolist())
            f.writelines(f"{a},hm,0,{b},{c},{d},{e}\n" for a, b, c, d, e in zip(*cols, strict=True))


def ratio_values(summary: dict) -> dict[str, float]:
    """The goals' ratios as numbers, for the JSON: each where both sides ran."""
    rate = {m: v["events_per_s_median"] for m, v in summary.items()}
    pairs = {
        "duckdb_vs_peer_load": ("duckdb", "peer-load"),
        "import_vs_read_csv": ("import-msr", "peer-read-csv"),
    }
    return {k: rate[a] / rate[b] for k, (a, b) in pairs.items() if a in rate and b in rate}


def ratio_lines(summary: dict) -> list[str]:
    rate = {m: v["events_per_s_median"] for m, v in summary.items()}
    lines = []
    if "duckdb" in rate:
        d = rate["duckdb"]
        lines.append(f".iot -> DuckDB store: {d / 1e6:.2f} M events/s (goal >= 5)")
        lines.append(
            f".iot -> DuckDB store / peer DuckDB load of the same Parquet: "
            f"{d / rate['peer-load']:.2f}x (goal >= 2)"
        )
        lines.append(
            f".iot -> DuckDB store / peer DuckDB read of that Parquet: {d / rate['peer-read']:.2f}x"
        )
        lines.append(
            f"peak RSS, .iot -> DuckDB: {summary['duckdb']['peak_rss_mib_max']:.0f} MiB "
            "(goal < 1024)"
        )
    if "chdb" in rate:
        lines.append(f".iot -> chDB store: {rate['chdb'] / 1e6:.2f} M events/s (goal >= 2.5)")
    if "import-msr" in rate:
        lines.append(
            f"iotape import MSR CSV / duckdb read_csv of it: "
            f"{rate['import-msr'] / rate['peer-read-csv']:.2f}x (goal >= 0.5)"
        )
    return lines


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--csv-lines", type=int, default=10_000_000, help="0: no text import")
    ap.add_argument("--rss-events", default="", help="comma-separated trace lengths")
    ap.add_argument(
        "--child", nargs=3, metavar=("MODE", "SOURCE", "TARGET"), help=argparse.SUPPRESS
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/store.json")
    return ap.parse_args()


def _rounds(
    tmp: Path, rounds: int, modes: list[str], trace: Path, parquet: Path, csv: Path
) -> dict[str, list[dict]]:
    """Each mode `rounds` times, in turn, each into a fresh target."""
    results: dict[str, list[dict]] = {m: [] for m in modes}
    for rnd in range(rounds):
        for m in modes:
            name = {"chdb": "ch", "import-msr": "msr.iot"}.get(m, "db.duckdb")
            target = tmp / f"{m}-{rnd}" / name
            target.parent.mkdir()
            src = parquet if m in ("duckdb-from-parquet", "peer-load", "peer-read") else trace
            src = csv if m in ("import-msr", "peer-read-csv") else src
            r = measure(m, src, target)
            shutil.rmtree(target.parent)  # keep the disk free for the next one
            results[m].append(r)
            print(
                f"round {rnd} {m:20s} {r['events_per_s'] / 1e6:6.2f} M events/s "
                f"{r['seconds']:6.2f} s  peak {r['peak_rss_mib']:6.0f} MiB",
                file=sys.stderr,
            )
    return results


def _summary(results: dict[str, list[dict]]) -> dict[str, dict]:
    return {
        m: {
            "events_per_s_median": statistics.median(r["events_per_s"] for r in rs),
            "seconds_median": statistics.median(r["seconds"] for r in rs),
            "peak_rss_mib_max": max(r["peak_rss_mib"] for r in rs),
            **(
                {"hash_s_median": statistics.median(r["hash_s"] for r in rs)}
                if "hash_s" in rs[0]
                else {}
            ),
        }
        for m, rs in results.items()
    }


def _rss_by_length(tmp: Path, lengths: str) -> list[dict]:
    """Peak memory of a DuckDB ingest for each trace length given."""
    rss = []
    for n in [int(x) for x in lengths.split(",") if x]:
        long = tmp / f"rss-{n}.iot"
        print(f"making a {n:,}-event trace ...", file=sys.stderr)
        make_trace(long, n)
        target = tmp / f"rss-{n}" / "db.duckdb"
        target.parent.mkdir()
        r = measure("duckdb", long, target)
        long.unlink()
        shutil.rmtree(target.parent)
        rss.append(r)
        print(
            f"{n:,} events -> DuckDB: {r['events_per_s'] / 1e6:6.2f} M events/s "
            f"peak {r['peak_rss_mib']:6.0f} MiB",
            file=sys.stderr,
        )
    return rss


def main() -> None:
    args = _args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return

    from recorder.tracefile.convert import convert

    with tempfile.TemporaryDirectory(prefix="iotape-bench-store-", dir="/var/tmp") as tmpdir:
        tmp = Path(tmpdir)
        trace, parquet = tmp / "bench.iot", tmp / "bench.parquet"
        print(f"making a {args.events:,}-event trace ...", file=sys.stderr)
        make_trace(trace, args.events)
        convert(trace, parquet)
        modes = ["duckdb", "chdb", "duckdb-from-parquet", "peer-load", "peer-read"]
        csv = tmp / "msr.csv"
        if args.csv_lines:
            print(f"making a {args.csv_lines:,}-line MSR CSV ...", file=sys.stderr)
            write_msr_csv(csv, args.csv_lines)
            modes += ["import-msr", "peer-read-csv"]
        results = _rounds(tmp, args.rounds, modes, trace, parquet, csv)
        summary = _summary(results)
        rss = _rss_by_length(tmp, args.rss_events)
        doc = {
            "benchmark": "store ingest (issues 5, 19)",
            "events": args.events,
            "trace_bytes": trace.stat().st_size,
            "parquet_bytes": parquet.stat().st_size,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "goal": {
                "duckdb_events_per_s": 5_000_000,
                "duckdb_vs_peer_load": 2.0,
                "peak_rss_mib": 1024,
                "chdb_events_per_s": 2_500_000,
                "import_vs_read_csv": 0.5,
            },
            "peer": "peer-load: DuckDB INSERT from the same events in Parquet into its own file; "
            "peer-read: DuckDB reading that Parquet (every column)",
            "summary": summary,
            "ratios": ratio_lines(summary),
            "ratio": ratio_values(summary),
            "rss_by_length": rss,
            "rounds": results,
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    for line in doc["ratios"]:
        print(line, file=sys.stderr)


if __name__ == "__main__":
    main()
