"""Replay noise on the SSD-like device: what `iotape compare --min-effect` must stay over.

On a loop device over /dev/shm (bench/hybrid_lab.py's SSD-like device: requests take
microseconds, most of them CPU), fio records a source trace (synchronous psync, and
io_uring as the workload engine issues), then the trace is replayed exactly and
recorded REPLAYS times; everything is ingested. Then, holding /tmp/iotape-bench.lock:
each replay against the first and against its source, with no threshold and no
minimum effect (`--threshold 0 --min-effect 0`), device time p50, p90 and mean per
op. Nothing changed between these runs but the replay: every flag is a false alarm.

Prints and writes (bench/results/replay_noise.json) every change, the largest
|change| per metric, and how many metrics each gate flags: the noise alone, the
noise and 5 %, and the noise, 5 % and the default minimum effect.

Run as root: `.venv/bin/python bench/replay_noise.py [--replays 4] [--seconds 4]`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from history import ROOT, bench_lock
from hybrid_lab import HybridLab

from analyzer.analyses import comparison

IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")
LEVELS = ("p50", "p90", "mean")


def iotape(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([IOTAPE, *argv], capture_output=True, text=True, timeout=600)
    if check and r.returncode != 0:
        raise SystemExit(f"iotape {' '.join(argv[:2])}: {r.stderr[-2000:]}")
    return r


def record_and_replay(dev: str, tmp: Path, db: str, engine: str, replays: int, secs: int):
    src = tmp / f"{engine}.iot"
    fio = ["fio", "--name=src", f"--filename={dev}", "--rw=randrw", "--rwmixread=70",
           "--bs=8k", "--direct=1", f"--ioengine={engine}", "--size=64M",
           "--rate_iops=300,130", "--rate_process=poisson", f"--runtime={secs}",
           "--time_based"]  # fmt: skip
    iotape("record", "-d", dev, "-o", str(src), "--", *fio)
    iotape("ingest", str(src), "--name", engine, "--db", db)
    names = []
    for i in range(replays):
        name, jobs = f"{engine}-r{i}", tmp / f"{engine}-r{i}"
        iotape("replay", "plan", str(src), "-o", str(jobs), "--mode", "exact",
               "--target", f"all={dev}")  # fmt: skip
        iotape("replay", "run", str(jobs), "--record", str(tmp / f"{name}.iot"),
               "--destroy-data-on", dev)  # fmt: skip
        iotape("ingest", str(jobs), "--name", name, "--db", db)
        names.append(name)
    return names


def changes(db: str, base: str, cands: list[str]) -> list[dict]:
    r = iotape("compare", base, *cands, "--threshold", "0", "--min-effect", "0", "--metric",
               ",".join(LEVELS), "--json", "--db", db, check=False)  # fmt: skip
    out = []
    for c in json.loads(r.stdout)["candidates"]:
        for g in c["groups"]:
            for row in g["rows"]:
                for m in row["metrics"]:
                    if m["level"] in LEVELS and m["ci_low"] is not None:
                        out.append({"base": base, "candidate": c["candidate"]["name"],
                                    "op": row["op_name"], "level": m["level"],
                                    "base_ns": m["base"], "delta_ns": m["delta"],
                                    "delta_pct": m["delta_pct"],
                                    "noise": m["regression"]})  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replays", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=4)
    a = ap.parse_args()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        db = f"duckdb://{tmp}/noise.duckdb"
        with bench_lock(), HybridLab(size_mb=64, memory_disk=True) as lab:
            runs = {e: record_and_replay(lab.fast, tmp, db, e, a.replays, a.seconds)
                    for e in ("psync", "io_uring")}  # fmt: skip
        for engine, names in runs.items():
            rows += changes(db, engine, names)
            rows += changes(db, names[0], names[1:])
    floor = comparison.MIN_EFFECT_NS
    gates = {
        "noise": sum(r["noise"] and r["delta_ns"] > 0 for r in rows),
        "noise, 5 %": sum(r["noise"] and r["delta_pct"] > 5 for r in rows),
        f"noise, 5 %, {floor / 1e3:g} µs": sum(
            r["noise"] and r["delta_pct"] > 5 and r["delta_ns"] > floor for r in rows
        ),
    }
    largest = {lv: max(abs(r["delta_ns"]) for r in rows if r["level"] == lv) for lv in LEVELS}
    for r in rows:
        print(f"{r['base']:>10} -> {r['candidate']:<11} {r['op']:5} {r['level']:4} "
              f"{r['base_ns'] / 1e3:7.1f} µs {r['delta_ns'] / 1e3:+7.1f} µs "
              f"({r['delta_pct']:+4.0f} %){'  worse beyond the noise' * r['noise']}")  # fmt: skip
    print("largest |change|: " + ", ".join(f"{k} {v / 1e3:.1f} µs" for k, v in largest.items()))
    print(f"worse, flagged of {len(rows)}: " + ", ".join(f"{k}: {v}" for k, v in gates.items()))
    res = ROOT / "bench" / "results"
    res.mkdir(parents=True, exist_ok=True)
    doc = {"changes": rows, "largest_ns": largest, "flagged": gates}
    (res / "replay_noise.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
