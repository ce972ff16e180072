"""The loader's merge of its per-CPU ring buffers (recorder/merge.c), fed records
through recorder/build/iotape-merge-check: each drain takes out exactly the records
completed before its cutoff, in completion order across the rings, every record
once, and the rest at the end."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
from conftest import need

CHECK = Path(__file__).resolve().parents[2] / "recorder" / "build" / "iotape-merge-check"


def _run(lines: list[str]) -> list[list[tuple[int, int]]]:
    """Each `out`'s records as (ts, offset), in the order taken out."""
    need(CHECK.exists(), f"{CHECK} (make native)")
    res = subprocess.run(
        [str(CHECK)], input="\n".join(lines) + "\n", capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    outs: list[list[tuple[int, int]]] = [[]]
    for line in res.stdout.splitlines():
        if line.startswith("held"):
            outs.append([])
        else:
            ts, off = line.split()
            outs[-1].append((int(ts), int(off)))
    return outs[:-1]


def test_drains_take_out_what_completed_before_the_cutoff_in_order() -> None:
    rng = np.random.default_rng(36)
    # Four rings (CPUs), each in its own completion order, interleaved as drains
    # would find them: 20,000 records (past a run's first growth), 40 drains.
    n = 20_000
    ts = np.sort(rng.integers(1, 10**9, n))
    ring = rng.integers(0, 4, n)
    # When each record reaches the loader: up to 2 ms after it completed, never
    # before a record of its own ring that completed earlier (a ring is in order).
    reach = ts + rng.integers(0, 2_000_000, n)
    for r in range(4):
        mine = ring == r
        reach[mine] = np.maximum.accumulate(reach[mine])
    arrival = np.argsort(reach, kind="stable")
    lines, expected, offsets, taken = [], [], {}, 0
    cutoffs = np.sort(rng.integers(0, 10**9, 40))
    chunks = np.array_split(arrival, 40)
    pending: list[tuple[int, int]] = []
    for cutoff, chunk in zip(cutoffs, chunks, strict=True):
        # A ring hands out its records in its own order.
        for i in sorted(chunk, key=lambda i: (ring[i], ts[i])):
            lines.append(f"add {ring[i]} {ts[i]}")
            offsets[taken] = int(ts[i])
            pending.append((int(ts[i]), taken))
            taken += 1
        lines.append(f"out {cutoff}")
        # What has reached the loader and completed before the cutoff, in order
        # (a record that reaches it later goes out with a later drain).
        expected.append(sorted(p for p in pending if p[0] < cutoff))
        pending = [p for p in pending if p[0] >= cutoff]
    lines.append("out all")
    expected.append(sorted(pending))
    outs = _run(lines)
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected, strict=True):
        assert [t for t, _ in got] == [t for t, _ in want]
        assert all(t == offsets[o] for t, o in got)
    every = [o for out in outs for _, o in out]
    assert sorted(every) == list(range(n))


def test_a_ring_out_of_its_own_order_loses_nothing() -> None:
    # A completion nested in another on one CPU reserves first with the later time:
    # its ring holds 50 then 40. The merge keeps each ring's order (it sees heads
    # only) and hands out every record once.
    outs = _run(["add 0 10", "add 0 50", "add 0 40", "add 1 20", "add 1 45", "out 46", "out all"])
    assert outs[0] == [(10, 0), (20, 3), (45, 4)]
    assert outs[1] == [(50, 1), (40, 2)]
