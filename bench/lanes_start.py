"""iotape-lanes' set-up time: what it needs before a plan's first request (the
budget behind plan.json's lanes_start_us, replayer/plan/lanes.py).

A plan of N lanes on a regular file (each lane's requests at 0, 1, 2 ms ...:
iodepth of them), run by iotape-lanes with the trace's 0 at its start: every
first request is late by the time its thread took to start and open its log and
target; the latest first issue is the set-up time of the plan. --async makes
each lane an io_uring lane (one thread, a ring of iodepth).

Run: `.venv/bin/python bench/lanes_start.py [--lanes 10,500,2000] [--depth 1]
[--async]`; JSON to --out (default bench/results/lanes_start.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replayer.plan import iolog  # noqa: E402
from replayer.run import runner  # noqa: E402


def one(work: Path, n: int, depth: int, is_async: bool) -> dict:
    d = work / f"{n}-{depth}"
    d.mkdir()
    tgt = work / "target.img"
    text = "[global]\nioengine=psync\ndirect=1\nthread=1\nread_iolog_chunked=1\n"
    eng = "ioengine=io_uring\n" if is_async else ""
    t = np.arange(depth, dtype=np.int64) * 1000
    for k in range(n):
        off = (np.arange(depth, dtype=np.int64) + k * depth) * 4096 % (64 << 20)
        iolog.write_v2(d / f"l{k}.log", str(tgt), t, np.zeros(depth, np.int64), off,
                       np.full(depth, 4096, np.int64), start_us=0)  # fmt: skip
        text += f"\n[l{k}]\nread_iolog=l{k}.log\niodepth={depth}\nbs=4096\n{eng}"
    (d / "replay.fio").write_text(text)
    t0 = time.monotonic()
    p = subprocess.run([str(runner.LANES), "replay.fio"], cwd=d, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode:
        raise SystemExit(f"iotape-lanes: exit {p.returncode}: {p.stderr[-500:]}")
    doc = json.loads(p.stdout)
    firsts = [j["first_ns"] for j in doc["jobs"] if "first_ns" in j]
    threads = n if is_async else n * depth
    return {"lanes": n, "depth": depth, "async": is_async, "threads": threads,
            "latest_first_issue_ms": round(max(firsts) / 1e6, 2),
            "per_thread_us": round(max(firsts) / 1e3 / threads, 1),
            "wall_s": round(wall, 3)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lanes", default="10,500,2000")
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--async", dest="is_async", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/lanes_start.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iotape-lanes-start-"))
    try:
        with open(work / "target.img", "wb") as f:
            os.truncate(f.fileno(), 64 << 20)
        got = [one(work, int(n), a.depth, a.is_async) for n in a.lanes.split(",")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for r in got:
        print(json.dumps(r), file=sys.stderr)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"load_1min": os.getloadavg()[0], "runs": got}, indent=2) + "\n")


if __name__ == "__main__":
    main()
