"""Cold CPU after a sleep (issue 34): is the engine's longer CPU time a request
after a long wait a property of this host that a calibration can capture?

A fixed CPU work unit (bench/cold_cpu.c: a random cycle through FOOTPRINT KiB
of 64-byte nodes, each read and written, 8-256 KiB; or 4 and 16 preads of 8
KiB from a memfd, the kernel's code and data) timed right after a run of the
same unit (warm), and after that run and a sleep of S (10 us - 100 ms); units
and sleeps in random order, REPS each, in each CPU condition (bench/cpu_condition.py:
idle, the VM as it is, its idle vCPUs halting; awake, /dev/cpu_dma_latency
held at 0, idle vCPUs polling). r(S) = p50 after S / p50 after 100 us
(a thread that waits for I/O always sleeps: the warm figure is a short sleep's).
Beside it, from each TRACE's sched records (`iotape record --wakes`), per
engine thread kind, the CPU time of a cycle (issue to issue) by the time the
thread slept in it: the engine's own r(S).

    flock /tmp/iotape-bench.lock .venv/bin/python bench/cold_cpu.py [--trace T ...]
    (root for the awake condition; about a minute a condition; JSON in
    bench/results/cold-cpu.json)
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import tempfile
from pathlib import Path

import cpu_condition as cpu
import numpy as np
from replay_lab import ROOT, machine

from recorder.tracefile import open_trace
from recorder.tracefile.format import SCHED_FIELDS

OUT = ROOT / "bench" / "results" / "cold-cpu.json"
SLEEPS_US = [0, 10, 100, 300, 1_000, 2_000, 3_000, 5_000, 10_000, 30_000, 100_000]
UNITS = [8, 16, 32, 64, 256, -4, -16]  # KiB walked; negative: that many preads
BASE_US = 100  # r(S) is against the unit after this sleep
BINS_US = [0, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000]
KINDS = {"sessions": "ese-user-", "log writer": "ese-log-0"}


def calibrate(reps: int, condition: str) -> dict:
    """The units' p50 and r by sleep, run in the CPU `condition` (cpu_condition.py)."""
    with tempfile.TemporaryDirectory(prefix="iotape-coldcpu-") as tmp:
        exe = Path(tmp) / "cold_cpu"
        subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                        str(ROOT / "bench" / "cold_cpu.c")], check=True)  # fmt: skip
        with cpu.held(condition) as h:
            out = subprocess.run([str(exe), str(reps), ",".join(map(str, UNITS)),
                                  *map(str, SLEEPS_US)], check=True, capture_output=True,
                                 text=True).stdout  # fmt: skip
    p50: dict[int, dict[int, int]] = {}
    for line in out.splitlines():
        unit, s, _, _, mid, _ = (int(x) for x in line.split())
        p50.setdefault(unit, {})[s] = mid
    units = {}
    for unit, by in p50.items():
        units[str(unit)] = {
            "p50_ns": by,
            "ratio": {s: round(v / by[BASE_US], 2) for s, v in by.items()},
        }
    mem = [u for u in UNITS if u > 0]
    median = {
        s: round(float(np.median([p50[u][s] / p50[u][BASE_US] for u in mem])), 2) for s in SLEEPS_US
    }
    return {"condition": h.report(), "reps": reps, "units": units,
            "memory_units_median_ratio": median}  # fmt: skip


def _cycles(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A thread's sched records (docs/trace-format.md "Sched records"): per cycle,
    issue to issue, its time on a CPU and asleep (the rest less its run-queue
    wait), ns."""
    m = m[np.argsort(m["ts_queue_ns"], kind="stable")]
    col = {k: np.diff(m[SCHED_FIELDS[k]].astype(np.int64)) for k in ("on_cpu_ns", "run_delay_ns")}
    span = np.diff(m["ts_queue_ns"].astype(np.int64))
    return col["on_cpu_ns"], span - col["on_cpu_ns"] - col["run_delay_ns"]


def engine(trace: Path, median: dict[int, float]) -> dict:
    """Per thread kind, the CPU time of its cycles (us, p50 and count) by the
    time it slept in them (BINS_US), from the trace's sched records, and that
    p50 over the calibration's r at the bin's middle (`median`: the warm figure
    it predicts)."""
    at = sorted(s for s in median if s >= BASE_US)
    with open_trace(trace) as t:
        if not t.has_sched:
            raise SystemExit(f"{trace}: no sched records (record with --wakes)")
        r = t.read_all()
        sched = np.concatenate(list(t.iter_sched()))
    comm = zip(r["tid"].tolist(), r["comm"], strict=True)
    names = {a: bytes(b).split(b"\0")[0].decode() for a, b in comm}
    out: dict = {}
    for kind, prefix in KINDS.items():
        cpu, asleep = [], []
        for tid in np.unique(sched["tid"]).tolist():
            if names.get(tid, "").startswith(prefix):
                on, sl = _cycles(sched[sched["tid"] == tid])
                cpu.append(on)
                asleep.append(sl)
        if not cpu:
            continue
        c, s = np.concatenate(cpu), np.concatenate(asleep)
        bins = {}
        for a, b in itertools.pairwise(BINS_US):
            k = (s >= a * 1000) & (s < b * 1000)
            if k.sum() >= 10:
                p50 = float(np.median(c[k])) / 1e3
                mid = np.log(max(a, 1) * b) / 2
                ratio = float(np.interp(mid, np.log(at), [median[x] for x in at]))
                bins[f"{a}-{b}"] = {"n": int(k.sum()), "cpu_p50_us": round(p50, 1),
                                    "warm_us": round(p50 / ratio, 1)}  # fmt: skip
        out[kind] = bins
    return {"trace": str(trace), "by_sleep_us": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--trace", type=Path, action="append", default=[])
    ap.add_argument("--conditions", type=lambda v: v.split(","), default=["idle", "awake"],
                    help="CPU conditions (bench/cpu_condition.py), one calibration each; "
                    "the engine's bins by the first")  # fmt: skip
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    args = ap.parse_args()
    cals = {c: calibrate(args.reps, c) for c in args.conditions}
    median = cals[args.conditions[0]]["memory_units_median_ratio"]
    eng = [engine(t, median) for t in args.trace]
    doc = {"calibration": cals, "engine": eng, "machine": machine()}
    for c, cal in cals.items():
        print(c, json.dumps(cal["condition"]), json.dumps(cal["memory_units_median_ratio"]))
        for u, v in cal["units"].items():
            print(" ", u, v["ratio"])
    for e in eng:
        print(e["trace"], json.dumps(e["by_sleep_us"]))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
