"""The host's CPU of a saved `iotape lab hybrid` output's baseline, measured again
(issue 38): the lab records it since (`host_cpu` in each run, analyzer/lab/hostcpu.py),
the outputs saved before did not. For each DIR: the same sizing, threads, disks and
controllers on the same array model, the databases made, then the baseline (psync,
recorded, as the lab runs it) for --seconds, with the engine's and the recorder's CPU
(rusage), the array servers' (their counters) and the whole host's (/proc/stat), and
`hostcpu.demand` of it, which `bench/hybrid_prediction_gap.py --cpu FILE` puts into
the saved outputs' predictions. Shapes already measured are reused (same sizing,
threads, controllers).

    flock /tmp/iotape-bench.lock env PYTHONPATH=$PWD .venv/bin/python \\
        bench/hybrid_host_cpu.py DIR [DIR ...] [--seconds 30] [-o FILE]
    (root; about 1 min a shape; JSON on stdout or FILE)
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import json_out

from analyzer.lab import counters, hostcpu, hybrid
from analyzer.lab.array import ArrayModel
from analyzer.lab.devices import HybridLab
from analyzer.lab.sizing import Sizing
from workload import engine


def _options(rep: dict[str, Any]) -> hybrid.LabOptions:
    o = rep["options"]
    s = Sizing(**o["sizing"])
    return hybrid.LabOptions(
        sizing=s, threads=o["threads"], seconds=o["seconds"], mb_per_s=o["mb_per_s"],
        device="array", tier_in="array", spindles=o["spindles"],
        controllers=o.get("controllers") or 1,
    )  # fmt: skip


def measure(o: hybrid.LabOptions, seconds: float) -> dict[str, Any]:
    """One baseline of `o`'s shape for `seconds`, its CPU and its reads."""
    array = ArrayModel.load(changes={"disks": o.spindles, "mb_s": o.mb_per_s})
    size_mb = o.sizing.controller_mb(o.controllers)
    with (
        HybridLab(size_mb=size_mb, memory_disk=True, array=array, controllers=o.controllers) as lab,
        tempfile.TemporaryDirectory(prefix="arr38-cpu-") as tmp,
    ):
        lab.join()
        hybrid._modelled(lab, False)
        base = hybrid._config(o, lab.slows)
        engine.run(replace(base, duration=0.5))  # the databases, at memory speed
        hybrid._modelled(lab, True)
        counts = counters.array_stats(lab)
        cpu = hostcpu.Snapshot.now()
        res, _ = engine.run_recorded(
            replace(base, duration=seconds), Path(tmp) / "b.iot", devices=lab.slows, force=True
        )
        host = hostcpu.since(cpu)
        arr, _ = counters.array_delta(lab, counts)
    reads = sum(d["streams"]["db-read"]["count"] for d in res["databases"])
    per_s = reads / (res.get("load_s") or res["elapsed_s"])
    server = float((arr or {}).get("cpu_s", 0.0))
    return {
        "host_cpu": host,
        "server_cpu_s": server,
        "reads": reads,
        "reads_per_s": per_s,
        "demand": asdict(d) if (d := hostcpu.demand(host, server, reads)) else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("-o", type=Path)
    a = ap.parse_args()
    shapes: dict[str, dict[str, Any]] = {}
    out = []
    for d in a.dirs:
        rep = json.loads((d / "report.json").read_text())
        o = _options(rep)
        key = json.dumps([rep["options"]["sizing"], o.threads, o.controllers, o.spindles])
        if key not in shapes:
            shapes[key] = measure(o, a.seconds)
        m = shapes[key]
        saved = rep["configs"]["baseline"]["db_reads_per_s"]
        out.append({"dir": str(d), "measured": m, "saved_reads_per_s": saved})
    json_out.emit(out, a.o)


if __name__ == "__main__":
    main()
