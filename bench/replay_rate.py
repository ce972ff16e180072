"""`bench/replay.py --full-rate` (issue 36): a full-rate capture replayed at the
rate it was recorded, every step through the `iotape` CLI in a fresh process.

On two loop devices over /dev/shm: fio itself drives the destination first (4 KiB
random reads, io_uring, 2 jobs x QD32, unrecorded: the device's practical
ceiling on this machine, the peer); then `iotape record` captures the same fio
job on the source at full speed; `iotape replay plan --mode exact --target
all=DST`, `iotape replay run --record` (replay and relabelling) and `iotape
replay fidelity --json` follow, each timed as a whole process with its peak RSS
(wait4). fio runs on the destination once more at the end (the ceiling may move
while other work shares the machine). Reported: the recorded and replayed IOPS
(requests over the span of their issue times, each trace's own), their ratio
(goal within 5 %), fidelity's per-second IOPS error (goal <= 2 %), iotape-lanes'
issue lateness, each step's wall and peak RSS (goal: plan + run + relabel +
fidelity < 60 s, < 1 GiB), and the replay against fio's own rate.

`--lanes-compare sync` also replays the same trace with `--lanes sync` (the
layout before async lanes: up to 2,000 synchronous threads). `--ceiling-scale
0.5` (the default) then replays it unrecorded at half its durations (twice the
recorded rate): what the async lanes reach when asked for more than the device
gives, their CPU and both vCPUs' busy share, beside fio's own (the second fio
run's busy share).
Writes bench/results/replay-rate.json. Run as root, under the bench lock:
`flock /tmp/iotape-bench.lock .venv/bin/python bench/replay.py --full-rate`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from replay_lab import ROOT, fio_version, machine, two_loops

from recorder.tracefile import open_trace

IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")
JOB = "[r]\nrw=randread\nbs=4k\niodepth=32\nnumjobs=2\ngroup_reporting=1\n"


def _timed(cmd: list[str], out: Path | None = None) -> dict:
    """Run `cmd` in its own process (stdout to `out`): wall seconds, peak RSS (MiB)."""
    t0 = time.monotonic()
    with open(out or os.devnull, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.PIPE, text=True)
        _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read() if p.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {code}: {err.strip()[-500:]}")
    return {"wall_s": round(time.monotonic() - t0, 2), "peak_rss_mib": round(ru.ru_maxrss / 1024)}


def _job(path: Path, dev: str, seconds: int, body: str = JOB) -> Path:
    path.write_text(
        f"[global]\nfilename={dev}\ndirect=1\nioengine=io_uring\ntime_based=1\n"
        f"runtime={seconds}\n{body}"
    )
    return path


def fio_peer(work: Path, dev: str, seconds: int) -> float:
    """fio's own IOPS on `dev`, the same job, unrecorded."""
    out = work / "peer.json"
    subprocess.run(
        [
            "fio",
            "--output-format=json",
            f"--output={out}",
            str(_job(work / "peer.fio", dev, seconds)),
        ],
        check=True,
    )
    return round(sum(j["read"]["iops"] for j in json.loads(out.read_text())["jobs"]))


def trace_rate(path: Path) -> dict:
    """Requests, and IOPS over the span of their issue times."""
    with open_trace(path) as t:
        r = t.read_all()
    issue = r["ts_issue_ns"].astype(np.int64)
    issue = issue[issue > 0]
    span = (issue.max() - issue.min()) / 1e9
    return {"requests": len(r), "span_s": round(span, 3), "iops": round(len(issue) / span)}


def record(work: Path, src: str, seconds: int, body: str = JOB) -> tuple[Path, dict]:
    """`iotape record` of fio's full-rate job on `src`: the trace, the step's figures."""
    orig = work / "orig.iot"
    job = _job(work / "orig.fio", src, seconds, body)
    rec = [
        IOTAPE,
        "record",
        "-d",
        src,
        "-o",
        str(orig),
        "--",
        "fio",
        "--output=/dev/null",
        str(job),
    ]
    return orig, _timed(rec)


def one(work: Path, orig: Path, dst: str, lanes: str) -> dict:
    """Plan, replay (recorded, relabelled) and compare `orig` onto `dst` with --lanes LANES."""
    jobs, rep = work / f"jobs-{lanes}", work / f"rep-{lanes}.iot"
    steps = {
        "plan": _timed([IOTAPE, "replay", "plan", str(orig), "--mode", "exact", "--target",
                        f"all={dst}", "--lanes", lanes, "-o", str(jobs)]),
        "run+relabel": _timed([IOTAPE, "replay", "run", str(jobs), "--record", str(rep)]),
        "fidelity": _timed([IOTAPE, "replay", "fidelity", str(orig), str(rep), "--json"],
                           work / f"fidelity-{lanes}.json"),
    }  # fmt: skip
    summary = json.loads((jobs / "results" / "summary.json").read_text())
    fid = json.loads((work / f"fidelity-{lanes}.json").read_text())["iotape"]["overall"]
    recorded, replayed = trace_rate(orig), trace_rate(rep)
    lanes_run = json.loads((jobs / "results" / "fio.json").read_text())
    return {
        "lanes": lanes,
        "plan_jobs": len(summary["jobs"]),
        "async_lanes": [
            j["async"] | {"job": j["jobname"]} for j in lanes_run["jobs"] if "async" in j
        ],
        "recorded": recorded,
        "replayed": replayed,
        "replay_vs_recorded": round(replayed["iops"] / recorded["iops"], 3),
        "iops_mape_pct": fid["iops_mape_pct"],
        "match_share": fid["match_share"],
        "issue_error_ms": fid.get("issue_error"),
        "issue_late_ms": summary.get("issue_late_ms"),
        # iotape-lanes' own CPU over the replay (2 vCPUs; the loop device's kernel
        # workers are not in it).
        "lanes_cpu_s": lanes_run.get("cpu_s"),
        "lanes_elapsed_ms": lanes_run.get("elapsed_ms"),
        "steps": steps,
        "total_wall_s": round(sum(s["wall_s"] for s in steps.values()), 1),
        "peak_rss_mib": max(s["peak_rss_mib"] for s in steps.values()),
    }  # fmt: skip


def _cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU so far (/proc/stat)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(f) - f[3] - f[4], sum(f)  # idle and iowait are not busy


def ceiling(work: Path, orig: Path, dst: str, scale: float) -> dict:
    """What limits a replay here: the same trace at `scale` x its durations (it
    asks for 1/scale x the recorded rate), unrecorded: the IOPS iotape-lanes
    reached, its own CPU and the machine's (both vCPUs) meanwhile."""
    jobs = work / "jobs-ceiling"
    _timed([IOTAPE, "replay", "plan", str(orig), "--mode", "exact", "--target", f"all={dst}",
            "--layout", "lanes", "--time-scale", str(scale), "-o", str(jobs)])  # fmt: skip
    b0, t0 = _cpu_busy()
    step = _timed([IOTAPE, "replay", "run", str(jobs)])
    b1, t1 = _cpu_busy()
    doc = json.loads((jobs / "results" / "fio.json").read_text())
    ios = sum(j["read"]["total_ios"] for j in doc["jobs"])
    return {
        "time_scale": scale,
        "asked_iops": round(trace_rate(orig)["iops"] / scale),
        "iops": round(ios / (doc["elapsed_ms"] / 1000)),
        "lanes_cpu_s": doc.get("cpu_s"),
        "async_lanes": [j.get("async") for j in doc["jobs"]],
        "issue_late_ns": doc.get("issue_late_ns"),
        "machine_cpu_busy": round((b1 - b0) / max(t1 - t0, 1), 3),
        "run": step,
    }


def main_rate(a: argparse.Namespace) -> None:
    out = a.output or ROOT / "bench" / "results" / "replay-rate.json"
    res: dict = {}
    with two_loops(1024) as (src, dst), tempfile.TemporaryDirectory(prefix="iotape-rate-") as tmp:
        work = Path(tmp)
        peer_before = fio_peer(work, dst, a.rate_seconds)
        print("fio on the destination", peer_before, "IOPS", flush=True)
        orig, rec = record(work, src, a.rate_seconds)
        print("recorded", json.dumps(rec), flush=True)
        for lanes in ["auto", *([a.lanes_compare] if a.lanes_compare else [])]:
            try:
                res[lanes] = one(work, orig, dst, lanes)
            except (SystemExit, KeyError, OSError) as e:  # the other variant still runs
                res[lanes] = {"error": str(e)}
            print(lanes, json.dumps(res[lanes]), flush=True)
        b0, t0 = _cpu_busy()
        peer_after = fio_peer(work, dst, a.rate_seconds)
        b1, t1 = _cpu_busy()
        fio_busy = round((b1 - b0) / max(t1 - t0, 1), 3)
        top = ceiling(work, orig, dst, a.ceiling_scale) if a.ceiling_scale else None
        print("ceiling", json.dumps(top), flush=True)
    auto = res["auto"]
    doc = {
        "what": "a full-rate capture (fio 4 KiB random reads, io_uring, 2 jobs x QD32) "
        "recorded, planned, replayed with --record, relabelled and compared, each step "
        "through the iotape CLI in its own process",
        "goal": "replayed IOPS within 5 % of the recording, per-second IOPS error <= 2 %, "
        "plan + run + relabel + fidelity < 60 s, peak RSS < 1 GiB",
        "machine": machine(),
        "fio": fio_version(),
        "seconds": a.rate_seconds,
        "record": rec,
        "peer_fio_iops": [peer_before, peer_after],
        "peer_fio_machine_cpu_busy": fio_busy,
        "ceiling": top,
        "replay_vs_peer": (
            round(auto["replayed"]["iops"] / max(peer_before, peer_after), 3)
            if "replayed" in auto
            else None
        ),
        "runs": res,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=1))
    print(out)
