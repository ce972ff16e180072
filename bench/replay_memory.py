"""Peak memory and time of `iotape replay fidelity` by trace length (issue 23).

For each length, writes a synthetic original at 8k IOPS (4-32 KiB reads and
writes over 64 GiB, in completion order as a recording is) and a replay of it
(7 ms late, 0-0.5 ms of jitter, 0.1 % of requests lost), both with the
project's TraceWriter, a million records at a time. Then runs, each in its own
process, its peak RSS taken from wait4:

  streamed   `iotape replay fidelity ORIG REPLAY --json` (fidstream.py)
  in-memory  fidelity.compare_in_memory, the implementation before it (the
             peer), where it fits: up to --peer-max requests

and the relabel step of `replay run --record` (run/relabel.py; peer
relabel_in_memory) on the replay, against a plan directory whose iologs hold the
original's requests (`--layout lanes`, the default: 100 lanes a stream, v2 logs
spanning the trace, as long traces are planned). Ratios are peer / streamed.

Usage (timings under the shared lock):
    flock /tmp/iotape-bench.lock .venv/bin/python bench/replay_memory.py \\
        --lengths 1000000 5000000 29000000
Writes bench/results/replay-memory.json. The traces go to --work (default a
temporary directory under /tmp) and are deleted after each length.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay_lab import peak_rss  # noqa: E402

import schemas  # noqa: E402
from recorder.tracefile import TraceWriter  # noqa: E402

IOPS = 8000
BATCH = 1 << 20
HEADER = {
    "mono_start_ns": 1_000_000_000,
    "wall_start_ns": 1_700_000_000_000_000_000,
    "host": "bench",
    "recorder": {"backend": "bench-synthetic", "version": "0"},
    "devices": [{"name": "vdb", "dev": (252 << 20) | 16, "major": 252, "minor": 16}],
    "streams": {"1": "db-read", "2": "db-write", "3": "log-write"},
    "metadata": {},
}


def _batch(rng: np.random.Generator, t0: int, n: int) -> np.ndarray:
    r = np.zeros(n, schemas.record_dtype())
    gaps = rng.exponential(1e9 / IOPS, size=n).astype(np.int64)
    issue = t0 + np.cumsum(gaps)
    r["ts_queue_ns"] = issue - 2000
    r["ts_issue_ns"] = issue
    r["ts_complete_ns"] = issue + rng.integers(100_000, 5_000_000, size=n)
    r["dev"] = HEADER["devices"][0]["dev"]  # type: ignore[index]
    write = rng.random(n) < 0.4
    r["op"] = np.where(write, 1, 0)
    r["bytes"] = rng.choice([4096, 8192, 32768], size=n)
    r["offset"] = rng.integers(0, (64 << 30) // 4096, size=n) * 4096
    r["stream"] = np.where(write, np.where(rng.random(n) < 0.3, 3, 2), 1)
    r["pid"] = 4242
    r["tid"] = 4242 + r["stream"].astype(np.uint32)
    return r


def _replayed(rng: np.random.Generator, o: np.ndarray) -> np.ndarray:
    r = o[rng.random(len(o)) >= 0.001].copy()
    late = 7_000_000 + rng.integers(0, 500_000, size=len(r))
    for col in ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns"):
        r[col] = r[col] + late.astype(np.uint64)
    return r


def generate(n: int, orig: Path, rep: Path, seed: int = 23) -> None:
    """ORIG and its replay, `n` requests, a batch at a time in completion order."""
    rng = np.random.default_rng(seed)
    rh = dict(HEADER, metadata={})
    with TraceWriter(orig, HEADER) as wo, TraceWriter(rep, rh) as wr:
        t, left = 10**9, n
        while left:
            o = _batch(rng, t, min(BATCH, left))
            t, left = int(o["ts_issue_ns"][-1]), left - len(o)
            r = _replayed(rng, o)
            wo.write(o[np.argsort(o["ts_complete_ns"], kind="stable")])
            wr.write(r[np.argsort(r["ts_complete_ns"], kind="stable")])
        wo.close({"stop_reason": "duration", "lost": {}, "pre_start": 0})
        wr.close({"stop_reason": "duration", "lost": {}, "pre_start": 0})


def fake_plan(orig: Path, jobdir: Path) -> None:
    """A plan directory whose iologs hold the original's requests (a job per stream,
    op and million requests, each log in time order) and its manifest: what
    relabel reads of a real plan."""
    from replayer.run import ordered

    (jobdir / "iologs").mkdir(parents=True)
    names = {1: "db-read", 2: "db-write", 3: "log-write"}
    jobs = []
    for k, b in enumerate(ordered.batches(ordered.scan(orig), BATCH)):
        for sid in np.unique(b["stream"]).tolist():
            for op, word in ((0, "read"), (1, "write")):
                m = (b["stream"] == sid) & (b["op"] == op)
                if not m.any():
                    continue
                name = f"db0.{names[sid]}.{word}.{k}"
                cols = np.column_stack([b["t"][m] // 1000 + 1000, b["offset"][m], b["bytes"][m]])
                with open(jobdir / "iologs" / f"{name}.log", "w") as f:
                    f.write("fio version 3 iolog\n")
                    np.savetxt(f, cols, fmt=f"%d /dev/vdb {word} %d %d")
                jobs.append({"name": name, "stream": names[sid]})
    man = {"trace": str(orig), "mode": "exact", "jobs": jobs}
    (jobdir / "manifest.json").write_text(json.dumps(man))


LANES_PER_STREAM = 100


def fake_lanes_plan(orig: Path, jobdir: Path, per_stream: int = LANES_PER_STREAM) -> None:
    """As fake_plan, but the layout long traces get (replayer/plan/lanes.py): each
    stream's requests dealt in turn to `per_stream` lanes, each lane a version-2
    iolog spanning the whole trace (a wait line before each request), written a
    batch at a time, so relabelling merges every lane's log at once."""
    from replayer.plan import iolog
    from replayer.run import ordered

    (jobdir / "iologs").mkdir(parents=True)
    names = {1: "db-read", 2: "db-write", 3: "log-write"}
    seen = dict.fromkeys(names, 0)
    made: set[str] = set()
    for b in ordered.batches(ordered.scan(orig), BATCH):
        for sid in np.unique(b["stream"]).tolist():
            m = b["stream"] == sid
            lane = (seen[sid] + np.arange(int(m.sum()))) % per_stream
            seen[sid] += int(m.sum())
            t, off, n = b["t"][m] // 1000, b["offset"][m], b["bytes"][m]
            act = np.where(b["op"][m] == 0, iolog.READ, iolog.WRITE)
            for k in range(per_stream):
                x = lane == k
                name = f"db0.{names[sid]}.g{k:03d}"
                path = jobdir / "iologs" / f"{name}.log"
                with open(path, "a") as f:
                    if name not in made:
                        f.write(iolog.head_v2("/dev/vdb"))
                        made.add(name)
                    f.writelines(
                        iolog.lines_v2("/dev/vdb", t[x], act[x], off[x], n[x], start_us=1000)
                    )
    jobs = [{"name": name, "stream": name.split(".")[1]} for name in sorted(made)]
    man = {"trace": str(orig), "mode": "exact", "jobs": jobs, "exact_layout": "lanes"}
    (jobdir / "manifest.json").write_text(json.dumps(man))


def _relabel(trace: str, jobdir: str, how: str) -> None:
    """Relabel TRACE by the fake plan in JOBDIR, as its own process (see --relabel)."""
    from replayer.run import relabel
    from schemas.documents.plan import JobEntry, ReplayPlan

    # A partial plan: what relabelling reads of one (no targets, no windows).
    raw = json.loads((Path(jobdir) / "manifest.json").read_text())
    man = ReplayPlan.model_construct(
        trace=raw["trace"], mode=raw["mode"], time_scale=1.0, scaling=None,
        exact_layout=raw.get("exact_layout"),
        jobs=[JobEntry.model_construct(**j) for j in raw["jobs"]],
    )  # fmt: skip
    fn = relabel.relabel if how == "streamed" else relabel.relabel_in_memory
    print(json.dumps(fn(Path(trace), Path(jobdir), man).data()))


def _measured(cmd: list[str], out: Path) -> dict:
    """Run `cmd` in its own process: seconds and its own peak RSS (MiB; replay_lab.
    peak_rss: not this process's pages, which hold a million-record batch)."""
    t0 = time.monotonic()
    code, mib = peak_rss(cmd, out, cwd=ROOT)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {code}")
    return {"seconds": round(time.monotonic() - t0, 1), "peak_rss_mib": round(mib)}


def _peer(orig: str, rep: str) -> None:
    """The in-memory implementation, as its own process (see --peer)."""
    from replayer.run import fidelity

    print(json.dumps(fidelity.compare_in_memory(orig, rep), indent=2))


def one(n: int, work: Path, peer_max: int, layout: str = "lanes") -> dict:
    d = work / f"n{n}"
    d.mkdir(parents=True)
    orig, rep = d / "orig.iot", d / "rep.iot"
    t0 = time.monotonic()
    generate(n, orig, rep)
    row: dict = {"requests": n, "generate_s": round(time.monotonic() - t0, 1)}
    row["trace_mib"] = round(orig.stat().st_size / 2**20)
    py = str(ROOT / ".venv" / "bin" / "python")
    iotape = str(ROOT / ".venv" / "bin" / "iotape")
    cmd = [iotape, "replay", "fidelity", str(orig), str(rep), "--json"]
    row["streamed"] = _measured(cmd, d / "streamed.json")
    streamed = json.loads((d / "streamed.json").read_text())["iotape"]
    row["streamed"]["match_share"] = streamed["overall"]["match_share"]
    row["streamed"]["issue_error"] = streamed["overall"].get("issue_error")
    if n <= peer_max:
        cmd = [py, __file__, "--peer", str(orig), str(rep)]
        row["in_memory"] = _measured(cmd, d / "peer.json")
        ref = json.loads((d / "peer.json").read_text())
        ref["original"], ref["replayed"] = streamed["original"], streamed["replayed"]
        row["same_answers"] = ref == streamed
        # Where they differ, it is pairs beyond the 60 s horizon (the in-memory
        # version pairs a lost request's key with its next occurrence, minutes on):
        # without a horizon the streamed answers must be the in-memory ones exactly.
        row["differs_in"] = sorted(
            k for k in ref["overall"] if ref["overall"][k] != streamed["overall"].get(k)
        )
        cmd = [iotape, "replay", "fidelity", str(orig), str(rep), "--json", "--horizon", "1e6"]
        row["streamed_unbounded"] = _measured(cmd, d / "unbounded.json")
        wide = json.loads((d / "unbounded.json").read_text())["iotape"]
        row["same_answers_unbounded"] = ref == wide
        _ratios(row)
    row["relabel"] = _relabel_row(orig, rep, d, n <= peer_max, layout)
    shutil.rmtree(d)
    return row


def _ratios(row: dict) -> None:
    for k in ("seconds", "peak_rss_mib"):
        row[f"{k}_ratio_in_memory_over_streamed"] = round(
            row["in_memory"][k] / max(row["streamed"][k], 1e-9), 2
        )


def _relabel_row(orig: Path, rep: Path, d: Path, peer: bool, layout: str) -> dict:
    """The relabel step of `replay run --record` on the replay, streamed and (on a
    copy) in memory; `same_trace`: both rewrote it to the same bytes."""
    jobdir = d / "jobs"
    (fake_lanes_plan if layout == "lanes" else fake_plan)(orig, jobdir)
    py = str(ROOT / ".venv" / "bin" / "python")
    row: dict = {"plan_layout": layout}
    if peer:
        copy = d / "rep-copy.iot"
        shutil.copy(rep, copy)
        cmd = [py, __file__, "--relabel", str(copy), str(jobdir), "in-memory"]
        row["in_memory"] = _measured(cmd, d / "relabel-peer.json")
    cmd = [py, __file__, "--relabel", str(rep), str(jobdir), "streamed"]
    row["streamed"] = _measured(cmd, d / "relabel.json")
    row["streamed"] |= json.loads((d / "relabel.json").read_text())
    if peer:
        row["same_trace"] = _same_bytes(rep, d / "rep-copy.iot")
        _ratios(row)
    return row


def _same_bytes(a: Path, b: Path) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 24), fb.read(1 << 24)
            if x != y:
                return False
            if not x:
                return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1_000_000, 5_000_000])
    ap.add_argument("--peer-max", type=int, default=5_000_000, help="largest in-memory run")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument(
        "--layout",
        choices=("lanes", "pieces"),
        default="lanes",
        help="the relabelled plan's layout: lanes (v2 logs spanning the trace, what long "
        "traces get) or pieces (v3 logs of a million requests each)",
    )
    out = ROOT / "bench" / "results" / "replay-memory.json"
    ap.add_argument("--output", type=Path, default=out)
    ap.add_argument("--peer", nargs=2, metavar=("ORIG", "REPLAY"), help=argparse.SUPPRESS)
    ap.add_argument("--relabel", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:
        _peer(*a.peer)
        return
    if a.relabel:
        _relabel(*a.relabel)
        return
    work = Path(tempfile.mkdtemp(prefix="iotape-replay-memory-", dir=a.work))
    try:
        rows = []
        for n in a.lengths:
            rows.append(one(n, work, a.peer_max, a.layout))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res = {"bench": "replay-memory", "iops": IOPS, "peer": "in-memory (compare_in_memory)"}
    res["cpu_count"] = os.cpu_count()
    res["runs"] = rows
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
