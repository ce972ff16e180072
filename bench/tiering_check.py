"""Projected against measured tiered latency on two real devices (issue 7).

A trace (fio 4 KiB random reads, Zipf 1.1 over 256 MiB, Poisson arrivals at
--rate IOPS, recorded with `iotape record`) is checked with
`iotape replay tiering-check` (replayer/run/tiering_check.py) on the hybrid lab
(bench/hybrid_lab.py): fast = loop over /dev/shm, slow = direct-I/O loop over the
real disk, throttled by a cgroup v1 blkio IOPS limit. Policy: an LRU SSD read
cache of 4 KiB units at two sizes.

For each configuration and round:
- iotape: the projection from the profile replay (trace sent to both devices at
  once) against the replay split by the simulated placement;
- peer: the same projection from two separate pure replays (all on slow, then all
  on fast), the textbook way to profile devices, against the same split replay.
Errors are projected / measured - 1 for p50, p99 and mean.

Two throttle settings: `capped` (limit twice the trace's rate: the slow device is
never saturated) and `saturated` (limit below the trace's rate: the all-slow
profile queues in the throttle, the split replay, with fewer requests on the slow
device, does not; a projection from a saturated profile must be pessimistic).

Goal (issue 7): p50 and mean within 15 %. Writes bench/results/tiering_check.json.
Run (root): `.venv/bin/python bench/tiering_check.py [--rounds 3] [--seconds 8]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from hybrid_lab import HybridLab  # noqa: E402

from analyzer.tiering.events import Events, load_trace  # noqa: E402
from analyzer.tiering.params import parse_size  # noqa: E402
from analyzer.tiering.presets import params_for  # noqa: E402
from analyzer.tiering.simulate import simulate  # noqa: E402
from replayer.plan import build as planmod  # noqa: E402
from replayer.run import execute as runmod  # noqa: E402
from replayer.run import tiering_check  # noqa: E402

IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")
CAPACITIES = ("256K", "4M")


def record_source(dev: str, out: Path, rate: int, seconds: int) -> None:
    fio = ["fio", "--name=src", f"--filename={dev}", "--rw=randread", "--bs=4k", "--direct=1",
           "--ioengine=psync", "--random_distribution=zipf:1.1", "--size=256M",
           f"--rate_iops={rate}", "--rate_process=poisson", f"--runtime={seconds}",
           "--time_based"]  # fmt: skip
    subprocess.run([IOTAPE, "record", "-d", dev, "-o", str(out), "--force", "--", *fio],
                   check=True, capture_output=True)  # fmt: skip


def pure_replay(src: Path, dev: str, work: Path, name: str, destroy: list[str]) -> Events:
    jobdir = work / f"{name}.jobs"
    planmod.plan(
        planmod.PlanOptions(
            trace=src, jobdir=jobdir, targets=[f"all={dev}"], force=True, destroy=destroy
        )
    )
    rec = work / f"{name}.iot"
    runmod.run(jobdir, rec, destroy, None, True)
    return load_trace(str(rec))


def one_round(lab: HybridLab, src: Path, cap: str, work: Path) -> dict:
    p = params_for("lru", unit=4096, capacity=parse_size(cap))
    destroy = [lab.fast, lab.slow]
    res = tiering_check.check(src, lab.fast, lab.slow, p, work / "check", destroy, force=True)
    measured = load_trace(res["replays"]["tiered"])
    slow = pure_replay(src, lab.slow, work, "slow", destroy)
    fast = pure_replay(src, lab.fast, work, "fast", destroy)
    peer = simulate(load_trace(str(src)), p, fast=fast, slow=slow,
                            measured=measured)["latency"]  # fmt: skip
    return {
        "fast_share": res["split"]["fast_share_of_reads_writes"],
        "iotape": res["latency"],
        "isolated_profiles": peer,
    }


def summary(rounds: list[dict], key: str) -> dict:
    out = {}
    for k in ("p50", "p99", "mean"):
        errs = [r[key]["error"][k] for r in rounds]
        out[f"{k}_error"] = {"median": statistics.median(errs), "rounds": errs}
    out["meets_goal"] = all(abs(out[f"{k}_error"]["median"]) <= 0.15 for k in ("p50", "mean"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rate", type=int, default=2000)
    args = ap.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="iotape-tc-") as tmp, HybridLab() as lab:
        work = Path(tmp)
        src = work / "source.iot"
        record_source(lab.fast, src, args.rate, args.seconds)
        lab.join()
        for throttle, iops in (("capped", 2 * args.rate), ("saturated", args.rate * 3 // 4)):
            lab.set_slow_iops(iops)
            for cap in CAPACITIES:
                rounds = [one_round(lab, src, cap, work) for _ in range(args.rounds)]
                name = f"{throttle}-{cap}"
                results[name] = {
                    "slow_iops_limit": iops,
                    "cache": cap,
                    "fast_share": rounds[0]["fast_share"],
                    "iotape": summary(rounds, "iotape"),
                    "isolated_profiles": summary(rounds, "isolated_profiles"),
                    "latency_us_last_round": {
                        k: {m: round(v / 1e3, 1) for m, v in d.items() if m.endswith("_ns") and v}
                        for k, d in rounds[-1]["iotape"].items()
                        if k != "error"
                    },
                }
                print(name, json.dumps(results[name]["iotape"]), flush=True)
    out = {
        "what": "tiered latency: projected (iotape analyze tiering) vs measured (split replay)",
        "goal": "p50 and mean within 15 %",
        "machine": {"kernel": platform.release(), "cpus": __import__("os").cpu_count()},
        "trace": f"fio randread 4k zipf:1.1 over 256 MiB, {args.rate} IOPS Poisson, "
        f"{args.seconds} s",
        "policy": "lru, 4 KiB units (an SSD read cache)",
        "peer": "isolated_profiles: the same projection from two separate pure replays",
        "rounds": args.rounds,
        "results": results,
    }
    dest = ROOT / "bench" / "results" / "tiering_check.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
