"""Why long fio iolog jobs drift, and lanes do not (issue 23), measured on fio 3.33.

The same requests (LANES jobs, each RATE Poisson 4 KiB reads a second, for
SECONDS) replayed twice from hand-written iologs on a loop device over
/dev/shm, recorded by iotape's eBPF recorder (every offset unique, so each
replayed request is matched to its planned time):
- `v3`: version-3 iologs, each job's first entry at an absolute time (the
  iotape `wait` line), every later one `t[i] - t[i-1]` after the previous issue;
- `v2`: version-2 iologs with a `wait MS` (absolute, ms since genesis) before
  each request: iotape's lanes (replayer/plan/lanes.py).
Reported per layout: each request's lateness relative to its job's first
request (what a job accumulates), its p99 per tenth of the trace, and the error
after aligning the whole replay by its median (what `replay fidelity` reports).

Run as root: `flock /tmp/iotape-bench.lock .venv/bin/python bench/replay_drift.py`
(bench/results/replay-drift.json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
from replay_lab import ROOT, fio_version, machine, two_loops

from recorder.capture import record as rec
from replayer.plan.source import load

START_MS = 1000  # the trace's 0, ms after fio's start (v3) or genesis (v2)
DEVICE_MB = 1024


def _logs(dev: str, work: Path, layout: str, plans: list[tuple[np.ndarray, np.ndarray]]) -> Path:
    job = ["[global]\nioengine=psync\ndirect=1\nthread=1\nclocksource=cpu\ninvalidate=0\n"]
    for k, (t, off) in enumerate(plans):
        if layout == "v3":
            base = START_MS * 1000
            head = f"fio version 3 iolog\n1 {dev} wait 0 0\n{base - 1000} {dev} add\n"
            head += f"{base - 1000} {dev} open\n"
            body = [
                f"{base + x} {dev} read {o} 4096\n"
                for x, o in zip(t.tolist(), off.tolist(), strict=True)
            ]
            tail = f"{base + int(t[-1])} {dev} close\n"
        else:
            head = f"fio version 2 iolog\n{dev} add\n{dev} open\n"
            body = [
                f"{dev} wait {START_MS + x // 1000} {x % 1000}\n{dev} read {o} 4096\n"
                for x, o in zip(t.tolist(), off.tolist(), strict=True)
            ]
            tail = f"{dev} close\n"
        (work / f"l{k}.log").write_text(head + "".join(body) + tail)
        job.append(f"[l{k}]\nread_iolog={work}/l{k}.log\n")
    (work / "job.fio").write_text("".join(job))
    return work / "job.fio"


def _q(a: np.ndarray, p: float) -> float:
    return round(float(np.percentile(a, p)), 3)


def one(dev: str, work: Path, layout: str, a: argparse.Namespace) -> dict:
    rng = np.random.default_rng(1)
    offs = rng.permutation(DEVICE_MB * 256) * 4096  # every 4 KiB block once, at most
    plans, used = [], 0
    for _k in range(a.lanes):
        t = np.cumsum(rng.exponential(1e6 / a.rate, int(a.seconds * a.rate * 2))).astype(np.int64)
        t = t[t < a.seconds * 1e6]
        if used + len(t) > len(offs):
            raise SystemExit("more requests than 4 KiB blocks: fewer --lanes or --seconds")
        plans.append((t, offs[used : used + len(t)]))
        used += len(t)
    job = _logs(dev, work, layout, plans)
    rep = work / "rep.iot"
    rec.record(
        rec.RecordOptions(
            devices=[dev], output=rep, command=["fio", "--output=/dev/null", str(job)]
        )
    )
    r = load(rep).records
    where = {
        int(o): (k, j) for k, (_t, off) in enumerate(plans) for j, o in enumerate(off.tolist())
    }
    got: list[dict[int, int]] = [{} for _ in plans]
    for o, ti in zip(r["offset"].tolist(), r["ts_issue_ns"].tolist(), strict=True):
        if o in where:
            k, j = where[o]
            got[k][j] = ti // 1000
    rel: list[np.ndarray] = []
    ab: list[np.ndarray] = []
    tenths: list[list[np.ndarray]] = [[] for _ in range(10)]
    for k, (t, _off) in enumerate(plans):
        js = np.array(sorted(got[k]))
        issued = np.array([got[k][j] for j in js])
        d = (issued - issued[0]) - (t[js] - t[js[0]])
        rel.append(d)
        ab.append(issued - t[js])
        for i in range(10):
            tenths[i].append(d[len(d) * i // 10 : len(d) * (i + 1) // 10])
    lat = np.concatenate(rel) / 1000
    err = np.concatenate(ab) / 1000
    err = np.abs(err - np.median(err))
    return {
        "requests": len(lat),
        "planned": int(sum(len(t) for t, _ in plans)),
        "lateness_in_job_ms": {"p50": _q(lat, 50), "p99": _q(lat, 99), "max": _q(lat, 100)},
        "lateness_p99_ms_by_tenth": [_q(np.concatenate(x) / 1000, 99) for x in tenths],
        "error_median_aligned_ms": {"p50": _q(err, 50), "p99": _q(err, 99)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--lanes", type=int, default=100)
    ap.add_argument("--rate", type=float, default=80, help="requests per second per job")
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "replay-drift.json")
    a = ap.parse_args()
    res = {}
    with two_loops(DEVICE_MB) as (dev, _unused):
        for layout in ("v3", "v2"):
            work = Path(tempfile.mkdtemp(prefix=f"iotape-drift-{layout}-", dir="/var/tmp"))
            res[layout] = one(dev, work, layout, a)
            shutil.rmtree(work)
            print(layout, json.dumps(res[layout]), flush=True)
    doc = {
        "what": __doc__.split("\n\n")[0],
        "setup": {"seconds": a.seconds, "jobs": a.lanes, "rate_per_job": a.rate},
        "machine": machine(),
        "fio": fio_version(),
        "results": res,
    }
    a.output.write_text(json.dumps(doc, indent=2) + "\n")
    print(a.output)


if __name__ == "__main__":
    main()
