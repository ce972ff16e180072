"""Replay fidelity: iotape's exact-mode job files against fio's plain replay.

For three originals recorded on a loop device (a two-job fio mix, a constant-rate
trace, a bursty trace), plan an exact replay onto a second loop device, run it
recorded (`iotape replay run --record --anchor-record`), and compare each replay
with its original (`iotape replay fidelity`). Four replays per trace: `iotape`
(the job files as planned: pieces of 32 requests, each started at an absolute
time), `iotape-1job` (`--segment 0`: one job per stream and lane), `fio-plain`
(fio's own read_iolog replay of the same requests) and `synthetic` (`--mode
synthetic`, 1 s windows: per-second IOPS, read fraction and size-histogram
distance; its requests are drawn by fio, so none pair up and it has no issue
times to compare). Writes bench/results/replay.json.

Run as root: `.venv/bin/python bench/replay.py [--seconds 5]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path

from iotape.recorder import record as rec
from iotape.replayer import fidelity
from iotape.replayer import run as runmod
from iotape.replayer.plan import PlanOptions, plan

ROOT = Path(__file__).resolve().parent.parent

TRACES = {
    "fio-mix": (
        "[rr]\nrw=randread\nbs=4k\nrate_iops=1000\niodepth=4\n"
        "[ww]\nrw=randwrite\nbssplit=4k/50:32k/50\nrate_iops=300\niodepth=4\nfsync=20\n"
    ),
    "constant": "[c]\nrw=randread\nbs=4k\nrate_iops=2000\niodepth=1\n",
    # 400 requests at 8000 IOPS (50 ms), then 150 ms idle, over and over.
    "bursty": (
        "[b]\nrw=randread\nbs=8k\nrate_iops=8000\niodepth=4\n"
        "thinktime=150000\nthinktime_blocks=400\n"
    ),
}


def _loop(size_mb: int) -> tuple[str, str]:
    backing = tempfile.mkstemp(prefix="iotape-bench-", suffix=".img", dir="/dev/shm")[1]
    os.truncate(backing, size_mb << 20)
    dev = subprocess.run(
        ["losetup", "--find", "--show", "--direct-io=off", backing],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(f"/sys/block/{os.path.basename(dev)}/queue/nomerges").write_text("2")
    return dev, backing


def _figures(orig: Path, rep: Path) -> dict:
    c = fidelity.compare(orig, rep)
    o = c["overall"]
    return {
        "iops_mape_pct": o["iops_mape_pct"],
        "issue_error_ms": o.get("issue_error"),
        "interarrival_error_ms": o.get("interarrival_error"),
        "match_share": o["match_share"],
        "duration_s": c["duration_s"],
        "meets_goal": fidelity.meets_goals(c),
    }


def _synthetic_figures(orig: Path, rep: Path) -> dict:
    o = fidelity.compare(orig, rep)["overall"]
    return {
        k: o[k]
        for k in ("requests", "iops_mean", "iops_mape_pct", "mbps_mape_pct", "read_fraction")
    } | {"size_hist_tv": o["size_hist_tv"]}


def one(name: str, body: str, seconds: int, work: Path, src: str, dst: str) -> dict:
    d = work / name
    d.mkdir()
    job = d / "orig.fio"
    job.write_text(
        f"[global]\nfilename={src}\ndirect=1\nioengine=io_uring\ntime_based=1\n"
        f"runtime={seconds}\n{body}"
    )
    orig = d / "orig.iot"
    rec.record(
        rec.RecordOptions(
            devices=[src], output=orig, command=["fio", "--output=/dev/null", str(job)]
        )
    )
    out = {}
    for label, segment in (("iotape", PlanOptions.segment), ("iotape-1job", 0)):
        jobs = d / f"jobs-{label}"
        plan(PlanOptions(orig, jobs, mode="exact", targets=[f"all={dst}"], segment=segment))
        anchor = d / "plain.iot" if label == "iotape" else None
        runmod.run(jobs, d / f"{label}.iot", [], anchor)
        out[label] = _figures(orig, d / f"{label}.iot")
        if anchor is not None:
            out["fio-plain"] = _figures(orig, anchor)
    jobs = d / "jobs-synthetic"
    plan(PlanOptions(orig, jobs, mode="synthetic", targets=[f"all={dst}"]))
    runmod.run(jobs, d / "synthetic.iot", [])
    out["synthetic"] = _synthetic_figures(orig, d / "synthetic.iot")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "replay.json")
    a = ap.parse_args()
    made: list[tuple[str, str]] = []
    results = {}
    with tempfile.TemporaryDirectory(prefix="iotape-bench-replay-") as tmp:
        try:
            made.append(_loop(256))
            made.append(_loop(256))
            (src, _), (dst, _) = made
            for name, body in TRACES.items():
                results[name] = one(name, body, a.seconds, Path(tmp), src, dst)
                print(name, json.dumps(results[name]))
        finally:
            for dev, backing in made:
                subprocess.run(["losetup", "-d", dev], check=False)
                os.unlink(backing)
    doc = {
        "what": "replay fidelity (exact and synthetic modes), measured at the device (eBPF)",
        "goal": "exact: per-second IOPS error <= 2 %, p99 issue-time error <= 1 ms",
        "machine": {"kernel": platform.release(), "cpus": os.cpu_count()},
        "fio": subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip(),
        "seconds": a.seconds,
        "results": results,
    }
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(doc, indent=2) + "\n")
    print(a.output)


if __name__ == "__main__":
    main()
