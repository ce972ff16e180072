"""`bench/replay.py --parts locality` (issue 26): synthetic replays of traces with
known locality (zipf, zoned, a moving hot spot), judged on their LRU curves."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from replay_lab import ROOT, fio_version, machine, record, two_loops

from replayer.plan import locality
from replayer.plan.build import PlanOptions, plan
from replayer.run import execute as runmod
from replayer.run import fidelity

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


def _meets_locality_goal(loc: dict, iops_pct: float | None) -> bool:
    return loc["faithful"] and iops_pct is not None and iops_pct <= 1.0


def one_locality(name: str, body: str, seconds: int, work: Path, src: str, dst: str) -> dict:
    d = work / name
    d.mkdir()
    orig = d / "orig.iot"
    record(d / "orig.fio", body, seconds, src, orig)
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
    res: dict = {}
    with (
        two_loops() as (src, dst),
        tempfile.TemporaryDirectory(prefix="iotape-bench-locality-") as tmp,
    ):
        for name, body in locality_traces(a.seconds).items():
            res[name] = one_locality(name, body, a.seconds, Path(tmp), src, dst)
            print(name, json.dumps(_brief(res[name])), flush=True)
    doc = {
        "what": "synthetic replay locality (issue 26): LRU curve, footprint, IOPS error",
        "goal": "LRU hit ratio within max(3 pp, 15 % rel.) at 1-50 % of the footprint, "
        "footprint within 5 %, per-second IOPS error <= 1 %",
        "unit_bytes": locality.UNIT,
        "machine": machine(),
        "fio": fio_version(),
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
