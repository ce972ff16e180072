"""Multi-host replay: how far apart the hosts start, and each host's issue error.

Two hosts are network namespaces on this machine (hosts_lab.py), each running
`fio --server` with a loop device of its own (backed by /dev/shm). A 2-database
exact plan of a short synthetic trace (~1,000 requests per database over 2 s) is
replayed with `iotape replay run`: `two-hosts` puts db0 on h1 and db1 on h2;
its named peer `one-host` puts both databases on h1 (one fio server, both
devices), so what the second host adds shows beside what one server does alone.
Figures come from fio's per-I/O logs (replay run's summary, hostfid.py): per
host its start against the first host's (`offset_ms`) and the p50/p99 of its
requests' issue error against its own start (whole-ms log resolution).

Both "hosts" share this machine's CPUs, so the offsets here include the two
servers' clock calibrations competing for the same cores.

Writes bench/results/replay-hosts.json. Run as root:
`flock /tmp/iotape-bench.lock .venv/bin/python bench/replay_hosts.py [--rounds 5]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
# The repository before both: tests/ has folders named like the packages
# (tests/schemas, tests/recorder, ...) that would stand in for them.
sys.path.insert(0, str(ROOT))

from conftest import Loop  # noqa: E402
from hosts_lab import Lab  # noqa: E402
from trace_helpers import SDA, make_trace, workload_records  # noqa: E402

from replayer.plan.build import PlanOptions, plan  # noqa: E402

IOTAPE = str(Path(sys.executable).parent / "iotape")


def _trace(path: Path, n: int = 1000, seconds: float = 2.0) -> Path:
    r = workload_records(n, seed=5)
    r["ts_queue_ns"] = np.sort(np.random.default_rng(5).integers(1, int(seconds * 1e9), size=n))
    r["ts_issue_ns"] = r["ts_queue_ns"] + 100
    r["ts_complete_ns"] = r["ts_issue_ns"] + 5_000
    r["dev"] = SDA
    r["op"] = np.where(r["op"] == 2, 0, r["op"])  # reads and writes, no flushes
    r["bytes"] = np.minimum(r["bytes"], 32768)
    r["offset"] = r["offset"] % (1 << 25) // 4096 * 4096
    r["error"] = 0
    return make_trace(path, r)


def one(lab: Lab, loops: list[Loop], tmp: Path, layout: str, k: int) -> dict:
    jobdir = tmp / f"{layout}-{k}"
    second = "h2" if layout == "two-hosts" else "h1"
    hosts = [f"h1={lab.addresses[0]}"] + ([f"h2={lab.addresses[1]}"] if second == "h2" else [])
    plan(
        PlanOptions(
            trace=tmp / "src.iot",
            jobdir=jobdir,
            mode="exact",
            databases=2,
            from_databases=1,
            hosts=hosts,
            targets=[f"db0=h1:{loops[0].path}", f"db1={second}:{loops[1].path}"],
        )
    )
    p = lab.run("replay", "run", str(jobdir), "--host-iotape", IOTAPE, "--json")
    if p.returncode != 0:
        raise SystemExit(p.stderr)
    return {h: v["start"] for h, v in json.loads(p.stdout)["hosts"].items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "replay-hosts.json")
    a = ap.parse_args()
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="iotape-bench-hosts-") as t:
        tmp = Path(t)
        _trace(tmp / "src.iot")
        loops: list[Loop] = []
        lab = None
        try:
            loops = [Loop(64), Loop(64)]
            lab = Lab(2, tmp / "servers")
            for k in range(a.rounds):
                res = {
                    layout: one(lab, loops, tmp, layout, k) for layout in ("two-hosts", "one-host")
                }
                rounds.append(res)
                print(f"round {k + 1}", json.dumps(res), flush=True)
        finally:
            if lab is not None:
                lab.release()
            for loop in loops:
                loop.release()
    offsets = [
        r["two-hosts"]["h2"]["offset_ms"] + r["two-hosts"]["h1"]["offset_ms"] for r in rounds
    ]

    def p99(layout: str) -> list[float]:
        return [max(h["issue_error_ms"]["p99"] for h in r[layout].values()) for r in rounds]

    summary = {
        "two_hosts_start_offset_ms": {
            "median": statistics.median(offsets),
            "min": min(offsets),
            "max": max(offsets),
        },
        "issue_error_p99_ms_median": {
            "two-hosts": statistics.median(p99("two-hosts")),
            "one-host": statistics.median(p99("one-host")),
        },
        "every_request_logged": all(
            h["planned"] == h["paired"] for r in rounds for lay in r.values() for h in lay.values()
        ),
    }
    doc = {
        "what": "multi-host replay through fio --client: start offsets between hosts, issue error",
        "machine": {"kernel": platform.release(), "cpus": os.cpu_count()},
        "fio": subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip(),
        "summary": summary,
        "rounds": rounds,
    }
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
