"""`iotape record --wakes` against the real kernel: a thread that wakes another after
its I/O is recorded as the other's waker, and a dependent plan of the trace has
the woken thread's request wait for the waker's (replayer/plan/wakeedges.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import iotape

from recorder.tracefile import open_trace
from recorder.tracefile.format import SCHED_VERSION
from replayer.plan import deps, wakeedges

# Root, BPF and a loop device (conftest `kernel`): fails under CI=true without them.
pytestmark = pytest.mark.kernel

# Ping-pong: A reads, then wakes B; B (asleep on its event) reads, then wakes A.
# Each thread's read comes after the other's read completed and its wake.
PING_PONG = """
import mmap, os, sys, threading
path, rounds = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
turn = {"a": [threading.Event() for _ in range(rounds)],
        "b": [threading.Event() for _ in range(rounds)]}
tids = {}
def run(me, other, slot):
    tids[me] = threading.get_native_id()
    buf = mmap.mmap(-1, 4096)
    for i in range(rounds):
        if me == "b" or i:
            turn[me][i].wait()
        os.preadv(fd, [buf], (2 * i + slot) * 4096)
        turn[other][i if me == "a" else i + 1 if i + 1 < rounds else i].set()
a = threading.Thread(target=run, args=("a", "b", 0))
b = threading.Thread(target=run, args=("b", "a", 1))
b.start(); a.start(); a.join(); b.join()
print(tids["a"], tids["b"])
"""


def test_a_thread_woken_after_anothers_io_has_a_wake_edge(loop, tmp_path: Path) -> None:
    script = tmp_path / "ping_pong.py"
    script.write_text(PING_PONG)
    out = tmp_path / "t.iot"
    res = iotape("record", "-d", loop.path, "-o", str(out), "--wakes", "--",
                 sys.executable, str(script), loop.path, "40", timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr
    a, b = (int(x) for x in res.stdout.split()[-2:])
    with open_trace(out) as t:
        assert t.header["version"] == SCHED_VERSION  # wake and sched records
        reqs = t.read_all()
        wakes = wakeedges.Wakes.of(t.iter_wakes())
        assert t.footer is not None and t.footer["wakes"] == len(wakes)
        assert t.footer["wakes_lost"] == 0
    assert sorted(np.unique(reqs["tid"]).tolist()) == sorted([a, b])
    assert len(reqs) == 80
    # Recorded: wakes of each by the other (B sleeps on its event whenever A sets it,
    # unless a stalled vCPU kept B from reaching its wait; some of them at least).
    a_to_b = (wakes.waker == a) & (wakes.wakee == b)
    assert a_to_b.any()
    # Every wake recorded is one of the two threads by the other: the loop device's
    # completions (a kworker) and the interrupts are left out.
    assert set(zip(wakes.waker.tolist(), wakes.wakee.tolist(), strict=True)) <= {(a, b), (b, a)}
    # A dependent plan's wake edges: B's read after A's wake waits for A's read
    # that completed before it, and was issued before it.
    reqs = reqs[np.argsort(deps.times(reqs)[0], kind="stable")]
    start, end = deps.times(reqs)
    d = deps.infer(reqs)
    own = np.where(d.pred >= 0, d.think_ns, np.iinfo(np.int64).max)
    tid = reqs["tid"].astype(np.int64)
    w = wakeedges.wake_edges(start, end, tid, own, wakes)
    to_b = tid[w.i] == b
    assert to_b.any()
    assert (tid[w.j][to_b] == a).all()
    assert (end[w.j] <= start[w.i]).all() and (start[w.j] < start[w.i]).all()
