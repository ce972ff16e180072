"""`iotape ingest` timed as users run it (issue 36): the whole command in a fresh
process, interpreter start and imports included, against its peer in turn.

Peer: a fresh Python process loading the same events from Parquet (`iotape trace
convert` of the trace) into a DuckDB table of its own, new file. Each round runs
the command, then the peer, each into a new store; the medians and the ratio of
the medians go to JSON with every round's wall time, CPU time (user + system)
and peak RSS. The fixed cost
of a command is timed the same way: `iotape --help`, `iotape ingest --help`,
beside `python -c pass`.

Traces: --trace PATH (a recording), else synthetic ones of --events lengths
(bench/store.py's make_trace).

The project's modules are byte-compiled first (`compileall`), as an install has
them and as the first run of an editable one leaves them: where the environment
sets PYTHONDONTWRITEBYTECODE (the engineers' shells here do), every command
compiled them from source again (~30 ms of each of its rounds), a cost no user
pays; the peer imports only DuckDB.
Goal: the command >= 2x the peer (its wall time <= half the peer's) at 1 M
events and up.

Run: `.venv/bin/python bench/ingest_cli.py [--events 1000000,2000000] [--trace T.iot]
[--rounds 5]`.
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
PEER = (
    "import sys, duckdb\n"
    "con = duckdb.connect(sys.argv[1])\n"
    "con.execute('CREATE TABLE events AS SELECT * FROM read_parquet($p)', {'p': sys.argv[2]})\n"
    "con.close()\n"
)


def timed(cmd: list[str]) -> dict:
    """Wall seconds, CPU seconds (user + system, all its threads) and peak RSS (MiB)
    of `cmd` in a process of its own."""
    with tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}: {err.read()[-2000:]!r}")
    return {
        "wall_s": round(wall, 4),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 4),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }


def _pair(a: list[str], b: list[str], rounds: int, fresh: Path) -> dict:
    got: dict[str, list[dict]] = {"iotape": [], "peer": []}
    for _ in range(rounds):
        for name, cmd in (("iotape", a), ("peer", b)):
            shutil.rmtree(fresh, ignore_errors=True)
            fresh.mkdir()
            got[name].append(timed(cmd))
    med = {k: statistics.median(r["wall_s"] for r in v) for k, v in got.items()}
    cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in got.items()}
    return {
        "iotape_s": med["iotape"],
        "peer_s": med["peer"],
        "iotape_cpu_s": cpu["iotape"],
        "peer_cpu_s": cpu["peer"],
        "peer_over_iotape": round(med["peer"] / med["iotape"], 2),
        "rounds": got,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", default="1000000,2000000", help="synthetic trace lengths")
    ap.add_argument("--trace", type=Path, action="append", default=[], help="a recorded trace")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/ingest_cli.json")
    a = ap.parse_args()
    py = sys.executable
    env_path = {"PYTHONPATH": str(ROOT)}
    os.environ.update(env_path)
    iotape = [py, "-m", "iotape"]
    packages = ["base", "schemas", "devices", "recorder", "analyzer", "iotape"]
    subprocess.run([py, "-m", "compileall", "-q", *packages], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="iotape-ingest-cli-", dir="/dev/shm"))
    out: dict = {"machine": {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0]}}
    try:
        fresh = work / "store"
        fixed = {}
        for name, cmd in (
            ("iotape --help", [*iotape, "--help"]),
            ("iotape ingest --help", [*iotape, "ingest", "--help"]),
            ("python -c pass", [py, "-c", "pass"]),
        ):
            fixed[name] = statistics.median(timed(cmd)["wall_s"] for _ in range(a.rounds))
        out["fixed_s"] = fixed
        traces = list(a.trace)
        if a.events:
            sys.path.insert(0, str(ROOT / "bench"))
            from store import make_trace

            for n in (int(x) for x in a.events.split(",")):
                p = work / f"synthetic-{n}.iot"
                make_trace(p, n)
                traces.append(p)
        out["ingest"] = {}
        for t in traces:
            pq = work / f"{t.stem}.parquet"
            subprocess.run([*iotape, "trace", "convert", str(t), "-o", str(pq)], check=True,
                           capture_output=True)  # fmt: skip
            r = _pair(
                [*iotape, "ingest", str(t), "--db", str(fresh / "s.duckdb")],
                [py, "-c", PEER, str(fresh / "peer.duckdb"), str(pq)],
                a.rounds,
                fresh,
            )
            out["ingest"][str(t) if t in a.trace else t.stem] = r
            print(
                f"{t.name}: iotape ingest {r['iotape_s']:.2f} s, peer {r['peer_s']:.2f} s: "
                f"iotape is {r['peer_over_iotape']}x the peer (goal >= 2)",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["machine"]["load_1min_after"] = os.getloadavg()[0]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["fixed_s"]), file=sys.stderr)


if __name__ == "__main__":
    main()
