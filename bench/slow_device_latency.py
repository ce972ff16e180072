"""The hybrid lab's HDD-like slow device, measured: fio 4 KiB random reads at queue
depth 1 and 4 on the throttled loop device (bench/hybrid_lab.py, memory-backed, cgroup
v1 blkio limits of --iops per direction and --mbps), against the same device
unthrottled (the peer: what the throttle adds), and throttled with the throttled disk
marked non-rotational before its first limit (HybridLab(nonrot=True): a shorter
blk-throttle slice where the kernel picks it by the queue's kind), and the HDD-like
file (analyzer/lab/hdd.py: a 10K rpm disk's modelled service time per request, over
FUSE, under a direct-I/O loop device; no throttle), what `iotape lab hybrid` uses.
docs/hybrid.md compares the result with a 10K rpm spindle's published service times.

Writes bench/results/slow_device_latency.json.
Run (root): `flock /tmp/iotape-bench.lock .venv/bin/python bench/slow_device_latency.py`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from hybrid_lab import HybridLab  # noqa: E402

from analyzer.lab.hdd import HddModel  # noqa: E402

PCTS = [1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9]


def _fio(lab: HybridLab, qd: int, seconds: int) -> dict[str, Any]:
    argv = [
        "fio", "--name=lat", f"--filename={lab.slow}", "--rw=randread", "--bs=4k",
        "--direct=1", "--ioengine=libaio", f"--iodepth={qd}", "--time_based",
        f"--runtime={seconds}", "--norandommap", "--output-format=json",
        "--percentile_list=" + ":".join(str(p) for p in PCTS),
    ]  # fmt: skip
    out = lab.command(argv, check=True, capture_output=True, text=True)
    job = json.loads(out.stdout)["jobs"][0]["read"]
    clat = job["clat_ns"]
    return {
        "qd": qd,
        "iops": round(job["iops"], 1),
        "mean_ms": round(clat["mean"] / 1e6, 3),
        "percentiles_ms": {k: round(v / 1e6, 3) for k, v in clat["percentile"].items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iops", type=int, default=143)
    ap.add_argument("--mbps", type=int, default=150)
    ap.add_argument("--seconds", type=int, default=8)
    a = ap.parse_args()
    runs: list[dict[str, Any]] = []
    devices = [
        ("throttled", a.iops, False),
        ("unthrottled", None, False),
        ("throttled, non-rotational disk", a.iops, True),
        ("hdd model", None, False),
    ]
    for name, iops, short in devices:
        hdd = HddModel() if name == "hdd model" else None
        with HybridLab(size_mb=256, memory_disk=True, nonrot=short, hdd=hdd) as lab:
            lab.set_slow_iops(iops)
            lab.set_slow_bandwidth(a.mbps << 20 if iops else None, a.mbps << 20 if iops else None)
            for qd in (1, 4):
                runs.append({"device": name, **_fio(lab, qd, a.seconds)})
    doc = {
        "bench": "slow_device_latency",
        "host": platform.node(),
        "limits": {"iops_per_direction": a.iops, "mb_per_s": a.mbps},
        "hdd_model": {**vars(HddModel()), "mean_random_4k_ms": HddModel().mean_random_ms()},
        "runs": runs,
    }
    out = ROOT / "bench" / "results" / "slow_device_latency.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
