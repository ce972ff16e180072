"""`replay run --record`'s relabelling on a full-rate capture (issue 36), each
timing in a fresh process.

fio records at full speed on a loop device over /dev/shm (4 KiB random reads,
io_uring, 2 jobs x QD32, --seconds), `replay plan --mode exact` onto a second
loop device, `replay run --record` replays it with the relabelling held back
(its recording kept as fio left it), then, in turn, --rounds times:

- relabel: replayer.run.relabel.relabel on a copy of that recording;
- peer (the floor of any relabelling): the same recording read and rewritten
  unchanged, chunk by chunk (recorder.tracefile's reader and writer).

The relabelled trace's SHA-256 is written too, so that two versions of the code
can be checked for the same output (--keep DIR keeps the capture, the plan and
the recording; --from DIR times them again without recording).

Writes JSON (--out, default bench/results/relabel_rate.json) with the medians,
requests/s, peak RSS and the ratio relabel / peer.

Run (root, a kernel with BPF): `.venv/bin/python bench/relabel_rate.py [--seconds 3]
[--rounds 3] [--keep DIR | --from DIR]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = "rw=randread\nbs=4k\niodepth=32\nnumjobs=2\ngroup_reporting=1\n[r]\n"


def child(mode: str, trace: str, jobdir: str) -> dict:
    """One timing in this (fresh) process."""
    work = Path(tempfile.mkdtemp(prefix="iotape-relabel-", dir=Path(trace).parent))
    try:
        copy = work / "rep.iot"
        shutil.copy(trace, copy)
        t0 = time.perf_counter()
        if mode == "relabel":
            from replayer.run.execute import load_manifest
            from replayer.run.relabel import relabel

            n = relabel(copy, Path(jobdir), load_manifest(Path(jobdir))).requests
        else:
            from recorder.tracefile import TraceWriter, open_trace

            n = 0
            out = work / "copy.iot"
            with open_trace(copy) as t, TraceWriter(out, dict(t.header)) as w:
                for c in t.iter_chunks():
                    n += len(c)
                    w.write(c)
                w.close(dict(t.footer or {}))
            os.replace(out, copy)
        seconds = time.perf_counter() - t0
        sha = hashlib.sha256(copy.read_bytes()).hexdigest()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mode": mode, "requests": n, "seconds": seconds, "peak_rss_mib": peak, "sha256": sha}


def measure(mode: str, trace: Path, jobdir: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, str(trace), str(jobdir)]
    # This checkout's code, not whichever the environment's install points at.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{mode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


_HOLD_BACK = """
import shutil, sys
from pathlib import Path
from replayer.run import execute
from replayer.run.results import Relabel

def keep(trace, jobdir, man):
    shutil.copy(trace, sys.argv[2])
    return Relabel(relabelled=0, requests=0)

execute.relabel = keep
execute.run(Path(sys.argv[1]), record_to=Path(sys.argv[3]), destroy=[sys.argv[4]])
"""


def capture(work: Path, seconds: int) -> None:
    """work/src.iot (fio at full speed), work/jobs (its exact plan), work/rep.pre.iot
    (its replay as recorded, before relabelling)."""
    from replay_lab import record, two_loops

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with two_loops(512) as (src, dst):
        record(work / "job.fio", JOB, seconds, src, work / "src.iot")
        iotape = [sys.executable, "-m", "iotape"]
        subprocess.run(
            [*iotape, "replay", "plan", str(work / "src.iot"), "-o", str(work / "jobs"),
             "--mode", "exact", "--target", f"all={dst}"],
            check=True, env=env, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            [sys.executable, "-c", _HOLD_BACK, str(work / "jobs"), str(work / "rep.pre.iot"),
             str(work / "rep.iot"), dst],
            check=True, env=env, cwd=ROOT,
        )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="keep the capture, plan and recording here")
    ap.add_argument("--from", dest="source", type=Path, help="time a kept capture again")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/relabel_rate.json")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return
    if a.source:
        work = a.source
    else:
        work = a.keep or Path(tempfile.mkdtemp(prefix="iotape-relabel-bench-", dir="/dev/shm"))
        work.mkdir(parents=True, exist_ok=True)
        capture(work, a.seconds)
    trace, jobdir = work / "rep.pre.iot", work / "jobs"
    try:
        runs: dict[str, list[dict]] = {"relabel": [], "peer-rewrite": []}
        for _ in range(a.rounds):
            for mode in runs:
                runs[mode].append(measure(mode, trace, jobdir))
    finally:
        if not a.keep and not a.source:
            shutil.rmtree(work, ignore_errors=True)
    med = {m: statistics.median(r["seconds"] for r in rs) for m, rs in runs.items()}
    n = runs["relabel"][0]["requests"]
    summary = {
        "requests": n,
        "relabel_s": round(med["relabel"], 3),
        "relabel_requests_per_s": round(n / med["relabel"]),
        "relabel_peak_rss_mib": max(r["peak_rss_mib"] for r in runs["relabel"]),
        "peer_rewrite_s": round(med["peer-rewrite"], 3),
        "ratio_relabel_to_peer": round(med["relabel"] / med["peer-rewrite"], 2),
        "relabelled_sha256": runs["relabel"][0]["sha256"],
        "rounds": runs,
        "load_1min": os.getloadavg()[0],
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(summary, indent=2) + "\n")
    line = (
        f"relabel {n:,} requests: {med['relabel']:.2f} s ({n / med['relabel']:,.0f}/s), "
        f"peer rewrite {med['peer-rewrite']:.2f} s: {summary['ratio_relabel_to_peer']}x"
    )
    print(line, file=sys.stderr)


if __name__ == "__main__":
    main()
