"""`iotape ingest` against the code before and the peer, round by round (issue 36):
bench/ingest_cli.py runs one tree's rounds after another's, so a change of a few
per cent is lost in the machine's drift between them (other engineers' work). Here
each round runs, in turn and each in a fresh process into a new store: the code
before (a copy of its tree, --before), this tree, this tree with the store kept in
the command's process (IOTAPE_INGEST_FORK=0), and the peer (bench/ingest_cli.py's
PEER, the same events from Parquet into a DuckDB file of its own). Medians, ranges,
the ratio of the medians and the median of the per-round ratios go to stdout and
JSON with every round.

Run: `.venv/bin/python bench/ingest_alternated.py --before COPY [--events
1000000,2000000] [--trace T.iot] [--rounds 15]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from ingest_cli import PEER  # noqa: E402  (bench/ is not a package)

PACKAGES = ["base", "schemas", "devices", "recorder", "analyzer", "iotape"]


def _round(cmd: list[str], cwd: Path, env: dict[str, str], fresh: Path) -> list[float]:
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {os.waitstatus_to_exitcode(status)}")
    return [round(wall, 4), round(usage.ru_utime + usage.ru_stime, 4)]


def _summary(got: dict[str, list[list[float]]], names: list[str]) -> dict:
    out: dict = {}
    for k, rounds in got.items():
        w = sorted(r[0] for r in rounds)
        out[k] = {
            "wall_s": statistics.median(w),
            "range_s": [w[0], w[-1]],
            "cpu_s": statistics.median(r[1] for r in rounds),
        }
    peer = got["peer"]
    for k in names:
        pairs = [p[0] / i[0] for p, i in zip(peer, got[k], strict=True)]
        out[k]["peer_over"] = round(out["peer"]["wall_s"] / out[k]["wall_s"], 2)
        out[k]["peer_over_per_round"] = round(statistics.median(pairs), 2)
    before_over_now = [b[0] / n[0] for b, n in zip(got["before"], got["now"], strict=True)]
    out["before_over_now_per_round"] = round(statistics.median(before_over_now), 3)
    out["now_faster_rounds"] = sum(x > 1 for x in before_over_now)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="a copy of the code before")
    ap.add_argument("--events", default="1000000,2000000", help="synthetic trace lengths")
    ap.add_argument("--trace", type=Path, action="append", default=[], help="a recorded trace")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/ingest_alternated.json")
    a = ap.parse_args()
    py = sys.executable
    trees = {"before": a.before.resolve(), "now": ROOT}
    for tree in trees.values():
        subprocess.run([py, "-m", "compileall", "-q", *PACKAGES], cwd=tree, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="iotape-ingest-alt-", dir="/dev/shm"))
    out: dict = {"machine": {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0]}}
    try:
        traces = list(a.trace)
        if a.events:
            from store import make_trace

            for n in (int(x) for x in a.events.split(",")):
                traces.append(work / f"synthetic-{n}.iot")
                make_trace(traces[-1], n)
        fresh = work / "store"
        variants = {
            "before": (trees["before"], {}),
            "now": (ROOT, {}),
            "now_in_process": (ROOT, {"IOTAPE_INGEST_FORK": "0"}),
        }
        for t in traces:
            pq = work / f"{t.stem}.parquet"
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            subprocess.run([py, "-m", "iotape", "trace", "convert", str(t), "-o", str(pq)],
                           check=True, capture_output=True, env=env)  # fmt: skip
            got: dict[str, list[list[float]]] = {k: [] for k in [*variants, "peer"]}
            for _ in range(a.rounds):
                for k, (tree, extra) in variants.items():
                    cmd = [py, "-m", "iotape", "ingest", str(t), "--db", str(fresh / "s.duckdb")]
                    env = {**os.environ, "PYTHONPATH": str(tree), **extra}
                    got[k].append(_round(cmd, tree, env, fresh))
                peer = [py, "-c", PEER, str(fresh / "peer.duckdb"), str(pq)]
                got["peer"].append(_round(peer, work, dict(os.environ), fresh))
            s = _summary(got, list(variants))
            out[t.stem] = {"summary": s, "rounds": got}
            print(t.name, json.dumps(s), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["machine"]["load_1min_after"] = os.getloadavg()[0]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
