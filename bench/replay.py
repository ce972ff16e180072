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

Writes bench/results/replay.json (replay-locality.json for --parts locality).
Run as root: `.venv/bin/python bench/replay.py [--seconds 5] [--rounds 3]`,
`.venv/bin/python bench/replay.py --parts locality --seconds 40`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from recorder.capture import record as rec
from replayer.plan import locality
from replayer.plan.build import PlanOptions, plan
from replayer.plan.source import load
from replayer.run import execute as runmod
from replayer.run import fidelity

ROOT = Path(__file__).resolve().parent.parent

TRACES = {
    "fio-mix": (
        "[rr]\nrw=randread\nbs=4k\nrate_iops=1000\niodepth=4\n"
        "[ww]\nrw=randwrite\nbssplit=4k/50:32k/50\nrate_iops=300\niodepth=4\nfsync=20\n"
    ),
    "constant": "[c]\nrw=randread\nbs=4k\nrate_iops=2000\niodepth=1\n",
    # A production-like mix for long traces (--seconds 60 or 600): 8,000 IOPS,
    # Poisson arrivals, 60 % reads, 4k/32k/128k.
    "production": (
        "[m]\nrw=randrw\nrwmixread=60\nbssplit=4k/60:32k/30:128k/10\n"
        "rate_iops=4800,3200\nrate_process=poisson\niodepth=8\n"
    ),
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
VARIANTS_LONG = ("iotape", "fio-plain", "iotape-windows")
WINDOWS_UP_TO_S = 60  # the windows variant costs another replay: the short trace only


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


_MIX = "rw=randrw\nrwmixread=70\nbs=8k\nrate_iops=2100,900\nrate_process=poisson\niodepth=4\n"


def _hotspot(seconds: int, step_s: int = 5) -> str:
    """One job per 5 s phase, each with 80 % of its I/O in a 16 MiB region 48 MiB
    further on than the last (zoned_abs zones from byte 0 of the device)."""
    jobs = []
    for k in range(-(-seconds // step_s)):
        lo = (k * 48) % 224
        zones = (f"10/{lo}M:" if lo else "") + f"80/16M:{20 if not lo else 10}/{240 - lo}M"
        jobs.append(
            f"[h{k}]\n{_MIX}random_distribution=zoned_abs:{zones}\n"
            f"startdelay={k * step_s}\nruntime={min(step_s, seconds - k * step_s)}\n"
        )
    return "".join(jobs)


def locality_traces(seconds: int) -> dict[str, str]:
    return {
        "zipf": f"[z]\n{_MIX}random_distribution=zipf:1.1\n",
        "zoned": f"[z]\n{_MIX}random_distribution=zoned:60/5:30/15:10/80\n",
        "hotspot": _hotspot(seconds),
    }


def _record(job: Path, body: str, seconds: int, src: str, out: Path) -> None:
    job.write_text(
        f"[global]\nfilename={src}\ndirect=1\nioengine=io_uring\ntime_based=1\n"
        f"runtime={seconds}\n{body}"
    )
    rec.record(
        rec.RecordOptions(
            devices=[src], output=out, command=["fio", "--output=/dev/null", str(job)]
        )
    )


def _meets_locality_goal(loc: dict, iops_pct: float | None) -> bool:
    return loc["faithful"] and iops_pct is not None and iops_pct <= 1.0


def one_locality(name: str, body: str, seconds: int, work: Path, src: str, dst: str) -> dict:
    d = work / name
    d.mkdir()
    orig = d / "orig.iot"
    _record(d / "orig.fio", body, seconds, src, orig)
    out: dict = {}
    for kind in ("zipf", "zoned"):
        jobs = d / f"jobs-{kind}"
        b = plan(PlanOptions(orig, jobs, mode="synthetic", targets=[f"all={dst}"], locality=kind))
        runmod.run(jobs, d / f"{kind}.iot", [])
        c = fidelity.compare(orig, d / f"{kind}.iot")
        loc = c["locality"]
        out[kind] = {
            "iops_mape_pct": c["overall"]["iops_mape_pct"],
            "requests": c["overall"]["requests"],
            "locality": loc,
            "meets_goal": _meets_locality_goal(loc, c["overall"]["iops_mape_pct"]),
            "plan_header": [
                ln for ln in b["jobfile_text"].splitlines() if "simulated largest LRU gap" in ln
            ],
        }
    header = out["zipf"]["plan_header"][0]
    sim = {k: float(header.split(f"{k} ")[-1].split(" pp")[0]) for k in ("zipf", "zoned")}
    out["auto_picks"] = min(sim, key=sim.get)
    out["auto"] = {k: v for k, v in out[out["auto_picks"]].items() if k != "plan_header"}
    return out


def main_locality(a: argparse.Namespace) -> None:
    made: list[tuple[str, str]] = []
    res: dict = {}
    try:
        made.append(_loop(256))
        made.append(_loop(256))
        (src, _), (dst, _) = made
        with tempfile.TemporaryDirectory(prefix="iotape-bench-locality-") as tmp:
            for name, body in locality_traces(a.seconds).items():
                res[name] = one_locality(name, body, a.seconds, Path(tmp), src, dst)
                print(name, json.dumps(_brief(res[name])), flush=True)
    finally:
        for dev, backing in made:
            subprocess.run(["losetup", "-d", dev], check=False)
            os.unlink(backing)
    doc = {
        "what": "synthetic replay locality (issue 26): LRU curve, footprint, IOPS error",
        "goal": "LRU hit ratio within max(3 pp, 15 % rel.) at 1-50 % of the footprint, "
        "footprint within 5 %, per-second IOPS error <= 1 %",
        "unit_bytes": locality.UNIT,
        "machine": {"kernel": platform.release(), "cpus": os.cpu_count()},
        "fio": subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip(),
        "seconds": a.seconds,
        "summary": {n: _brief(r) for n, r in res.items()},
        "results": res,
    }
    out = a.output or ROOT / "bench" / "results" / "replay-locality.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=1))
    print(out)


def _brief(r: dict) -> dict:
    out = {"auto_picks": r["auto_picks"]}
    for kind in ("zipf", "zoned"):
        loc = r[kind]["locality"]
        out[kind] = {
            "meets_goal": r[kind]["meets_goal"],
            "max_gap_pp": loc["max_gap_pp"],
            "at": loc["max_gap_at_fraction"],
            "footprint_error_pct": loc["footprint_error_pct"],
            "iops_mape_pct": r[kind]["iops_mape_pct"],
            "lru_orig": loc["lru_hit_ratio"][0],
            "lru_replay": loc["lru_hit_ratio"][1],
        }
    return out


def _cli(args: list[str], out: Path | None = None) -> tuple[float, float]:
    """Run `iotape ARGS` in its own process: (seconds, peak RSS in MiB)."""
    t0 = time.monotonic()
    with open(out or os.devnull, "w") as f:
        proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "iotape"), *args], stdout=f)
        _, status, ru = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"iotape {' '.join(args)}: exit {os.waitstatus_to_exitcode(status)}")
    return round(time.monotonic() - t0, 1), round(ru.ru_maxrss / 1024, 1)


def _long_figures(c: dict) -> dict:
    o = c["overall"]
    rows = c.get("windows") or []
    worst = max(rows, key=lambda r: r.get("issue_p99_ms", 0), default={})
    return {
        "iops_mape_pct": o["iops_mape_pct"],
        "issue_error_ms": o.get("issue_error"),
        "drift_ms_per_s": o.get("drift_ms_per_s"),
        "match_share": o["match_share"],
        "wakeup_floor": c.get("wakeup_floor"),
        "floor_goal": c.get("floor_goal"),
        "worst_window": worst,
        "meets_goal": bool((c.get("floor_goal") or {}).get("meets_goal"))
        and (o["iops_mape_pct"] or 0) <= 1.0,
        "windows": rows,
    }


def one_long(seconds: int, work: Path, src: str, dst: str) -> dict:
    d = work / f"production-{seconds}s"
    d.mkdir()
    orig = d / "orig.iot"
    _record(d / "orig.fio", TRACES["production"], seconds, src, orig)
    jobs = d / "jobs"
    out: dict = {"seconds": seconds, "requests": len(load(orig).records)}
    out["plan_s"], out["plan_rss_mib"] = _cli(
        ["replay", "plan", str(orig), "-o", str(jobs), "--mode", "exact", "--target", f"all={dst}"]
    )
    man = json.loads((jobs / "plan.json").read_text())
    out["jobs"], out["windows"] = len(man["jobs"]), len(man.get("windows") or [1])
    rep, plain = d / "iotape.iot", d / "plain.iot"
    out["run_s"], out["run_rss_mib"] = _cli(
        ["replay", "run", str(jobs), "--record", str(rep), "--anchor-record", str(plain)]
    )
    res = d / "fidelity.json"
    out["fidelity_s"], out["fidelity_rss_mib"] = _cli(
        ["replay", "fidelity", str(orig), str(rep), "--anchor", str(plain), "--json"], res
    )
    both = json.loads(res.read_text())
    out["iotape"] = _long_figures(both["iotape"])
    out["fio-plain"] = _long_figures(both["fio_plain"])
    # The same trace as windows of fio processes (--windows), for comparison.
    if seconds > WINDOWS_UP_TO_S:
        return out
    jobs1, rep1 = d / "jobs-windows", d / "iotape-windows.iot"
    args = ["replay", "plan", str(orig), "-o", str(jobs1), "--mode", "exact"]
    out["windows_plan_rss_mib"] = _cli([*args, "--target", f"all={dst}", "--windows"])[1]
    out["windows_run_rss_mib"] = _cli(["replay", "run", str(jobs1), "--record", str(rep1)])[1]
    _cli(["replay", "fidelity", str(orig), str(rep1), "--json"], res)
    out["iotape-windows"] = _long_figures(json.loads(res.read_text())["iotape"])
    return out


def _long_brief(r: dict) -> dict:
    keep = ("iops_mape_pct", "issue_error_ms", "floor_goal", "worst_window", "meets_goal")
    return {
        **{k: r[k] for k in r if k not in VARIANTS_LONG},
        **{v: {k: r[v][k] for k in keep} for v in VARIANTS_LONG if v in r},
    }


def main_long(a: argparse.Namespace) -> None:
    lengths = [int(x) for x in a.long.split(",")] + ([3600] if a.hour else [])
    made: list[tuple[str, str]] = []
    rounds: list[dict] = []
    try:
        made.append(_loop(256))
        made.append(_loop(256))
        (src, _), (dst, _) = made
        for k in range(a.rounds):
            res = {}
            tmp = Path(tempfile.mkdtemp(prefix="iotape-bench-long-", dir="/var/tmp"))
            for n in lengths:
                res[f"{n}s"] = one_long(n, tmp, src, dst)
                print(f"round {k + 1}", json.dumps(_long_brief(res[f"{n}s"])), flush=True)
            # Kept for a closer look (a 10 min trace's files are ~1 GB): say where.
            print("work files:", tmp, flush=True)
            rounds.append(res)
    finally:
        for dev, backing in made:
            subprocess.run(["losetup", "-d", dev], check=False)
            os.unlink(backing)
    doc = {
        "what": "long exact replays (issue 23): iotape against fio's plain replay, each "
        "judged against the wake-up floor measured during its own run",
        "goal": "per-second IOPS error <= 1 %, issue-time p99 <= 3x the floor's p99, no 5 s "
        "window's p99 beyond 5x its floor; peak RSS of plan/run/fidelity < 1 GiB",
        "machine": {"kernel": platform.release(), "cpus": os.cpu_count()},
        "fio": subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip(),
        "summary": [{n: _long_brief(r) for n, r in rnd.items()} for rnd in rounds],
        "rounds": rounds,
    }
    out = a.output or ROOT / "bench" / "results" / "replay-long.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=1))
    print(out)


def main() -> None:
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
    a = ap.parse_args()
    if a.long:
        main_long(a)
        return
    if a.parts == "locality":
        main_locality(a)
        return
    a.output = a.output or ROOT / "bench" / "results" / "replay.json"
    names = a.traces.split(",")
    made: list[tuple[str, str]] = []
    rounds: list[dict] = []
    floors: list[dict] = []
    try:
        made.append(_loop(256))
        made.append(_loop(256))
        (src, _), (dst, _) = made
        for k in range(a.rounds):
            floors.append(wakeup_floor())
            print("wake-up floor", json.dumps(floors[-1]), flush=True)
            res = {}
            with tempfile.TemporaryDirectory(prefix="iotape-bench-replay-") as tmp:
                for name in names:
                    res[name] = one(name, TRACES[name], a.seconds, Path(tmp), src, dst)
                    print(f"round {k + 1}", name, json.dumps(res[name]), flush=True)
            rounds.append(res)
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
