"""`--remap compact` against the other remaps (issue 39): a large-offset trace onto
a lab device of its footprint + 15 %, judged by `replay fidelity` (pairing through
the plan's mapping, locality), and what compact changes on a rotating disk.

Traces:
- fileserver: a fio job recorded on a loop device over a sparse 90 GiB file in
  /dev/shm: five regions from 1 GiB to 88 GiB (random 8K/16K/4K with zipf skew,
  sequential 64K writes and 128K reads), about 520 IOPS;
- websearch: the public disksim web-search trace (wsrch-small.trace, 6 devices,
  24,783 requests over 60 s; --websearch), imported with `iotape import disksim`.

Part "loop" (SSD-like: a loop device over /dev/shm): each trace planned with
--remap compact, scale and wrap onto a loop device of compact's footprint + 15 %,
and with --remap fit onto one of the trace's whole reach (the peer: offsets as
recorded; several devices side by side, each at its reach), each replayed with
`replay run --record` and compared with `replay fidelity` (the plan found from
the replay's metadata). Every replay gets a fresh device of its own, made the
same way (a sparse file in /dev/shm, buffered loop), and the remaps run in
--rounds rounds, the order reversed every other round, so that none is always
first on the machine: the issue-time error of an exact replay is fio's lateness
in waking for each request, which follows the CPU the rest of this shared
machine takes (each run's `other_cpu`, CPUs busy outside the replay's own
processes, is recorded beside it), not the device (each run's device time, also
recorded). Part "hdd": the fileserver
trace onto the HDD-like device (analyzer/lab/hdd.py: seek time by distance as a
share of the device, SPINDLES spindles), compact onto footprint + 15 % and onto a
disk of the whole reach (the same disk as fit's: the packed extents at its start)
against fit onto the whole reach: per-request device time and the seek distance
between consecutive requests. Every step is the CLI in a fresh process, as users run it.

    flock /tmp/iotape-bench.lock .venv/bin/python bench/remap_compact.py \
        --websearch wsrch-small.trace
    (root; about 20 minutes with 2 rounds; JSON in bench/results/remap-compact.json)

Goals (issue 39): compact: locality faithful with the largest LRU gap <= 1 point
and the footprint equal (to the unremapped replay's: fit's), >= 99.9 % of requests
paired, issue-time error as for the unremapped replay (median p50 over the rounds
within 25 % of fit's); scale and wrap >= 99 %.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from replay_lab import ROOT, fio_version, machine

from analyzer.lab.hdd import HddFile, HddModel
from recorder.capture import record as rec
from recorder.tracefile import open_trace
from replayer.plan.source import OP

OUT = ROOT / "bench" / "results" / "remap-compact.json"
IOTAPE = [sys.executable, "-m", "iotape"]
GiB, MiB = 1 << 30, 1 << 20
REACH = 90 * GiB
SPINDLES = 8


_G = "direct=1\nioengine=io_uring\ntime_based=1\nrate_process=poisson\niodepth=4\n"
FILESERVER = (
    "[r0]\noffset=1g\nsize=256m\nrw=randrw\nrwmixread=70\nbs=8k\nrate_iops=150,60\n"
    "random_distribution=zipf:0.9\n"
    "[r1]\noffset=20g\nsize=256m\nrw=randread\nbs=16k\nrate_iops=100\n"
    "random_distribution=zipf:1.1\n"
    "[r2]\noffset=45g\nsize=512m\nrw=randrw\nbs=4k\nrate_iops=120,40\n"
    "[s3]\noffset=70g\nsize=2g\nrw=write\nbs=64k\nrate_iops=,30\n"
    "[s4]\noffset=88g\nsize=1g\nrw=read\nbs=128k\nrate_iops=20\n"
)


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([*IOTAPE, *args], capture_output=True, text=True, env=env)
    if res.returncode:
        raise RuntimeError(f"iotape {' '.join(args)}: {res.stderr.strip()}")
    return res


def losetup(backing: Path, direct: bool) -> str:
    dev = subprocess.run(
        ["losetup", "--find", "--show", f"--direct-io={'on' if direct else 'off'}", str(backing)],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(f"/sys/block/{os.path.basename(dev)}/queue/nomerges").write_text("2")
    return dev


@contextlib.contextmanager
def shm_loop(size: int) -> Iterator[str]:
    """A loop device over a sparse file in /dev/shm of `size` bytes, released after."""
    fd, name = tempfile.mkstemp(prefix="iotape-bench-remap39-", suffix=".img", dir="/dev/shm")
    os.close(fd)
    os.truncate(name, size)
    dev = None
    try:
        dev = losetup(Path(name), direct=False)
        yield dev
    finally:
        if dev:
            subprocess.run(["losetup", "-d", dev], check=False)
        os.unlink(name)


@contextlib.contextmanager
def hdd_loop(size: int) -> Iterator[str]:
    """A loop device over the HDD-like file of `size` bytes, released after."""
    hdd = HddFile(size, HddModel(spindles=SPINDLES))
    dev = None
    try:
        dev = losetup(hdd.path, direct=True)
        yield dev
    finally:
        if dev:
            subprocess.run(["losetup", "-d", dev], check=False)
        hdd.close()


def fileserver(work: Path, seconds: int) -> Path:
    """The fio job recorded on a loop device over a sparse 90 GiB file."""
    out = work / "fileserver.iot"
    job = work / "fileserver.fio"
    with shm_loop(REACH) as dev:
        job.write_text(f"[global]\nfilename={dev}\n{_G}runtime={seconds}\n{FILESERVER}")
        rec.record(
            rec.RecordOptions(
                devices=[dev], output=out, command=["fio", "--output=/dev/null", str(job)]
            )
        )
    return out


def websearch(work: Path, src: Path) -> Path:
    out = work / "websearch.iot"
    cli("import", "disksim", str(src), "-o", str(out))
    return out


def plan(trace: Path, jobs: Path, remap: str, target: str, unit: str) -> dict:
    res = cli("replay", "plan", str(trace), "-o", str(jobs), "--mode", "exact", "--remap",
              remap, "--remap-unit", unit, "--target", f"all={target}", "--json")  # fmt: skip
    return json.loads(res.stdout)


def sizes(trace: Path, unit: str) -> tuple[int, int]:
    """(compact's footprint: the touched granules of every device, packed; the
    reach fit needs: every device's, side by side, each to a whole MiB)."""
    res = cli("replay", "plan", str(trace), "--remap", "compact", "--remap-unit", unit,
              "--dry-run", "--json")  # fmt: skip
    m = json.loads(res.stdout)["mapping"]
    fp = sum(n for d in m["devices"] for _s, n in d["extents"])
    return fp, sum(-(-d["end_bytes"] // MiB) * MiB for d in m["devices"])


def _busy() -> int:
    """Jiffies every CPU spent busy (not idle, not waiting for I/O) since boot."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(f) - f[3] - f[4]


def replay(trace: Path, jobs: Path, out: Path) -> tuple[dict, float]:
    """`replay run --record` then `replay fidelity` (the plan the replay names); and
    the CPUs the rest of the machine kept busy while the replay ran."""
    b0, r0, w0 = _busy(), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    cli("replay", "run", str(jobs), "--record", str(out))
    b1, r1, w1 = _busy(), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    own = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    other = ((b1 - b0) / os.sysconf("SC_CLK_TCK") - own) / (w1 - w0)
    fid = json.loads(cli("replay", "fidelity", str(trace), str(out), "--json").stdout)["iotape"]
    return fid, round(max(other, 0.0), 2)


def device_figures(rep: Path, size: int) -> dict:
    """Per-request device time and the seek distance from one request's end to the
    next request's start (issue order), as a share of the device."""
    with open_trace(rep) as t:
        r = t.read_all()
    r = r[(r["op"] == OP["read"]) | (r["op"] == OP["write"])]
    r = r[np.argsort(r["ts_issue_ns"], kind="stable")]
    lat = (r["ts_complete_ns"].astype(np.int64) - r["ts_issue_ns"].astype(np.int64)) / 1e6
    off = r["offset"].astype(np.int64)
    dist = np.abs(off[1:] - (off[:-1] + r["bytes"][:-1].astype(np.int64)))
    share = dist / size
    return {
        "requests": len(r),
        "device_ms": {
            k: round(float(np.percentile(lat, q)), 3)
            for k, q in (("p50", 50), ("p90", 90), ("p99", 99))
        }
        | {"mean": round(float(lat.mean()), 3)},
        "seek_mean_bytes": int(dist.mean()),
        "seek_mean_share_of_device": round(float(share.mean()), 4),
        "seek_sqrt_share_mean": round(float(np.sqrt(share).mean()), 4),
        "zero_seek_share": round(float((dist == 0).mean()), 4),
    }


def brief(fid: dict, man: dict) -> dict:
    o, loc, p = fid["overall"], fid["locality"], fid["pairing"]
    pr = man.get("prediction") or {}
    return {
        "paired_share": p["paired_share"],
        "pairing": p,
        "locality_faithful": loc["faithful"],
        "max_lru_gap_pp": loc["max_gap_pp"],
        "footprint_bytes": loc["footprint_bytes"],
        "footprint_error_pct": loc["footprint_error_pct"],
        "sequential_share": loc["sequential_share"],
        "lru_hit_ratio": loc["lru_hit_ratio"],
        "predicted_max_lru_gap_pp": pr.get("max_gap_pp"),
        "predicted_faithful": pr.get("faithful"),
        "iops_mape_pct": o["iops_mape_pct"],
        "issue_error": o.get("issue_error"),
        "drift_ms_per_s": o.get("drift_ms_per_s"),
    }


REMAPS = ("compact", "scale", "wrap", "fit")


def part_loop(name: str, trace: Path, work: Path, unit: str, rounds: int) -> dict:
    fp, whole = sizes(trace, unit)
    size = int(fp * 1.15) // MiB * MiB
    target = {"compact": size, "scale": size, "wrap": size, "fit": whole}
    out: dict = {"footprint_bytes": fp, "target_bytes": size, "fit_target_bytes": whole,
                 "runs": [], "remaps": {}}  # fmt: skip
    for k in range(rounds):
        for remap in REMAPS if k % 2 == 0 else REMAPS[::-1]:
            with shm_loop(target[remap]) as dev:  # fit: the peer, offsets as recorded
                jobs = work / f"{name}-{remap}-{k}"
                man = plan(trace, jobs, remap, dev, unit)
                rep = work / f"{name}-{remap}-{k}.iot"
                fid, other = replay(trace, jobs, rep)
            run = {"round": k, "remap": remap, "target_bytes": target[remap],
                   "other_cpu": other, **brief(fid, man),
                   "device_ms": device_figures(rep, target[remap])["device_ms"]}  # fmt: skip
            out["runs"].append(run)
            print(name, k, remap, f"other_cpu={other}", json.dumps(_line(run)), flush=True)
    for remap in REMAPS:
        runs = [r for r in out["runs"] if r["remap"] == remap]
        issue = {q: [(r["issue_error"] or {}).get(f"{q}_ms") for r in runs] for q in ("p50", "p99")}
        out["remaps"][remap] = {
            **runs[-1],
            "issue_p50_ms_each_round": issue["p50"],
            "issue_p99_ms_each_round": issue["p99"],
            "issue_p50_ms_median": statistics.median(issue["p50"]),
            "issue_p99_ms_median": statistics.median(issue["p99"]),
            "other_cpu_each_round": [r["other_cpu"] for r in runs],
        }
    return out


def part_hdd(trace: Path, work: Path, unit: str) -> dict:
    fp, whole = sizes(trace, unit)
    out: dict = {"model": {**vars(HddModel(spindles=SPINDLES))}, "runs": {}}
    runs = (("compact", "compact", int(fp * 1.15) // MiB * MiB), ("fit", "fit", whole),
            ("compact on the whole-reach disk", "compact", whole))  # fmt: skip
    for name, remap, size in runs:
        with hdd_loop(size) as dev:
            jobs = work / f"hdd-{remap}-{size}"
            man = plan(trace, jobs, remap, dev, unit)
            rep = work / f"hdd-{remap}-{size}.iot"
            fid, other = replay(trace, jobs, rep)
            out["runs"][name] = {
                "target_bytes": size,
                **device_figures(rep, size),
                "paired_share": fid["pairing"]["paired_share"],
                "issue_error": fid["overall"].get("issue_error"),
                "locality_faithful": man.get("prediction", {}).get("faithful"),
                "other_cpu": other,
            }
            print("hdd", name, json.dumps(out["runs"][name]), flush=True)
    f = out["runs"]["fit"]
    for name in ("compact", "compact on the whole-reach disk"):
        c = out["runs"][name]
        out[f"{name} over fit"] = {
            "device_ms_mean": round(c["device_ms"]["mean"] / f["device_ms"]["mean"], 3),
            "seek_mean_bytes": round(c["seek_mean_bytes"] / max(f["seek_mean_bytes"], 1), 5),
            "seek_sqrt_share_mean": round(c["seek_sqrt_share_mean"] / f["seek_sqrt_share_mean"], 3),
        }
    return out


def _line(b: dict) -> dict:
    keys = ("paired_share", "locality_faithful", "max_lru_gap_pp", "footprint_error_pct",
            "predicted_max_lru_gap_pp", "iops_mape_pct")  # fmt: skip
    return {k: b[k] for k in keys} | {"issue_p99_ms": (b["issue_error"] or {}).get("p99_ms")}


def goals(res: dict) -> dict:
    out = {}
    for name, r in res.get("loop", {}).items():
        c, f = r["remaps"]["compact"], r["remaps"]["fit"]
        out[name] = {
            "compact": c["locality_faithful"] and c["max_lru_gap_pp"] <= 1.0
            and c["footprint_bytes"] == f["footprint_bytes"] and c["paired_share"] >= 0.999,
            "compact_issue_time": c["issue_p50_ms_median"] <= 1.25 * f["issue_p50_ms_median"],
            "compact_issue_p50_over_fit": round(
                c["issue_p50_ms_median"] / f["issue_p50_ms_median"], 3),
            "compact_issue_p99_over_fit": round(
                c["issue_p99_ms_median"] / f["issue_p99_ms_median"], 3),
            "scale": r["remaps"]["scale"]["paired_share"] >= 0.99,
            "wrap": r["remaps"]["wrap"]["paired_share"] >= 0.99,
        }  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=30, help="the fileserver job's length")
    ap.add_argument("--unit", default="1M", help="--remap-unit for compact")
    ap.add_argument("--parts", default="loop,hdd")
    ap.add_argument("--rounds", type=int, default=2, help="replays of each remap (part loop)")
    ap.add_argument(
        "--websearch", type=Path, help="wsrch-small.trace (MQSim's disksim web-search trace)"
    )
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    ap.add_argument("--keep", type=Path, help="copy the traces (originals, replays) here")
    a = ap.parse_args()
    parts = a.parts.split(",")
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="iotape-bench-remap39-") as tmp:
        work = Path(tmp)
        traces = {"fileserver": fileserver(work, a.seconds)}
        if a.websearch is not None:
            traces["websearch"] = websearch(work, a.websearch)
        if "loop" in parts:
            res["loop"] = {n: part_loop(n, t, work, a.unit, a.rounds) for n, t in traces.items()}
        if "hdd" in parts:
            res["hdd"] = part_hdd(traces["fileserver"], work, a.unit)
        if a.keep is not None:
            a.keep.mkdir(parents=True, exist_ok=True)
            for f in work.glob("*.iot"):
                shutil.copy2(f, a.keep / f.name)
    doc = {
        "what": "--remap compact against scale, wrap and fit (issue 39)",
        "goal": "compact: locality faithful, largest LRU gap <= 1 pp, footprint equal to "
        "fit's, >= 99.9 % paired, issue p50 (median of the rounds) within 25 % of fit's; "
        "scale and wrap >= 99 % paired",
        "command": "flock /tmp/iotape-bench.lock .venv/bin/python bench/remap_compact.py "
        + " ".join(sys.argv[1:]),
        "machine": machine(),
        "fio": fio_version(),
        "unit": a.unit,
        "goals_met": goals(res),
        "results": res,
    }
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["goals_met"]))
    print(a.output)


if __name__ == "__main__":
    main()
