"""The critical path of a trace's closed-loop plans (issue 34): `replay plan
--timing dependent` (with each `--long-thinks`; `--run-queue recorded` beside the
default net) and `--timing afap` of TRACE,
each request issued at the latest completion it waits for plus its think time
(its job's iodepth slots kept), each taking SERVICE_US: how fast the plan could
replay on a device of that service time, with no cost of the runner's own. The
transactional requests (db-read, db-write) over their span give tx/s; the
path's time is split by job, think and service, and `hops` counts its requests.
`critical_path(..., own_ns=D)` replays each relative think as iotape-lanes does
(deps.c net_think: less the smaller of its job's floor, its smallest think, and
the host's own delay D, or a pair (awake, asleep) picked per think by
`awake_below_ns`, the runner's spin rule), and a service time may be given per
job: what a run's own figures say the path is, with no runner cost a hop.

    .venv/bin/python bench/dependent_critical_path.py TRACE [--service-us 20] [--think-scale F]
        [--think-calibrate TARGET_TRACE]   (the default plan with it too: thinkcal.py)
    (no root; JSON on stdout, or -o FILE)
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import tempfile
from collections import Counter
from pathlib import Path

from replayer.plan.build import PlanOptions, plan
from schemas.streams import TRANSACTIONAL

Way = tuple[list[int], bool, int]  # what a request waits for, whether THINK is @US, its ns


def _way(after: str, think: str) -> Way:
    return ([] if after == "-" else [int(x) for x in after.split(",")], think.startswith("@"),
            int(think.lstrip("@")) * 1000)  # fmt: skip


def _jobs(jobdir: Path) -> tuple[dict[int, tuple[str, Way, Way | None]], dict[str, int]]:
    """Each request by id: (its job, its way, its `or` way: deps.c)."""
    text = (jobdir / "replay.fio").read_text()
    depth = {k: int(v) for k, v in re.findall(r"\[([^\]]+)\]\nread_iolog=\S+\niodepth=(\d+)", text)}
    reqs = {}
    for log in (jobdir / "iologs").glob("*.log"):
        for line in log.read_text().splitlines()[2:]:
            if line.startswith(("lazy ", "clock ", "cpu ")):  # lazywrite.c, clockjob.c, cpubudget.c
                continue
            # group commit's clauses: not the plan's path
            f = line.split(" join ")[0].split(" same-turn")[0].split()
            alt = _way(f[7], f[8]) if len(f) > 6 else None
            reqs[int(f[0])] = (log.stem, _way(f[1], f[2]), alt)
    return reqs, depth


def _due(way: Way, end: dict[int, int]) -> tuple[int, int | None]:
    """When a way lets its request go, and the request whose completion sets it."""
    after, absolute, t = way
    last = max(after, key=lambda x: end[x]) if after else None
    return (t, None) if absolute else ((end[last] if last is not None else 0) + t, last)


Own = int | tuple[int, int]  # the host's own delay, or (awake, asleep) by the spin rule


def net_thinks(reqs: dict[int, tuple[str, Way, Way | None]], own_ns: Own,
               awake_below_ns: int = 0) -> dict[int, tuple[str, Way, Way | None]]:  # fmt: skip
    """Each relative think as iotape-lanes replays it (deps.c deps_start)."""
    floor: dict[str, int] = {}
    for job, (_, absolute, t), _alt in reqs.values():
        if not absolute:
            floor[job] = min(floor.get(job, t), t)

    def net(job: str, way: Way, recorded: int) -> Way:
        after, absolute, t = way
        own = own_ns if isinstance(own_ns, int) else own_ns[recorded >= awake_below_ns]
        return way if absolute else (after, False, max(0, t - min(floor[job], own)))

    out = {}
    for i, (job, way, alt) in reqs.items():
        rec = way[2] if not way[1] else awake_below_ns  # an absolute time: slept
        out[i] = (job, net(job, way, rec), net(job, alt, rec) if alt else None)
    return out


def critical_path(jobdir: Path, service_ns: int | dict[str, int], own_ns: Own | None = None,
                  awake_below_ns: int = 0) -> dict:  # fmt: skip
    reqs, depth = _jobs(jobdir)
    if own_ns is not None:
        reqs = net_thinks(reqs, own_ns, awake_below_ns)
    svc = (lambda job: service_ns) if isinstance(service_ns, int) else service_ns.__getitem__
    end: dict[int, int] = {}
    issue: dict[int, int] = {}
    why: dict[int, int | None] = {}  # the request whose completion set the issue
    slots: dict[str, list[tuple[int, int]]] = {}
    for i in sorted(reqs):
        job, way, alt = reqs[i]
        h = slots.setdefault(job, [])
        free, prev = heapq.heappop(h) if len(h) >= depth.get(job, 1) else (0, None)
        at, last = _due(way, end)
        if alt is not None:  # the earlier of its two ways
            at, last = min((at, last), _due(alt, end), key=lambda x: x[0])
        issue[i], why[i] = (at, last) if at >= free else (free, prev)
        end[i] = issue[i] + svc(job)
        heapq.heappush(h, (end[i], i))
    tx = [i for i in reqs if any(f".{s}" in reqs[i][0] for s in TRANSACTIONAL)]
    if not tx:
        return {"requests": len(reqs), "tx_requests": 0}
    last_tx = max(tx, key=lambda i: end[i])
    t0 = min(issue[i] for i in tx)
    spent: Counter[str] = Counter()
    k, hops = last_tx, 0
    while True:  # back from the last transactional completion to the first issue
        job = reqs[k][0]
        spent[f"{job} service"] += svc(job)
        hops += 1
        p = why[k]
        # the time from what set its issue to its issue: its think after the
        # latest of what it waits for, or its wait for a free slot of its job
        start = max(end[p] if p is not None else t0, t0)
        ways = [reqs[k][1], *([reqs[k][2]] if reqs[k][2] else [])]
        kind = "think" if p is None or any(p in w[0] for w in ways) else "slot"
        spent[f"{job} {kind}"] += max(0, issue[k] - start)
        if p is None or end[p] <= t0:
            break
        k = p
    span = end[last_tx] - t0
    return {
        "requests": len(reqs),
        "tx_requests": len(tx),
        "tx_span_ms": round(span / 1e6, 2),
        "tx_per_s": round(len(tx) / (span / 1e9)),
        "hops": hops,
        "path_ms": {k: round(v / 1e6, 2) for k, v in spent.most_common() if v},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--service-us", type=float, default=20.0)
    ap.add_argument("--think-scale", type=float, default=1.0, help="the dependent plans'")
    ap.add_argument(
        "--think-calibrate",
        type=Path,
        help="also the default dependent plan with --think-calibrate this trace",
    )
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args()
    out: dict = {"trace": str(args.trace), "service_us": args.service_us,
                 "think_scale": args.think_scale, "plans": {},
                 "think_calibrate": str(args.think_calibrate) if args.think_calibrate
                 else None}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="iotape-cpath-") as tmp:
        target = Path(tmp) / "target.img"
        target.touch()
        os.truncate(target, 1 << 40)  # sparse: a plan needs a target that holds it
        cal = [("dependent --think-calibrate", "dependent", "demand", "net")]
        for name, timing, lt, rq in (
            *(cal if args.think_calibrate else []),
            ("dependent --long-thinks demand", "dependent", "demand", "net"),
            ("dependent --long-thinks demand --run-queue recorded", "dependent", "demand",
             "recorded"),
            ("dependent --long-thinks recorded", "dependent", "recorded", "net"),
            ("afap", "afap", "demand", "net"),
        ):  # fmt: skip
            jobdir = Path(tmp) / name.replace(" ", "_")
            scale = args.think_scale if timing == "dependent" else 1.0
            opts = PlanOptions(trace=args.trace, jobdir=jobdir, targets=[f"all={target}"],
                               timing=timing, long_thinks=lt, think_scale=scale,
                               run_queue=rq, think_calibrate=args.think_calibrate
                               if "calibrate" in name else None)  # fmt: skip
            plan(opts)
            out["plans"][name] = critical_path(jobdir, int(args.service_us * 1000))
    text = json.dumps(out, indent=2)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
