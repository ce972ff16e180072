"""iotape-lanes' cost of a dependency hop (issue 34): the time from a request's
completion to the issue of the request that waits for it, beyond its think time.

A chain of HOPS 8 KiB random reads of a loop device over /dev/shm (the SSD-like
device: ~10-20 us a read), each THINK us after the previous one completed, as a
dependent plan (`iotape dependent log 1`, run by iotape-lanes in a fresh process):

- same-lane: one job, iodepth 1 (a session thread's next read after its own);
- cross-lane: two jobs taking turns (each read waits for the other job's last,
  a futex wake-up of the other thread at every hop: a session after the log
  writer's completion);

each with the runner's waits as before (IOTAPE_LANES_SPIN_US=0: sleep to the
think's end, sleep on the predecessor's futex), on threads with the last stretch
awake (IOTAPE_LANES_EVLOOP=0: a thread a lane) and as it is now (the event loop,
replayer/src/evloop.c, drives both lanes), `--lanes-before PATH` also another
build (main's).
The peer, in the same round: fio 3.33, one psync job, QD1, the same reads
(randread, bs 8k, number_ios HOPS, thinktime THINK: a same-lane chain).

Per run: hop_us = span / reads (first issue to last completion), clat_us = a
read's mean time in the caller, overhead_us = hop - clat - think (the runner's
own cost a hop: sleep lateness, wake-up, bookkeeping), late_p50/p90 (iotape-lanes:
issue after predecessor's completion + think, as the runner saw it) and CPU
seconds. Thinks are given as logged (IOTAPE_LANES_OWN_FLOOR_US=0).

    flock /tmp/iotape-bench.lock .venv/bin/python bench/lanes_hop.py [--hops 4000]
        [--think-us 0,20,60] [--rounds 3] [--lanes-before PATH]
    (root: losetup; JSON in bench/results/lanes-hop.json)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from replayer.run import runner  # noqa: E402

OUT = ROOT / "bench" / "results" / "lanes-hop.json"
SIZE = 64 << 20
BS = 8192


def write_plan(d: Path, dev: str, kind: str, hops: int, think_us: int) -> None:
    """A dependent plan: a chain of `hops` reads, on one job or two taking turns."""
    (d / "iologs").mkdir(parents=True)
    rng = random.Random(1)
    jobs = ["a"] if kind == "same" else ["a", "b"]
    lines: dict[str, list[str]] = {j: [] for j in jobs}
    for i in range(hops):
        off = rng.randrange(SIZE // BS) * BS
        way = "- @0" if i == 0 else f"{i - 1} {think_us}"
        lines[jobs[i % len(jobs)]].append(f"{i} {way} read {off} {BS}")
    fio = "[global]\nioengine=psync\ndirect=1\nthread=1\n"
    for j in jobs:
        text = "\n".join(["iotape dependent log 1", f"open {dev}", *lines[j]]) + "\n"
        (d / "iologs" / f"{j}.log").write_text(text)
        fio += f"\n[{j}]\nread_iolog=iologs/{j}.log\niodepth=1\nbs={BS}\n"
    (d / "replay.fio").write_text(fio)


# Each runner of this build: its name and the variables it runs with (the rest unset).
RUNNERS: dict[str, dict[str, str]] = {
    "sleep": {"IOTAPE_LANES_SPIN_US": "0"},
    "threads": {"IOTAPE_LANES_EVLOOP": "0"},
    "loop": {"IOTAPE_LANES_EVLOOP": "1"},
}


def lanes_json(binary: Path, jobdir: Path, env: dict[str, str], knobs: dict[str, str]) -> dict:
    """`binary replay.fio` in `jobdir`, with `knobs` set and the runner's other
    switches (spin, event loop) unset: its JSON."""
    env = {k: v for k, v in env.items() if k not in ("IOTAPE_LANES_SPIN_US", "IOTAPE_LANES_EVLOOP")}
    env |= knobs
    p = subprocess.run([str(binary), "replay.fio"], cwd=jobdir, env=env, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    if p.returncode:
        raise SystemExit(f"{binary}: exit {p.returncode}: {p.stderr[-500:]}")
    return json.loads(p.stdout)


def run_lanes(binary: Path, d: Path, think_us: int, knobs: dict[str, str]) -> dict:
    doc = lanes_json(binary, d, dict(os.environ, IOTAPE_LANES_OWN_FLOOR_US="0"), knobs)
    js = doc["jobs"]
    n = sum(j["read"]["total_ios"] for j in js)
    span = max(j["last_ns"] for j in js) - min(j["first_ns"] for j in js)
    clat = sum(j["read"]["clat_ns"]["mean"] * j["read"]["total_ios"] for j in js) / n
    deps = doc["dependencies"]
    cpu = doc.get("cpu_s", {})
    return {
        "reads": n,
        "hop_us": round(span / n / 1e3, 2),
        "clat_us": round(clat / 1e3, 2),
        "overhead_us": round((span / n - clat) / 1e3 - think_us, 2),
        "late_p50_us": round(doc["issue_late_ns"].get("p50", 0) / 1e3, 2),
        "late_p90_us": round(doc["issue_late_ns"].get("p90", 0) / 1e3, 2),
        "cpu_s": round(cpu.get("user", 0) + cpu.get("system", 0), 3),
        "spin_us": deps.get("spin_us"),
        "spun_ms": deps.get("spun_ms"),
        "issued_before_predecessor": deps["issued_before_predecessor"],
        "loop_jobs": doc.get("evloop", {}).get("jobs", 0),
    }


def run_fio(dev: str, hops: int, think_us: int) -> dict:
    p = subprocess.run(
        ["fio", "--name=lanehop", f"--filename={dev}", "--direct=1", "--ioengine=psync",
         "--rw=randread", f"--bs={BS}", f"--thinktime={think_us}", f"--number_ios={hops}",
         f"--size={SIZE}", "--output-format=json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if p.returncode:
        raise SystemExit(f"fio: exit {p.returncode}: {p.stderr[-500:]}")
    job = json.loads(p.stdout)["jobs"][0]
    r = job["read"]
    hop = job["job_runtime"] * 1e3 / r["total_ios"]
    return {
        "reads": r["total_ios"],
        "hop_us": round(hop, 2),
        "clat_us": round(r["clat_ns"]["mean"] / 1e3, 2),
        "overhead_us": round(hop - r["clat_ns"]["mean"] / 1e3 - think_us, 2),
        "cpu_s": round((job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1e3, 3),
    }


def loop_device(work: Path) -> tuple[str, Path]:
    fd, name = tempfile.mkstemp(prefix="lanehop-", suffix=".img", dir="/dev/shm")
    with os.fdopen(fd, "wb") as f:  # written, not sparse: a hole's read never reaches it
        for _ in range(SIZE >> 20):
            f.write(b"\xa5" * (1 << 20))
    p = subprocess.run(["losetup", "--find", "--show", "--direct-io=off", name],
                       capture_output=True, text=True, check=True)  # fmt: skip
    return p.stdout.strip(), Path(name)


def measure(a: argparse.Namespace, work: Path, dev: str) -> dict:
    thinks = [int(x) for x in a.think_us.split(",")]
    runners = [(f"lanes_{k}", runner.LANES, v) for k, v in RUNNERS.items()]
    if a.lanes_before:
        runners.insert(0, ("lanes_before", a.lanes_before, {}))
    rounds: list[dict] = []
    for r in range(a.rounds):
        got: dict = {}
        for t in thinks:
            got[str(t)] = {"fio_same": run_fio(dev, a.hops, t)}
            for kind in ("same", "cross"):
                d = work / f"r{r}-{kind}-{t}"
                write_plan(d, dev, kind, a.hops, t)
                for name, binary, knobs in runners:
                    got[str(t)][f"{name}_{kind}"] = run_lanes(binary, d, t, knobs)
        print(json.dumps({"round": r, **got}), file=sys.stderr)
        rounds.append(got)
    summary: dict = {}
    for tk in (str(x) for x in thinks):
        fio = statistics.median(rd[tk]["fio_same"]["hop_us"] for rd in rounds)
        summary[tk] = {}
        for key in rounds[0][tk]:
            hop = statistics.median(rd[tk][key]["hop_us"] for rd in rounds)
            summary[tk][key] = {
                "hop_us": hop,
                "overhead_us": statistics.median(rd[tk][key]["overhead_us"] for rd in rounds),
                "x_fio_hop": round(hop / fio, 3),
            }
    return {"rounds": rounds, "median": summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hops", type=int, default=4000)
    ap.add_argument("--think-us", default="0,20,60")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lanes-before", type=Path, help="another iotape-lanes build, as a peer")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lanehop-"))
    dev, img = loop_device(work)
    try:
        load0 = os.getloadavg()[0]
        doc = {"device": "loop over /dev/shm", "hops": a.hops, "load_1min": [load0],
               **measure(a, work, dev)}  # fmt: skip
        doc["load_1min"].append(os.getloadavg()[0])
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
        img.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(work)], check=False)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["median"], indent=1))


if __name__ == "__main__":
    main()
