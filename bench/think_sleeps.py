"""Which recorded thinks held a sleep, by their length (issue 34, the spin rule of
replayer/src/io.c): where the application stayed on a CPU from its previous
request's completion to its next issue, and where it slept in between.

For each synchronous thread of a trace with sched records (`--wakes`,
docs/trace-format.md "Sched records"), each think (a request's issue less its
thread's previous completion, where it came after it) and the thread's `runs`
between the two issues (the times the kernel put it on a CPU): one is the
wake-up at the completion alone, more is a sleep (or a preemption) inside the
think. Per think length: how many, the share with a single run, and the median
CPU time between the two issues. No peer: this reads traces, it times nothing.

    .venv/bin/python bench/think_sleeps.py TRACE... [-o FILE]
    (no root; JSON on stdout)
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

from recorder.tracefile import open_trace
from recorder.tracefile.format import SCHED_FIELDS

EDGES_US = [0, 25, 50, 100, 150, 200, 300, 500, 1000, 3000]


def thinks(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each think (us), the runs and the CPU time (us) between its two issues."""
    with open_trace(path) as t:
        r = t.read_all()
        sched = list(t.iter_sched())
    if not sched:
        raise SystemExit(f"{path}: no sched records (record with --wakes)")
    s = np.concatenate(sched)
    keys = zip(s["tid"].tolist(), s["ts_queue_ns"].tolist(), strict=True)
    at = {k: i for i, k in enumerate(keys)}
    runs = s[SCHED_FIELDS["runs"]].astype(np.int64)
    cpu = s[SCHED_FIELDS["on_cpu_ns"]].astype(np.int64)
    out: list[tuple[float, int, float]] = []
    for tid in np.unique(r["tid"]).tolist():
        x = np.sort(r[r["tid"] == tid], order="ts_issue_ns")
        for a, b in itertools.pairwise(x):
            ka = at.get((tid, int(a["ts_queue_ns"])))
            kb = at.get((tid, int(b["ts_queue_ns"])))
            if ka is None or kb is None or b["ts_issue_ns"] < a["ts_complete_ns"]:
                continue  # no sched record, or in flight together (no think)
            think = (int(b["ts_issue_ns"]) - int(a["ts_complete_ns"])) / 1e3
            out.append((think, int(runs[kb] - runs[ka]), (int(cpu[kb]) - int(cpu[ka])) / 1e3))
    a = np.array(out, dtype=float).reshape(-1, 3)
    return a[:, 0], a[:, 1], a[:, 2]


def by_length(path: Path) -> list[dict]:
    think, runs, cpu = thinks(path)
    rows = []
    for lo, hi in zip(EDGES_US, [*EDGES_US[1:], None], strict=True):
        sel = (think >= lo) & (think < hi if hi is not None else True)
        if sel.any():
            rows.append({"think_us": [lo, hi], "thinks": int(sel.sum()),
                         "no_sleep_share": round(float((runs[sel] <= 1).mean()), 3),
                         "cpu_p50_us": round(float(np.median(cpu[sel])), 1)})  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", type=Path, nargs="+")
    ap.add_argument("-o", "--output", type=Path)
    a = ap.parse_args()
    text = json.dumps({str(t): by_length(t) for t in a.traces}, indent=1)
    if a.output:
        a.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
