"""Where a request's time goes between the block layer and the emulated array's model
(analyzer/lab/hostpath.py: a recording beside the array server's debug trace of the
same run, each request's block-layer time split into before / queued / model / late /
reply / after). Reported per recording: reads over 2x the model's highest read (the
issue 38 outlier count), requests whose host share is over 20, 50 and 100 ms, the
host share summed by part over those over 20 ms, and the worst requests part by part.

Two modes:
- `bench/array_host_path.py analyse OUT [--traces DIR] [--json FILE]`: OUT a lab run's
  --out (its *.iot) or one recording, DIR the servers' trace files (default OUT/srv),
  from a run with IOTAPE_ARRAY_TRACE=DIR set.
- `bench/array_host_path.py run --out DIR [--rounds R --seconds S --db-mb M
  --mailboxes N --configs baseline,tier --variant NAME:KEY=V,...]`: the lab's load
  (exchange2013, throughput mode, 2 threads, the lab's sizes) recorded on the array
  as `iotape lab hybrid --device array` runs it, each configuration under each variant
  of the array's model (array_model.toml with KEY=V over it; the first variant is the
  peer), the variants' order alternating per round, all on one database made once;
  each run analysed as above. Writes DIR/result.json.
  Run (root): `flock /tmp/iotape-bench.lock .venv/bin/python bench/array_host_path.py run ...`.
docs/hybrid.md, "The host's path".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analyzer.lab.hostpath import analyse  # noqa: E402


def _print(result: list[dict[str, Any]]) -> None:
    for r in result:
        print(json.dumps({k: v for k, v in r.items() if k != "worst"}))
        for x in r.get("worst", []):
            print("   ", json.dumps(x))


def analyse_cmd(a: argparse.Namespace) -> int:
    recs = [a.out] if a.out.is_file() else sorted(a.out.glob("*.iot"))
    tdir = a.traces or (a.out.parent if a.out.is_file() else a.out) / "srv"
    traces = sorted(tdir.glob("array-*.trace"))
    if not recs or not traces:
        print(f"array_host_path: no recordings in {a.out} or no traces in {tdir}", file=sys.stderr)
        return 2
    result = [r for r in (analyse(f, traces) for f in recs) if r is not None]
    _print(result)
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _variant(text: str) -> tuple[str, dict[str, float]]:
    name, _, kvs = text.partition(":")
    changes = {}
    for kv in filter(None, kvs.split(",")):
        k, eq, v = kv.partition("=")
        if not eq:
            raise SystemExit(f"--variant {text}: NAME:KEY=V,... ({kv!r} is not KEY=V)")
        changes[k] = float(v)
    return name, changes


def run_cmd(a: argparse.Namespace) -> int:
    from dataclasses import asdict, replace

    from analyzer.lab.array import ArrayModel
    from analyzer.lab.devices import HybridLab
    from analyzer.lab.hybrid import LabOptions, _array_ssd, _config
    from analyzer.lab.sizing import size
    from workload import engine

    out: Path = a.out
    if out.exists() and any(out.iterdir()):
        print(f"array_host_path: --out {out}: not empty", file=sys.stderr)
        return 2
    (out / "srv").mkdir(parents=True, exist_ok=True)
    variants = [_variant(v) for v in a.variant] or [("model", {})]
    configs = a.configs.split(",")
    sizing = size(a.db_mb, a.mailboxes, 1)
    o = LabOptions(sizing=sizing, threads=2, seconds=a.seconds, device="array",
                   tier_in="array", spindles=10)  # fmt: skip
    base = ArrayModel.load(changes={"disks": o.spindles, "mb_s": o.mb_per_s})
    models = {c: ArrayModel.load(changes={"disks": o.spindles, "mb_s": o.mb_per_s})
              for c in configs}  # fmt: skip
    models.update({c: m for c, m in _array_ssd(o, base).items() if c in configs})
    # The servers inherit it: each writes its replies' times (array.c).
    os.environ["IOTAPE_ARRAY_TRACE"] = str(out / "srv")
    done: list[tuple[str, int, str, Path, int]] = []
    t0 = time.monotonic()
    with HybridLab(size_mb=sizing.controller_mb(1), memory_disk=True, array=base) as lab:
        lab.join()
        for disk in lab.arrays:
            disk.modelled(False)
        engine.run(replace(_config(o, lab.slows), duration=0.5))  # the database, at memory speed
        for r in range(a.rounds):
            for c in configs:
                for name, changes in variants if r % 2 == 0 else variants[::-1]:
                    model = {k: v for k, v in changes.items() if not k.startswith("queue.")}
                    lab.restart_array(ArrayModel(**{**asdict(models[c]), **model}))
                    for k, v in changes.items():  # queue.X=V: the loop device's queue/X
                        if k.startswith("queue."):
                            for dev in lab.slows:
                                queue = Path("/sys/block") / Path(dev).name / "queue"
                                (queue / k.removeprefix("queue.")).write_text(f"{v:g}")
                    trace = out / f"r{r}-{c}-{name}.iot"
                    print(f"[{time.monotonic() - t0:.0f} s] round {r}: {c}, {name}", flush=True)
                    engine.run_recorded(_config(o, lab.slows), trace, devices=lab.slows, force=True)
                    done.append((name, r, c, trace, lab.arrays[0].pid))
    # The servers have flushed their traces at their exit (the lab closed).
    runs = []
    for name, r, c, trace, pid in done:
        got = analyse(trace, [out / "srv" / f"array-{pid}.trace"])
        if got is not None:
            runs.append({"variant": name, "round": r, "config": c, **got})
    _print(runs)
    summary: dict[str, Any] = {}
    for name, _ in variants:
        mine = [x for x in runs if x["variant"] == name]
        summary[name] = {
            "reads_over_2x_model_max": [x["reads_over_2x_model_max"] for x in mine],
            "host_over_50ms": [x["host_over_ms"]["50"] for x in mine],
            "host_over_20ms": [x["host_over_ms"]["20"] for x in mine],
            "host_max_ms": [x["host_max_ms"] for x in mine],
            "block_max_read_ms": [x["block_max_read_ms"] for x in mine],
            "model_max_read_ms": [x["model_max_read_ms"] for x in mine],
        }
    doc = {"args": {k: str(v) for k, v in vars(a).items() if k != "fn"}, "wall_s":
           round(time.monotonic() - t0, 1), "summary": summary, "runs": runs}  # fmt: skip
    (out / "result.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(required=True)
    an = sub.add_parser("analyse", help="a recorded run beside its servers' traces")
    an.add_argument("out", type=Path, help="a lab run's --out (its *.iot), or one .iot")
    an.add_argument("--traces", type=Path, help="the servers' trace files (default OUT/srv)")
    an.add_argument("--json", type=Path, help="write the result here too")
    an.set_defaults(fn=analyse_cmd)
    rn = sub.add_parser("run", help="the lab's load on the array, recorded and analysed")
    rn.add_argument("--out", type=Path, required=True)
    rn.add_argument("--rounds", type=int, default=2)
    rn.add_argument("--seconds", type=float, default=40)
    rn.add_argument("--db-mb", type=int, default=256)
    rn.add_argument("--mailboxes", type=int, default=60)
    rn.add_argument("--configs", default="baseline,tier")
    rn.add_argument(
        "--variant", action="append", default=[],
        help="NAME:KEY=V,... over array_model.toml, or queue.X=V for the loop device's "
        "queue/X (repeat; the first is the peer)",
    )  # fmt: skip
    rn.set_defaults(fn=run_cmd)
    a = ap.parse_args(argv)
    rc: int = a.fn(a)
    return rc


if __name__ == "__main__":
    sys.exit(main())
