"""A trace's dependent replay against its plan's critical path (issue 34): how much
of what the plan allows iotape-lanes reaches, with each build of its waits.

TRACE (an HDD-like trace of the reference workload: `replay_dependent_workload.py
--keep DIR` keeps one) planned `--timing dependent` (`--long-thinks demand`) and
`afap` onto a loop device over /dev/shm (SIZE_MB, written), each plan run by
iotape-lanes in a fresh process (in its job directory, its own delay timed as
`replay run` would) by each runner in turn, ROUNDS times: `--lanes-before PATH`
(another build: main's), this build asleep (IOTAPE_LANES_SPIN_US=0), on threads
with the spin rule (IOTAPE_LANES_EVLOOP=0) and with the event loop
(replayer/src/evloop.c; lanes_hop.RUNNERS). Transactional requests (db-read, db-write) a second over
their jobs' first issue to last completion, beside the plan's critical path at
SERVICE_US a request (bench/dependent_critical_path.py: no runner cost at all),
and each run beside its own critical path (its jobs' mean service times, its
thinks net of its own delay: path_tx_per_s) with what it took beyond that path a
hop of it (overhead_us_per_hop: the runner's cost at each hop).

    flock /tmp/iotape-bench.lock .venv/bin/python bench/lanes_hop_plan.py TRACE
        [--rounds 3] [--lanes-before PATH] [--size-mb 512] [--timings dependent]
        [--runners threads,loop]
    (a run lasts as long as the trace's clocked threads do: ~75 s for the reference
    workload's maintenance reads; --timings and --runners pick fewer)
    (root: losetup; JSON in bench/results/lanes-hop-plan.json)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import cpu_condition as cpu
from dependent_critical_path import critical_path
from lanes_hop import RUNNERS, lanes_json
from lanes_hop_split import split

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replayer.plan.build import PlanOptions, plan  # noqa: E402
from replayer.run import around, runner  # noqa: E402
from schemas.streams import TRANSACTIONAL  # noqa: E402

OUT = ROOT / "bench" / "results" / "lanes-hop-plan.json"


def run_path(doc: dict, jobdir: Path, default_ns: int) -> dict:
    """The plan's critical path as this run replayed it: each job's requests at the
    run's own mean service time (its completions' mean time in the caller), each
    think net of the run's own delay by its rule (deps.c), no runner cost a hop."""
    svc = {}
    for j in doc["jobs"]:
        n = sum(j[d]["total_ios"] for d in ("read", "write"))
        tot = sum(j[d]["clat_ns"]["mean"] * j[d]["total_ios"] for d in ("read", "write"))
        svc[j["jobname"]] = round(tot / n) if n else default_ns
    net = doc["dependencies"]["think_net"]
    asleep = round(net["own_floor_us"] * 1000)
    awake = round(net.get("own_awake_us", net["own_floor_us"]) * 1000)
    rule = doc["dependencies"].get("spin_think_us")
    # before the spin rule: every relative think waited its end awake (spin_us > 0)
    below = round(rule * 1000) if rule is not None else (1 << 62 if awake != asleep else 0)
    return critical_path(jobdir, svc, (awake, asleep), below)


def tx_per_s(binary: Path, jobdir: Path, knobs: dict[str, str], service_ns: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOTAPE_LANES_")}
    hops = jobdir / "hops.txt"  # the runner's record of each request (hops.c), where it has one
    hops.unlink(missing_ok=True)
    env["IOTAPE_LANES_HOPS"] = str(hops)
    # +probe: `replay run`'s wake-up probe beside the run, as an open-loop replay has it
    probe = knobs.get("probe")
    knobs = {k: v for k, v in knobs.items() if k != "probe"}
    with around.wakeup_probe(jobdir / "wakeup.json") if probe else contextlib.nullcontext():
        doc = lanes_json(binary, jobdir, env, knobs)
    tx = [j for j in doc["jobs"] if any(f".{s}" in j["jobname"] for s in TRANSACTIONAL)]
    n = sum(j[d]["total_ios"] for j in tx for d in ("read", "write"))
    span = max(j["last_ns"] for j in tx) - min(j["first_ns"] for j in tx)
    dep = doc["dependencies"]
    cp = run_path(doc, jobdir, service_ns)
    # what the run took beyond its own critical path, a hop of that path
    over = (span / 1e6 - cp["tx_span_ms"]) * 1e3 / cp["hops"]
    return {"tx_per_s": round(n / (span / 1e9)), "tx_requests": n,
            "early": dep["issued_before_predecessor"], "spin_us": dep.get("spin_us"),
            "own_delay_us": dep["think_net"]["own_floor_us"],
            "own_awake_us": dep["think_net"].get("own_awake_us"),
            "thinks_awake": dep.get("thinks_awake"), "thinks_asleep": dep.get("thinks_asleep"),
            "path_tx_per_s": cp["tx_per_s"], "path_hops": cp["hops"],
            "overhead_us_per_hop": round(over, 1),
            "cpu_s": round(sum(doc.get("cpu_s", {}).values()), 3),
            "loop_jobs": doc.get("evloop", {}).get("jobs", 0),
            **({"hop_split": split(jobdir, hops)} if hops.exists() else {})}  # fmt: skip


def _runners(specs: str, before: Path | None) -> list[tuple[str, Path, dict[str, str]]]:
    """Each of `specs` (NAME or NAME+KEY=VALUE+...: a runner of lanes_hop.RUNNERS
    with more knobs; +probe: replay run's wake-up probe beside it), after `before`."""
    out: list[tuple[str, Path, dict[str, str]]] = []
    for spec in specs.split(","):
        name, *extra = spec.split("+")
        knobs = RUNNERS[name] | dict((e + "=1").split("=")[:2] for e in extra)
        out.append((spec, runner.LANES, knobs))
    if before:
        out.insert(0, ("before", before, {}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lanes-before", type=Path)
    ap.add_argument("--size-mb", type=int, default=512)
    ap.add_argument("--service-us", type=float, default=20.0)
    ap.add_argument(
        "--condition",
        choices=cpu.CONDITIONS,
        default="awake",
        help="the CPUs' condition for every run (as replay_dependent_workload.py's)",
    )
    ap.add_argument("--timings", default="dependent,afap", help="the plans' timings, of these")
    ap.add_argument("--runners", default=",".join(RUNNERS), help="this build's, of these")
    ap.add_argument("--think-calibrate", type=Path, help="plan with --think-calibrate CAL.iot")
    ap.add_argument(
        "--keep", type=Path, help="copy each round's job dirs here (hops: the last runner's)"
    )
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    runners = _runners(a.runners, a.lanes_before)
    work = Path(tempfile.mkdtemp(prefix="lanehop-plan-"))
    if a.keep:
        a.keep.mkdir(parents=True, exist_ok=True)
    fd, img = tempfile.mkstemp(prefix="lanehop-plan-", suffix=".img", dir="/dev/shm")
    dev = None
    try:
        with os.fdopen(fd, "wb") as f:  # written, not sparse
            for _ in range(a.size_mb):
                f.write(b"\xa5" * (1 << 20))
        dev = subprocess.run(["losetup", "--find", "--show", "--direct-io=off", img],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        plans = {}
        for timing in a.timings.split(","):
            jobdir = work / timing
            cal = a.think_calibrate if timing == "dependent" else None
            plan(PlanOptions(trace=a.trace, jobdir=jobdir, targets=[f"all={dev}"], timing=timing,
                             long_thinks="demand", think_calibrate=cal))  # fmt: skip
            plans[timing] = jobdir
        load = [os.getloadavg()[0]]
        doc: dict = {"trace": str(a.trace), "device": "loop over /dev/shm", "load_1min": load,
                     "condition": a.condition,
                     "critical_path": {}, "rounds": []}  # fmt: skip
        for timing, jobdir in plans.items():
            doc["critical_path"][timing] = critical_path(jobdir, int(a.service_us * 1000))
            for own_us in (15, 55):  # the own delay awake and asleep (calib.c)
                doc["critical_path"][f"{timing}, thinks net of {own_us} us"] = critical_path(
                    jobdir, int(a.service_us * 1000), own_us * 1000
                )
        for r in range(a.rounds):
            with cpu.hold(a.condition):
                got = {f"{t}_{name}": tx_per_s(b, jd, knobs, int(a.service_us * 1000))
                       for t, jd in plans.items() for name, b, knobs in runners}  # fmt: skip
            print(json.dumps({"round": r, **got}), file=sys.stderr)
            if a.keep:  # the plan and what each run wrote, for a look after the round
                for t, jd in plans.items():
                    subprocess.run(["cp", "-r", str(jd), str(a.keep / f"{t}-{r}")], check=True)
            doc["rounds"].append(got)
        doc["load_1min"].append(os.getloadavg()[0])
        doc["median_tx_per_s"] = {
            k: statistics.median(rd[k]["tx_per_s"] for rd in doc["rounds"])
            for k in doc["rounds"][0]
        }
        doc["median_overhead_us_per_hop"] = {
            k: statistics.median(rd[k]["overhead_us_per_hop"] for rd in doc["rounds"])
            for k in doc["rounds"][0]
        }
    finally:
        if dev:
            subprocess.run(["losetup", "-d", dev], check=False)
        os.unlink(img)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    cp = {t: v.get("tx_per_s") for t, v in doc["critical_path"].items()}
    over = doc["median_overhead_us_per_hop"]
    print(json.dumps({"critical_path_tx_per_s": cp, "median_tx_per_s": doc["median_tx_per_s"],
                      "median_overhead_us_per_hop": over}))  # fmt: skip


if __name__ == "__main__":
    main()
