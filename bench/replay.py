"""Replay fidelity: iotape's exact-mode job files against fio's plain replay.

For each trace, recorded on a loop device (a two-job fio mix, a constant-rate
trace, a bursty trace at 8,000 IOPS in 50 ms bursts, and `bursty-catchup`, whose
bursts are fio catching up after its think time: up to ~180 requests within a
millisecond, far beyond the goal's 20k IOPS), plan an exact replay onto a second
loop device, run it recorded (`iotape replay run --record --anchor-record`), and
compare each replay with its original (`iotape replay fidelity`). Four replays
per trace: `iotape` (the job files as planned: pieces of 32 requests, each
started at an absolute time), `iotape-1job` (`--segment 0`: one job per stream
and lane), `fio-plain` (fio's own read_iolog replay of the same requests) and
`synthetic` (`--mode synthetic`, 1 s windows: per-second IOPS, read fraction and
size-histogram distance; its requests are drawn by fio, so none pair up and it
has no issue times to compare). Every round records fresh originals.

Also measured, as the floor any replayer on this machine stands on: how late a
lone thread wakes from 500 us sleeps (timer slack 1 ns, nothing else running of
ours), the share of wake-ups more than 1 ms late.

`--parts locality` (issue 26) instead records three traces of 8 KiB random
reads and writes (70/30) at 3,000 IOPS (Poisson arrivals) on a 256 MiB loop
device: `zipf` (fio's zipf:1.1), `zoned` (60 % of the I/O in 5 % of the device,
30 % in the next 15 %) and `hotspot` (80 % in a 16 MiB region that moves 48 MiB
every 5 s), plans a synthetic replay of each twice (`--locality zipf` and
`--locality zoned`; `auto` picks one of the two by simulation and its pick is
reported), runs each recorded and compares it with its original: the LRU
hit-ratio gaps at 1-50 % of the footprint against the goal (3 pp or 15 %
relative), the footprint error (goal 5 %) and the per-second IOPS error (1 %).

`--long` (issue 23) records the production mix (8,000 IOPS Poisson, 60 % reads,
4k/32k/128k) for 60 s and 10 min (`--hour` adds 1 hour), and per trace runs
the `iotape` CLI as a user would, each command in its own process so that its
peak RSS is measured (`replay plan`, `replay run --record --anchor-record`,
`replay fidelity --json`): iotape's exact replay and fio's plain replay of the
same trace in the same run, each judged against the wake-up floor `replay run`
measured while it ran (overall p99 within 3x the floor's p99, no 5 s window
beyond 5x; per-second IOPS error <= 1 %). Writes replay-long.json.

`--full-rate` (issue 36, replay_rate.py) records a full-rate capture (fio, 4 KiB
random reads, io_uring, 2 jobs x QD32 on a loop device over /dev/shm) and
replays it through the CLI (plan, run --record, fidelity), against fio's own
rate on the destination in the same run. Writes replay-rate.json.

Writes bench/results/replay.json (replay-locality.json for --parts locality).
The locality and long parts live in replay_locality.py and replay_long.py, what
all three share (loop devices, recording) in replay_lab.py.
Run as root: `.venv/bin/python bench/replay.py [--seconds 5] [--rounds 3]`,
`.venv/bin/python bench/replay.py --parts locality --seconds 40`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import replay_locality
import replay_long
import replay_rate
from replay_lab import PRODUCTION, ROOT, fio_version, machine, record, two_loops

from replayer.plan.build import PlanOptions, plan
from replayer.plan.source import load
from replayer.run import execute as runmod
from replayer.run import fidelity

TRACES = {
    "fio-mix": (
        "[rr]\nrw=randread\nbs=4k\nrate_iops=1000\niodepth=4\n"
        "[ww]\nrw=randwrite\nbssplit=4k/50:32k/50\nrate_iops=300\niodepth=4\nfsync=20\n"
    ),
    "constant": "[c]\nrw=randread\nbs=4k\nrate_iops=2000\niodepth=1\n",
    "production": PRODUCTION,
    # 400 requests at 8000 IOPS (50 ms), then 150 ms idle, over and over.
    "bursty": (
        "[b]\nrw=randread\nbs=8k\nrate_iops=8000\niodepth=4\n"
        "thinktime=150000\nthinktime_blocks=400\nrate_ignore_thinktime=1\n"
    ),
    # The same without rate_ignore_thinktime: after each idle spell fio catches up
    # on the rate it missed, as fast as the device goes (requests 1-4 us apart).
    "bursty-catchup": (
        "[b]\nrw=randread\nbs=8k\nrate_iops=8000\niodepth=4\n"
        "thinktime=150000\nthinktime_blocks=400\n"
    ),
}
VARIANTS = ("iotape", "fio-plain", "iotape-1job")


def _peak_iops(trace: Path) -> int:
    """The trace's highest request rate over any 1 ms bin, in IOPS."""
    t = load(trace).t_ns
    return int(np.bincount((t - t.min()) // 1_000_000).max() * 1000) if len(t) else 0


def wakeup_floor(seconds: float = 5.0, period_us: int = 500) -> dict:
    """How late a lone thread wakes from short sleeps on this machine."""
    Path("/proc/self/timerslack_ns").write_text("1")
    late = []
    t0 = time.monotonic_ns()
    k = 0
    while time.monotonic_ns() - t0 < seconds * 1e9:
        k += 1
        target = t0 + k * period_us * 1000
        d = target - time.monotonic_ns()
        if d > 0:
            time.sleep(d / 1e9)
        late.append(time.monotonic_ns() - target)
    x = np.array(late[1:], dtype=np.float64) / 1e6
    return {
        "wakeups": len(x),
        "period_us": period_us,
        "late_over_1ms_pct": round(float((x > 1).mean() * 100), 3),
        "p50_ms": round(float(np.percentile(x, 50)), 4),
        "p99_ms": round(float(np.percentile(x, 99)), 4),
        "p999_ms": round(float(np.percentile(x, 99.9)), 4),
        "max_ms": round(float(x.max()), 4),
    }


def _spread(x: list[float]) -> dict:
    return {"median": statistics.median(x), "min": min(x), "max": max(x)}


def _summary(rounds: list[dict]) -> dict:
    """Median and range over rounds of each variant's p99 and IOPS error."""
    out: dict = {}
    for name in rounds[0]:
        out[name] = {"peak_iops_1ms": max(r[name]["peak_iops_1ms"] for r in rounds)}
        for v in VARIANTS:
            p99 = [r[name][v]["issue_error_ms"]["p99_ms"] for r in rounds]
            iops = [r[name][v]["iops_mape_pct"] for r in rounds]
            out[name][v] = {
                "p99_issue_ms": _spread(p99),
                "iops_mape_pct": _spread(iops),
                "meets_goal": f"{sum(r[name][v]['meets_goal'] for r in rounds)}/{len(rounds)}",
            }
    return out


def _figures(orig: Path, rep: Path) -> dict:
    c = fidelity.compare(orig, rep)
    o = c["overall"]
    return {
        "iops_mape_pct": o["iops_mape_pct"],
        "issue_error_ms": o.get("issue_error"),
        "interarrival_error_ms": o.get("interarrival_error"),
        "drift_ms_per_s": o.get("drift_ms_per_s"),
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
    orig = d / "orig.iot"
    record(d / "orig.fio", body, seconds, src, orig)
    out = {"peak_iops_1ms": _peak_iops(orig)}
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


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    short = ",".join(t for t in TRACES if t != "production")
    ap.add_argument("--traces", default=short, help=f"comma-separated; default {short}")
    ap.add_argument("--parts", choices=("timing", "locality"), default="timing")
    ap.add_argument("--output", type=Path, default=None)
    ap.add_argument(
        "--long",
        nargs="?",
        const="60,600",
        default=None,
        help="long traces: comma-separated lengths in s (default 60,600)",
    )
    ap.add_argument("--hour", action="store_true", help="with --long: also a 1-hour trace")
    ap.add_argument(
        "--full-rate",
        action="store_true",
        help="a full-rate capture (2 x QD32 4 KiB reads) replayed at its rate: replay_rate.py",
    )
    ap.add_argument("--rate-seconds", type=int, default=6, help="with --full-rate")
    ap.add_argument(
        "--lanes-compare",
        choices=("sync", "async"),
        default=None,
        help="with --full-rate: also replay with --lanes sync (or async)",
    )
    ap.add_argument(
        "--ceiling-scale",
        type=float,
        default=0.5,
        help="with --full-rate: also replay unrecorded at this time scale (0: not)",
    )
    ap.add_argument(
        "--plan-hour",
        action="store_true",
        help="plan (only) a 1-hour trace tiled from a 60 s recording: time and peak RSS",
    )
    ap.add_argument(
        "--layouts",
        default="iotape-lanes-fio,iotape-pieces",
        help="with --long: other layouts replayed too (iotape-lanes-fio, iotape-pieces, "
        "iotape-windows, iotape-lanes-libaio)",
    )
    ap.add_argument(
        "--anchor-up-to",
        type=int,
        default=60,
        help="with --long: fio's plain replay too, up to N s (it runs longer than the trace)",
    )
    ap.add_argument(
        "--others-up-to", type=int, default=60, help="with --long: other layouts up to N s"
    )
    return ap


def main() -> None:
    a = _parser().parse_args()
    if a.full_rate:
        replay_rate.main_rate(a)
        return
    if a.plan_hour:
        replay_long.main_plan_hour(a)
        return
    if a.long:
        replay_long.main_long(a)
        return
    if a.parts == "locality":
        replay_locality.main_locality(a)
        return
    a.output = a.output or ROOT / "bench" / "results" / "replay.json"
    names = a.traces.split(",")
    rounds: list[dict] = []
    floors: list[dict] = []
    with two_loops() as (src, dst):
        for k in range(a.rounds):
            floors.append(wakeup_floor())
            print("wake-up floor", json.dumps(floors[-1]), flush=True)
            res = {}
            with tempfile.TemporaryDirectory(prefix="iotape-bench-replay-") as tmp:
                for name in names:
                    res[name] = one(name, TRACES[name], a.seconds, Path(tmp), src, dst)
                    print(f"round {k + 1}", name, json.dumps(res[name]), flush=True)
            rounds.append(res)
    doc = {
        "what": "replay fidelity (exact and synthetic modes), measured at the device (eBPF)",
        "goal": "exact: per-second IOPS error <= 2 %, p99 issue-time error <= 1 ms",
        "machine": machine(),
        "fio": fio_version(),
        "seconds": a.seconds,
        "wakeup_floor": floors,
        "summary": _summary(rounds),
        "rounds": rounds,
    }
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=1))
    print(a.output)


if __name__ == "__main__":
    main()
