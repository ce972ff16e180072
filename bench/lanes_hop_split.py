"""Where a whole dependent plan's hops go (issue 34), from the runner's own record
of each request (iotape-lanes with IOTAPE_LANES_HOPS=FILE: replayer/src/hops.c).

The run's own critical path, walked back from the last transactional completion:
each request's issue was set either by the latest completion it waited for (its
think after it) or, where its thread was still busy with its previous request
at its due time, by that request (its job's iodepth). Per hop of that path: the
think as replayed (due - ready), the runner's lateness (issue - the later of due
and its thread's previous completion) and the service as the caller saw it
(done - issue), which add up to the run's transactional span; the lateness split
by how the request waited (the HOP_* bits of replayer/src/lanes.h: asleep on its
predecessor's futex, awake, no spinner free, its think's end slept or awake).
Beside it, per job: each request's lateness and service (by whether it came
awake), and its threads' CPU time, run-queue wait and runs (schedstat). No
timing of its own: it reads what a run wrote.

    .venv/bin/python bench/lanes_hop_split.py JOBDIR HOPS [-o FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path

from dependent_critical_path import _jobs

from schemas.streams import TRANSACTIONAL

BITS = {1: "pred_spun", 2: "pred_slept", 4: "awake_rule", 8: "think_spun", 16: "think_slept",
        32: "no_spinner"}  # fmt: skip


def read_hops(path: Path) -> tuple[dict[int, str], dict[int, tuple[int, ...]]]:
    """Job names by index; each request: (job, tid, ready, noticed, due, at, done, how)."""
    return _read(path)[:2]


def _read(path: Path) -> tuple[dict[int, str], dict[int, tuple[int, ...]], dict[str, dict]]:
    jobs: dict[int, str] = {}
    sched: dict[str, dict] = {}
    reqs: dict[int, tuple[int, ...]] = {}
    lines = path.read_text().splitlines()
    if not lines or lines[0] != "iotape-lanes hops 1":
        raise SystemExit(f"{path}: not an iotape-lanes hops file")
    for ln in lines[1:]:
        f = ln.split()
        if f[0] == "job":
            jobs[int(f[1])] = f[2]
            threads, on, rq, runs = (int(x) for x in f[3:7])
            sched[f[2]] = {"threads": threads, "on_cpu_ms": round(on / 1e6, 2),
                           "run_queue_ms": round(rq / 1e6, 2), "runs": runs}  # fmt: skip
        else:
            reqs[int(f[0])] = tuple(int(x) for x in f[1:])
    return jobs, reqs, sched


def _stats(v: list[int]) -> dict:
    """Count, median and mean of ns, in us."""
    return {"n": len(v), "p50": round(statistics.median(v) / 1e3, 1),
            "mean": round(statistics.fmean(v) / 1e3, 1)}  # fmt: skip


def how_name(how: int) -> str:
    return "+".join(v for k, v in BITS.items() if how & k and k != 4) or "none"


def split(jobdir: Path, hops: Path) -> dict:
    names, reqs, sched = _read(hops)
    plan, _ = _jobs(jobdir)
    prev: dict[int, int | None] = {}  # the same thread's previous request
    last_of: dict[int, int] = {}
    for i in sorted(reqs, key=lambda i: reqs[i][5]):
        tid = reqs[i][1]
        prev[i] = last_of.get(tid)
        last_of[tid] = i
    job = {i: names[r[0]] for i, r in reqs.items()}
    tx = [i for i in reqs if any(f".{s}" in job[i] for s in TRANSACTIONAL)]
    k = max(tx, key=lambda i: reqs[i][6])
    t0 = min(reqs[i][5] for i in tx)
    spent: Counter[str] = Counter()
    late_how: Counter[str] = Counter()
    hops_n = 0
    busy_hops = 0
    while True:  # [max(setter's completion, t0), issue] is think + late, or late alone
        _j, _tid, ready, _noticed, due, at, done, how = reqs[k]
        hops_n += 1
        p = prev[k]
        busy = p is not None and reqs[p][6] > due  # its thread was still on p at its due
        start = max(reqs[p][6] if busy and p is not None else due, t0)
        spent[f"{job[k]} service"] += done - at
        spent[f"{job[k]} late"] += max(0, at - start)
        late_how[how_name(how)] += max(0, at - start)
        if busy:
            busy_hops += 1
            nxt = p
        else:
            spent[f"{job[k]} think"] += max(0, start - max(ready, t0))
            ways = [plan[k][1][0], *([plan[k][2][0]] if plan[k][2] else [])]
            done_at = {q: reqs[q][6] for w in ways for q in w if q in reqs}
            nxt = next((q for q, d in done_at.items() if d == ready), None)
        if nxt is None or reqs[nxt][6] <= t0:
            break
        k = nxt
    span = max(reqs[i][6] for i in tx) - t0
    total = Counter[str]()
    for key, v in spent.items():
        total[key.rsplit(" ", 1)[1]] += v
    by_job: dict[str, list[int]] = defaultdict(list)
    svc: dict[str, list[int]] = defaultdict(list)  # by job and whether it came awake
    for _i, (j, _tid, _r, _n, due, at, done, how) in reqs.items():
        by_job[names[j]].append(at - due)
        awake = "awake" if how & 9 and not how & 18 else "slept" if how & 18 else "no wait"
        svc[f"{names[j]} {awake}"].append(done - at)
    return {
        "tx_requests": len(tx),
        "tx_per_s": round(len(tx) / (span / 1e9)),
        "tx_span_ms": round(span / 1e6, 2),
        "path_hops": hops_n,
        "path_hops_after_own_thread": busy_hops,
        "path_ms": {k: round(v / 1e6, 2) for k, v in total.most_common()},
        "path_us_per_hop": {k: round(v / 1e3 / hops_n, 1) for k, v in total.most_common()},
        "path_ms_by_job": {k: round(v / 1e6, 2) for k, v in spent.most_common() if v},
        "path_late_ms_by_wait": {k: round(v / 1e6, 2) for k, v in late_how.most_common()},
        "sched_by_job": sched,
        "service_us_by_job": {k: _stats(v) for k, v in sorted(svc.items())},
        "late_us_by_job": {k: _stats(v) for k, v in sorted(by_job.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jobdir", type=Path)
    ap.add_argument("hops", type=Path)
    ap.add_argument("-o", "--output", type=Path)
    a = ap.parse_args()
    text = json.dumps(split(a.jobdir, a.hops), indent=2)
    if a.output:
        a.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
