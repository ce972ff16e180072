"""Time and peak memory of `iotape replay plan --timing dependent` by trace
length, beside the recorded (open-loop) plan of the same trace (the peer): the
goal is a dependent plan as cheap as today's exact plans (issue 34).

For each length, writes a synthetic closed-loop trace with the project's
TraceWriter, a batch at a time, in completion order as a recording is:
THREADS synchronous threads (each request issued its think time, 0.2-2 ms,
after its thread's previous completion, 0.1-3 ms of service) over two streams,
and one asynchronous submitter issuing 4 writes at a time at the threads'
rate, every 8th FUA. Then
runs `iotape replay plan TRACE -o JOBDIR --target all=FILE` with --timing
dependent and with the default (recorded), each in a fresh process, peak RSS
from wait4. A trace past STREAM_ABOVE (1 M requests) is read in time-ordered
chunks by both.

Usage (timings under the shared lock):
    flock /tmp/iotape-bench.lock .venv/bin/python bench/plan_dependent.py \\
        --lengths 1000000 5000000
Writes bench/results/plan-dependent.json. Traces and plans go to --work
(default a temporary directory under /tmp), deleted after each length.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay_lab import peak_rss  # noqa: E402

import schemas  # noqa: E402
from recorder.tracefile import TraceWriter  # noqa: E402

THREADS = 16
PERIOD_NS = 4 * 2_650_000  # a thread's mean service (1.55 ms) + think (1.1 ms), x4
BATCH = 1 << 18  # requests per thread-batch written at a time
HEADER = {
    "mono_start_ns": 1_000_000_000,
    "wall_start_ns": 1_700_000_000_000_000_000,
    "host": "bench",
    "recorder": {"backend": "bench-synthetic", "version": "0"},
    "devices": [{"name": "vdb", "dev": (252 << 20) | 16, "major": 252, "minor": 16}],
    "streams": {"1": "db-read", "2": "db-write"},
    "metadata": {},
}
OP = schemas.enum("op")
FUA = 1 << schemas.bits("flag")["fua"]


def _sync(rng: np.random.Generator, tid: int, t0: int, n: int) -> tuple[np.ndarray, int]:
    """`n` requests of one synchronous thread from `t0`; (records, its next start)."""
    r = np.zeros(n, schemas.record_dtype())
    service = rng.integers(100_000, 3_000_000, n)
    think = rng.integers(200_000, 2_000_000, n)
    q = t0 + np.concatenate([[0], np.cumsum(service + think)[:-1]])
    r["ts_queue_ns"], r["ts_issue_ns"] = q, q + 2_000
    r["ts_complete_ns"] = q + service
    read = rng.random(n) < 0.7
    r["op"] = np.where(read, OP["read"], OP["write"])
    r["stream"] = np.where(read, 1, 2)
    r["bytes"] = 8192
    r["offset"] = rng.integers(0, (8 << 30) // 8192, n) * 8192
    r["pid"], r["tid"] = 4000, tid
    return r, int(q[-1] + service[-1] + think[-1])


def _async(rng: np.random.Generator, t0: int, n: int) -> tuple[np.ndarray, int]:
    """`n` writes of a submitter keeping 4 in flight, every 8th FUA."""
    r = np.zeros(n, schemas.record_dtype())
    k = np.arange(n)
    # a window of 4 every PERIOD_NS: as many requests a second as a thread's
    q = t0 + (k // 4) * PERIOD_NS + (k % 4) * 1_000
    r["ts_queue_ns"] = q
    r["ts_issue_ns"] = q + 2_000 + (k % 4) * 100_000
    r["ts_complete_ns"] = r["ts_issue_ns"] + rng.integers(200_000, 1_500_000, n)
    r["op"], r["stream"], r["bytes"] = OP["write"], 2, 4096
    r["flags"][::8] = FUA
    r["offset"] = rng.integers(0, (8 << 30) // 4096, n) * 4096
    r["pid"], r["tid"] = 5000, 5001
    return r, int(q[-1]) + PERIOD_NS


def generate(n: int, path: Path, seed: int = 34) -> None:
    """A closed-loop trace of about `n` requests at `path`."""
    rng = np.random.default_rng(seed)
    per = max(1, n // (THREADS + 1))
    starts = [10**9 + k * 37_000 for k in range(THREADS + 1)]
    with TraceWriter(path, HEADER) as w:
        left = per
        while left:
            m = min(BATCH, left)
            parts = []
            for k in range(THREADS):
                r, starts[k] = _sync(rng, 100 + k, starts[k], m)
                parts.append(r)
            r, starts[THREADS] = _async(rng, starts[THREADS], m)
            parts.append(r)
            b = np.zeros(sum(len(p) for p in parts), schemas.record_dtype())
            at = 0
            for p in parts:
                b[at : at + len(p)] = p
                at += len(p)
            # Threads drift apart: a batch's records are written as they complete.
            w.write(b[np.argsort(b["ts_complete_ns"], kind="stable")])
            left -= m
        w.close({"stop_reason": "duration", "lost": {}, "pre_start": 0})


def _plan(trace: Path, work: Path, timing: str) -> dict:
    target = work / "target.img"
    jobdir = work / f"jobs-{timing}"
    cmd = [sys.executable, "-m", "iotape", "replay", "plan", str(trace), "-o", str(jobdir),
           "--target", f"all={target}", "--timing", timing, "--force"]  # fmt: skip
    t0 = time.monotonic()
    code, rss = peak_rss(cmd, cwd=ROOT)
    wall = time.monotonic() - t0
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {code}")
    man = json.loads((jobdir / "plan.json").read_text())
    shutil.rmtree(jobdir)
    return {"wall_s": round(wall, 2), "peak_rss_mib": rss, "jobs": len(man["jobs"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "plan-dependent.json")
    a = ap.parse_args()
    rows = []
    for n in a.lengths:
        work = Path(tempfile.mkdtemp(prefix="iotape-plandep-", dir=a.work))
        try:
            trace = work / "t.iot"
            generate(n, trace)
            (work / "target.img").write_bytes(b"")
            with open(work / "target.img", "r+b") as f:
                f.truncate(9 << 30)
            dep = _plan(trace, work, "dependent")
            rec = _plan(trace, work, "recorded")
            row = {
                "requests": (n // (THREADS + 1)) * (THREADS + 1),
                "dependent": dep,
                "recorded": rec,
                "wall_ratio": round(dep["wall_s"] / rec["wall_s"], 2),
                "rss_ratio": round(dep["peak_rss_mib"] / rec["peak_rss_mib"], 2),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"bench": "plan-dependent", "peer": "recorded", "rows": rows},
                                indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
