"""Where a request's time goes between the block layer and the emulated array's model:
a recording of a run on the array (`iotape record`, `iotape lab hybrid`'s
OUT/*.iot) set beside the array server's own debug trace of the same run
(IOTAPE_ARRAY_TRACE=DIR in the server's environment: one line per reply,
analyzer/lab/src/arraymodel.h `host_trace`). Both clocks are CLOCK_MONOTONIC (the
recording's times are relative to its header's `mono_start_ns`), so each block-layer
request is paired with the server's line of the same op, offset and size that it
received after the request's issue, and its block-layer time splits exactly into

    before  issue -> the server reads it off /dev/fuse (loop worker, FUSE queue)
    queued  received -> the model's arrival (the model's clock ahead of it)
    model   the model's own service (what the array would take)
    late    the model's completion -> the reply started (the model's thread late)
    reply   the reply written to /dev/fuse
    after   reply written -> the block layer's completion (FUSE, loop, blk-mq)

The host's share of a request is its block-layer time less `model`. Reported per
recording: requests over 2x the model's highest read (the issue 38 outlier count),
requests whose host share is over 20, 50 and 100 ms, the host share summed by part
over those over 20 ms, and the worst requests part by part.

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
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recorder.tracefile.reader import open_trace  # noqa: E402

PARTS = ("before", "queued", "model", "late", "reply", "after")
OPS = {0: "read", 1: "write"}


def load_server(path: Path) -> np.ndarray:
    """A server trace's lines as rows: op off len recv submit take m_arr m_done r0 r1
    (a line cut short where the server ended mid-write is left out)."""
    rows = [f for f in (ln.split() for ln in path.read_text().splitlines()) if len(f) == 10]
    return np.array(rows, dtype=np.float64).reshape(-1, 10)


def load_recording(path: Path) -> dict[str, np.ndarray]:
    cols: dict[str, list[np.ndarray]] = defaultdict(list)
    with open_trace(path, strict=False) as t:
        base = int(t.header["mono_start_ns"])
        for c in t.iter_columns(rows=1 << 16):
            for k in ("ts_issue_ns", "ts_complete_ns", "offset", "bytes", "op", "stream"):
                cols[k].append(c[k])
    out = {k: np.concatenate(v) for k, v in cols.items()}
    out["issue"] = (out["ts_issue_ns"].astype(np.int64) + base) / 1e9
    out["complete"] = (out["ts_complete_ns"].astype(np.int64) + base) / 1e9
    return out


def pair(rec: dict[str, np.ndarray], srv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indices into rec, rows of srv) of the requests paired: same op, offset and size,
    the server's first unused line received no earlier than 1 ms before the issue."""
    lines: dict[tuple[int, int, int], deque[int]] = defaultdict(deque)
    for i in np.argsort(srv[:, 3], kind="stable"):
        lines[(int(srv[i, 0]), int(srv[i, 1]), int(srv[i, 2]))].append(int(i))
    got_rec, got_srv = [], []
    for i in np.argsort(rec["issue"], kind="stable"):
        q = lines.get((int(rec["op"][i]), int(rec["offset"][i]), int(rec["bytes"][i])))
        while q and srv[q[0], 3] < rec["issue"][i] - 1e-3:
            q.popleft()  # a line nothing recorded asked for (before the recording)
        if q and srv[q[0], 9] <= rec["complete"][i] + 1e-3:
            got_rec.append(int(i))
            got_srv.append(q.popleft())
    return np.array(got_rec, dtype=np.int64), np.array(got_srv, dtype=np.int64)


def parts_of(rec: dict[str, np.ndarray], ri: np.ndarray, s: np.ndarray) -> dict[str, np.ndarray]:
    issue, complete = rec["issue"][ri], rec["complete"][ri]
    return {
        "before": s[:, 3] - issue,
        "queued": s[:, 6] - s[:, 3],
        "model": s[:, 7] - s[:, 6],
        "late": s[:, 8] - s[:, 7],
        "reply": s[:, 9] - s[:, 8],
        "after": complete - s[:, 9],
    }


def analyse(recording: Path, traces: list[Path], worst: int = 8) -> dict[str, Any] | None:
    rec = load_recording(recording)
    if not len(rec["issue"]):
        return None
    lo, hi = rec["issue"].min(), rec["complete"].max()
    # The server(s) of this run: lines inside the recording's span.
    srvs = [a[(a[:, 3] >= lo - 1) & (a[:, 3] <= hi + 1)] for a in map(load_server, traces)]
    srvs = [a for a in srvs if len(a)]
    if not srvs:
        return None
    srv = np.concatenate(srvs)
    ri, si = pair(rec, srv)
    s = srv[si]
    p = parts_of(rec, ri, s)
    block = rec["complete"][ri] - rec["issue"][ri]
    host = block - p["model"]
    reads = s[:, 0] == 0
    model_max_read = float(p["model"][reads].max()) if reads.any() else 0.0
    over = host > 0.020
    top = np.argsort(-host)[:worst]
    return {
        "recording": str(recording),
        "requests": len(rec["issue"]),
        "paired": len(ri),
        "model_max_read_ms": round(model_max_read * 1e3, 2),
        "block_max_read_ms": round(float(block[reads].max()) * 1e3, 2) if reads.any() else 0,
        "reads_over_2x_model_max": int((block[reads] > 2 * model_max_read).sum()),
        "reads_over_100ms": int((block[reads] > 0.1).sum()),
        "host_over_ms": {str(ms): int((host > ms / 1e3).sum()) for ms in (20, 50, 100)},
        "host_max_ms": round(float(host.max()) * 1e3, 2),
        "host_p999_ms": round(float(np.quantile(host, 0.999)) * 1e3, 3),
        "host_p50_ms": round(float(np.quantile(host, 0.5)) * 1e3, 3),
        "host_ms_by_part_over_20ms": {k: round(float(v[over].sum()) * 1e3, 1) for k, v in p.items()
                                      if k != "model"},
        "worst": [
            {"t_s": round(float(rec["issue"][ri[j]] - lo), 3), "op": OPS.get(int(s[j, 0]), "?"),
             "bytes": int(s[j, 2]), "stream": int(rec["stream"][ri[j]]),
             "block_ms": round(float(block[j]) * 1e3, 2),
             **{f"{k}_ms": round(float(p[k][j]) * 1e3, 2) for k in PARTS}}
            for j in top
        ],
    }  # fmt: skip


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
                    model = models[c]
                    lab.restart_array(ArrayModel(**{**asdict(model), **changes}))
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
        help="NAME:KEY=V,... over array_model.toml (repeat; the first is the peer)",
    )  # fmt: skip
    rn.set_defaults(fn=run_cmd)
    a = ap.parse_args(argv)
    rc: int = a.fn(a)
    return rc


if __name__ == "__main__":
    sys.exit(main())
