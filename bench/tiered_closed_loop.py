"""The closed loop, measured: the reference workload on the hybrid lab's throttled
slow device (bench/hybrid_lab.py: 143 IOPS per direction, 150 MB/s, one 10K rpm
spindle's rate) alone (the peer: `--ioengine psync`) and with a fast tier of a
fifth of the database (`--ioengine tiered`, msa preset: 4 MiB units, 5 s
intervals) and with a read cache of that size (`--tier-policy cache`), the same
fixed session threads in stress mode. What a tier buys is
the ratio of achieved database reads per second; the tier's hit ratio and the
bytes it moved come with it.

Writes bench/results/tiered_closed_loop.json.
Run (root): `flock /tmp/iotape-bench.lock .venv/bin/python bench/tiered_closed_loop.py`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from hybrid_lab import HybridLab  # noqa: E402

ENGINE = ROOT / "workload" / "build" / "iotape-ese"
MIB = 1 << 20


def _run(lab: HybridLab, argv: list[str], result: Path) -> dict[str, Any]:
    lab.command([*argv, f"--result={result}"], check=True, capture_output=True)
    doc = json.loads(result.read_text())
    read = doc["databases"][0]["streams"]["db-read"]
    return {"db_read_per_s": read["per_s"], "db_read_avg_ms": read["lat_avg_ms"],
            "tier": doc["tier"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--threads", type=int, default=4)
    a = ap.parse_args()
    runs: dict[str, Any] = {}
    with HybridLab(size_mb=160, memory_disk=True) as lab, tempfile.TemporaryDirectory() as d:
        base = [
            str(ENGINE), f"--db={lab.slow},0,{144 * MIB}", f"--log={d}", "--mailboxes=60",
            "--mailbox-size-mb=2", "--iops-per-mailbox=5", f"--threads={a.threads}",
            "--mode=stress", "--quiet=1", "--cache-max-mb=8", "--cache-min-mb=4", "--bdm=0",
        ]  # fmt: skip
        lab.set_slow_iops(None)  # create the database unthrottled
        _run(lab, [*base, "--duration=0.5", "--ioengine=psync"], Path(d) / "create.json")
        lab.set_slow_iops(143)
        lab.set_slow_bandwidth(150 * MIB, 150 * MIB)
        tiered = ["--ioengine=tiered", f"--tier-fast={lab.fast}", "--tier-capacity-mb=32"]
        cache = [*tiered, "--tier-policy=cache"]
        peer = ["--ioengine=psync"]
        for name, extra in (("all-slow", peer), ("tiered", tiered), ("cache", cache)):
            runs[name] = _run(lab, [*base, f"--duration={a.seconds}", *extra], Path(d) / "r.json")
    doc = {
        "bench": "tiered_closed_loop",
        "host": platform.node(),
        "seconds": a.seconds,
        "threads": a.threads,
        "runs": runs,
        "db_read_ratio_to_all_slow": {
            k: round(runs[k]["db_read_per_s"] / runs["all-slow"]["db_read_per_s"], 3)
            for k in ("tiered", "cache")
        },
    }
    out = ROOT / "bench" / "results" / "tiered_closed_loop.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
