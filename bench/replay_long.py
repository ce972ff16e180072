"""`bench/replay.py --long` (issue 23): long exact replays through the `iotape` CLI,
each command in its own process (its peak RSS measured), judged against the
wake-up floor `replay run` measured while it ran."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from replay_lab import PRODUCTION, ROOT, fio_version, machine, peak_rss, record, two_loops

from recorder.tracefile import TraceWriter, open_trace
from replayer.plan.source import load
from schemas.documents import plan as plan_document

VARIANTS_LONG = (
    "iotape",
    "fio-plain",
    "iotape-lanes-fio",
    "iotape-pieces",
    "iotape-windows",
    "iotape-lanes-libaio",
)
# Other layouts of the same trace, each another replay in the same run: (plan
# options, run options). The default, `iotape`, is a plan of lanes past 2,000
# pieces (replayer/plan/lanes.py) run by iotape-lanes (replayer/run/runner.py);
# iotape-lanes-fio is the same plan run by fio 3.33.
OTHER_LAYOUTS = {
    "iotape-lanes-fio": (["--layout", "lanes"], ["--runner", "fio"]),
    "iotape-pieces": (["--layout", "pieces"], []),
    "iotape-windows": (["--windows"], []),
    "iotape-lanes-libaio": (["--layout", "lanes", "--engine", "libaio"], ["--runner", "fio"]),
}


def _cli(args: list[str], out: Path | None = None) -> tuple[float, float]:
    """Run `iotape ARGS` in its own process: (seconds, its peak RSS in MiB)."""
    t0 = time.monotonic()
    code, mib = peak_rss([str(ROOT / ".venv" / "bin" / "iotape"), *args], out)
    if code != 0:
        raise SystemExit(f"iotape {' '.join(args)}: exit {code}")
    return round(time.monotonic() - t0, 1), mib


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


def one_long(
    seconds: int, work: Path, src: str, dst: str, others: list[str], anchor_up_to: int
) -> dict:
    d = work / f"production-{seconds}s"
    d.mkdir()
    orig = d / "orig.iot"
    record(d / "orig.fio", PRODUCTION, seconds, src, orig)
    jobs = d / "jobs"
    out: dict = {"seconds": seconds, "requests": len(load(orig).records)}
    out["plan_s"], out["plan_rss_mib"] = _cli(
        ["replay", "plan", str(orig), "-o", str(jobs), "--mode", "exact", "--target", f"all={dst}"]
    )
    man = plan_document.load(jobs / "plan.json")
    out["jobs"], out["windows"] = len(man.jobs), len(man.windows or [1])
    out["layout"] = man.exact_layout or "pieces"
    rep, plain = d / "iotape.iot", d / "plain.iot"
    # fio's plain replay runs as long as the trace and more: up to anchor_up_to.
    anchor = ["--anchor-record", str(plain)] if seconds <= anchor_up_to else []
    out["run_s"], out["run_rss_mib"] = _cli(
        ["replay", "run", str(jobs), "--record", str(rep), *anchor]
    )
    res = d / "fidelity.json"
    against = ["--anchor", str(plain)] if anchor else []
    out["fidelity_s"], out["fidelity_rss_mib"] = _cli(
        ["replay", "fidelity", str(orig), str(rep), *against, "--json"], res
    )
    both = json.loads(res.read_text())
    out["iotape"] = _long_figures(both["iotape"])
    if anchor:
        out["fio-plain"] = _long_figures(both["fio_plain"])
    for name in others:
        jobs1, rep1 = d / f"jobs-{name}", d / f"{name}.iot"
        args = ["replay", "plan", str(orig), "-o", str(jobs1), "--mode", "exact"]
        plan_opts, run_opts = OTHER_LAYOUTS[name]
        _cli([*args, "--target", f"all={dst}", *plan_opts])
        run = ["replay", "run", str(jobs1), "--record", str(rep1), *run_opts]
        out[f"{name}_run_rss_mib"] = _cli(run)[1]
        _cli(["replay", "fidelity", str(orig), str(rep1), "--json"], res)
        out[name] = _long_figures(json.loads(res.read_text())["iotape"])
    return out


def tile(orig: Path, times: int, out: Path) -> int:
    """A trace `times` as long as `orig`: its records again and again, each copy
    shifted by the original's span, written a copy at a time (never all held).
    What planning an hour costs, without recording one."""
    with open_trace(orig) as t:
        header, r = t.header, t.read_all()
    fields = ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns")
    lo = min(int(r[f][r[f] > 0].min()) for f in fields)
    span = max(int(r[f].max()) for f in fields) - lo + 1_000_000
    with TraceWriter(out, header) as w:
        for k in range(times):
            c = r.copy()
            for f in fields:
                c[f] = np.where(c[f] > 0, c[f] + k * span, 0)
            w.write(c)
        w.close({})
    return len(r) * times


def plan_hour(work: Path, src: str, dst: str, seconds: int = 60, times: int = 60) -> dict:
    """Plan (only) a 1-hour trace tiled from a recorded `seconds` one: time and peak RSS."""
    d = work / "plan-hour"
    d.mkdir()
    orig, hour = d / "orig.iot", d / "hour.iot"
    record(d / "orig.fio", PRODUCTION, seconds, src, orig)
    out: dict = {"seconds": seconds * times, "requests": tile(orig, times, hour)}
    out["trace_bytes"] = hour.stat().st_size
    args = ["replay", "plan", str(hour), "-o", str(d / "jobs"), "--mode", "exact"]
    out["plan_s"], out["plan_rss_mib"] = _cli([*args, "--target", f"all={dst}"])
    man = plan_document.load(d / "jobs" / "plan.json")
    out["jobs"], out["layout"] = len(man.jobs), man.exact_layout or "pieces"
    out["planned_requests"] = sum(j.requests for j in man.jobs)
    out["jobdir_bytes"] = sum(f.stat().st_size for f in (d / "jobs").rglob("*") if f.is_file())
    shutil.rmtree(d)
    return out


def _long_brief(r: dict) -> dict:
    keep = ("iops_mape_pct", "issue_error_ms", "floor_goal", "worst_window", "meets_goal")
    return {
        **{k: r[k] for k in r if k not in VARIANTS_LONG},
        **{v: {k: r[v][k] for k in keep} for v in VARIANTS_LONG if v in r},
    }


def main_plan_hour(a: argparse.Namespace) -> None:
    with two_loops() as (src, dst):
        tmp = Path(tempfile.mkdtemp(prefix="iotape-bench-hour-", dir="/var/tmp"))
        res = plan_hour(tmp, src, dst)
    doc = {
        "what": "planning a 1-hour trace (the production mix recorded for 60 s, tiled 60 "
        "times): `iotape replay plan --mode exact` in its own process",
        "goal": "written in minutes, peak RSS < 1 GiB",
        "machine": machine(),
        "result": res,
    }
    out = a.output or ROOT / "bench" / "results" / "replay-plan-hour.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=1))


def main_long(a: argparse.Namespace) -> None:
    lengths = [int(x) for x in a.long.split(",")] + ([3600] if a.hour else [])
    others = [x for x in a.layouts.split(",") if x]
    rounds: list[dict] = []
    with two_loops() as (src, dst):
        for k in range(a.rounds):
            res = {}
            tmp = Path(tempfile.mkdtemp(prefix="iotape-bench-long-", dir="/var/tmp"))
            for n in lengths:
                res[f"{n}s"] = one_long(
                    n, tmp, src, dst, others if n <= a.others_up_to else [], a.anchor_up_to
                )
                print(f"round {k + 1}", json.dumps(_long_brief(res[f"{n}s"])), flush=True)
            # Kept for a closer look (a 10 min trace's files are ~1 GB): say where.
            print("work files:", tmp, flush=True)
            rounds.append(res)
    doc = {
        "what": "long exact replays (issue 23): iotape against fio's plain replay, each "
        "judged against the wake-up floor measured during its own run",
        "goal": "per-second IOPS error <= 1 %, issue-time p99 <= 3x the floor's p99, no 5 s "
        "window's p99 beyond 5x its floor; peak RSS of plan/run/fidelity < 1 GiB",
        "machine": machine(),
        "fio": fio_version(),
        "summary": [{n: _long_brief(r) for n, r in rnd.items()} for rnd in rounds],
        "rounds": rounds,
    }
    out = a.output or ROOT / "bench" / "results" / "replay-long.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=1))
    print(out)
