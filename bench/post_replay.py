"""Every step after a replay (issue 36), each as users run it: a fresh process,
on a full-rate capture kept by `bench/relabel_rate.py --keep DIR`.

In turn, --rounds times, each step's wall time and requests/s:

- relabel: `replay run --record`'s relabelling (replayer.run.relabel.relabel) of
  a copy of the replay as recorded (relabel_rate.py's child);
- fidelity: `iotape replay fidelity SRC REP --json` (pairing, fidelity, locality)
  of the source capture and the relabelled replay;
- ingest-jobdir: `iotape ingest JOBDIR` into a store that holds the source
  trace (the replay's run, its fio results and its re-recorded events);
- peer-rewrite: the recording read and rewritten unchanged, chunk by chunk (the
  floor of any step that reads the recording whole);
- fidelity's start, apart: `iotape replay fidelity --help` (interpreter, imports,
  typer: the fixed part of the fidelity step, no requests).

Goal: each step >= 1 M requests/s. Writes JSON (--out, default
bench/results/post_replay.json).

`--steps` picks some of the steps; `--vs DIR` runs the fidelity step from the
checkout DIR too (its code and native builds, e.g. the code before a change), in
turn with this one's in every round, on the same inputs: its wall time, peak RSS
and the SHA-256 of its `--json` output beside this checkout's.

Run: `flock /tmp/iotape-bench.lock .venv/bin/python bench/post_replay.py --from DIR
[--rounds 3] [--steps fidelity] [--vs OTHER_CHECKOUT]` (DIR from
`bench/relabel_rate.py --keep DIR`).
"""

from __future__ import annotations

import argparse
import hashlib
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

from relabel_rate import measure  # noqa: E402

STEPS = ("relabel", "fidelity", "ingest-jobdir", "peer-rewrite")


def timed(cmd: list[str], root: Path = ROOT) -> dict:
    """Wall seconds, peak RSS (MiB) and the SHA-256 of the output of `cmd` in a
    process of its own, run with the code of checkout `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as out:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=root, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)}: {err.read()[-2000:]!r}")
        out.seek(0)
        sha = hashlib.file_digest(out, "sha256").hexdigest()
    return {"seconds": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "sha256": sha}


def fidelity(src: Path, rep: Path, root: Path = ROOT) -> dict:
    """`iotape replay fidelity SRC REP --json` as a user runs it, from checkout `root`."""
    return timed([sys.executable, "-m", "iotape", "replay", "fidelity", str(src), str(rep),
                  "--json"], root)  # fmt: skip


def steps_of(text: str) -> list[str]:
    """--steps: some of STEPS, comma-separated."""
    got = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in got if s not in STEPS]
    if bad or not got:
        raise argparse.ArgumentTypeError(f"{text!r}: steps are some of {', '.join(STEPS)}")
    return got


def checkout(text: str) -> Path:
    """--vs: a checkout with its native builds (replayer/build)."""
    p = Path(text).resolve()
    if not (p / "iotape").is_dir() or not (p / "replayer" / "build").is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a built iotape checkout (make native)")
    return p


def _requests(path: Path) -> int:
    from recorder.tracefile import open_trace

    with open_trace(path) as t:
        return int((t.footer or {}).get("events") or 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="source", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/post_replay.json")
    ap.add_argument("--steps", type=steps_of, default=list(STEPS), help=", ".join(STEPS))
    ap.add_argument("--vs", type=checkout, help="a checkout whose fidelity step runs too")
    a = ap.parse_args()
    src, pre, jobdir = a.source / "src.iot", a.source / "rep.pre.iot", a.source / "jobs"
    iotape = [sys.executable, "-m", "iotape"]
    work = Path(tempfile.mkdtemp(prefix="iotape-post-replay-", dir="/dev/shm"))
    try:
        # The relabelled replay, as `replay run --record` leaves it (not timed).
        rep = work / "rep.iot"
        shutil.copy(pre, rep)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; "
             "from replayer.run.execute import load_manifest; "
             "from replayer.run.relabel import relabel; "
             "relabel(Path(sys.argv[1]), Path(sys.argv[2]), load_manifest(Path(sys.argv[2])))",
             str(rep), str(jobdir)],
            check=True, env=env, cwd=ROOT,
        )  # fmt: skip
        # The job directory's ingest wants its recording where the summary says.
        jobs = work / "jobs"
        shutil.copytree(jobdir, jobs)
        summary = json.loads((jobs / "results" / "summary.json").read_text())
        summary["record"] = str(rep)
        (jobs / "results" / "summary.json").write_text(json.dumps(summary))
        runs: dict[str, list[dict]] = {s: [] for s in a.steps}
        if a.vs and "fidelity" in runs:
            runs["fidelity@vs"] = []
        start: list[dict] = []
        for _ in range(a.rounds):
            start.append(timed([*iotape, "replay", "fidelity", "--help"]))
            if "relabel" in runs:
                runs["relabel"].append(measure("relabel", pre, jobdir))
            if "fidelity" in runs:
                runs["fidelity"].append(fidelity(src, rep))
            if "fidelity@vs" in runs:
                runs["fidelity@vs"].append(fidelity(src, rep, a.vs))
            if "ingest-jobdir" in runs:
                db = work / "store" / "s.duckdb"
                shutil.rmtree(db.parent, ignore_errors=True)
                db.parent.mkdir()
                subprocess.run([*iotape, "ingest", str(src), "--db", str(db)], check=True,
                               env=env, cwd=ROOT, capture_output=True)  # fmt: skip
                got = timed([*iotape, "ingest", str(jobs), "--db", str(db)])
                runs["ingest-jobdir"].append(got)
            if "peer-rewrite" in runs:
                runs["peer-rewrite"].append(measure("peer-rewrite", pre, jobdir))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # Requests: relabel's count of the recording, or its footer's where not run.
    n = runs["relabel"][0]["requests"] if runs.get("relabel") else _requests(pre)
    out: dict = {"requests": n, "load_1min": os.getloadavg()[0], "steps": {}}
    out["fidelity_start"] = {
        "seconds": round(statistics.median(r["seconds"] for r in start), 3),
        "rounds": [round(r["seconds"], 3) for r in start],
    }
    print(f"fidelity's start: {out['fidelity_start']['seconds']:.2f} s", file=sys.stderr)
    if a.vs:
        out["vs"] = str(a.vs)
    for step, rs in runs.items():
        s = statistics.median(r["seconds"] for r in rs)
        out["steps"][step] = {
            "seconds": round(s, 3),
            "requests_per_s": round(n / s),
            "peak_rss_mib": round(max(r["peak_rss_mib"] for r in rs), 1),
            "rounds": [round(r["seconds"], 3) for r in rs],
            "peak_rss_rounds": [round(r["peak_rss_mib"], 1) for r in rs],
        }
        if step.startswith("fidelity"):
            out["steps"][step]["sha256"] = sorted({r["sha256"] for r in rs})
        print(f"{step}: {s:.2f} s, {n / s:,.0f} requests/s (goal >= 1 M/s)", file=sys.stderr)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
