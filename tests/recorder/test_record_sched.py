"""`iotape record --wakes` writes a sched record beside each request (docs/trace-format.md,
"Sched records"), against the real kernel: the submitter's run-queue wait, CPU
time and times put on a CPU, each cumulative, as it submits. A thread that burns
a known CPU time between its reads shows at least that much CPU between its
records."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import iotape

from recorder.tracefile import open_trace
from recorder.tracefile.format import SCHED_FIELDS, SCHED_OP, SCHED_VERSION, WAKE_OP
from replayer.plan import schedsplit

# Root, BPF and a loop device (conftest `kernel`): fails under CI=true without them.
pytestmark = pytest.mark.kernel

READS = 30
BURN_NS = 2_000_000  # CPU time each read is preceded by (thread CPU clock)

# One thread: READS direct reads, each after BURN_NS of its own CPU time.
BURNER = """
import mmap, os, sys, threading, time
path, n, burn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 4096)
for i in range(n):
    t = time.thread_time_ns()
    while time.thread_time_ns() - t < burn:
        pass
    os.preadv(fd, [buf], i * 4096)
print(threading.get_native_id(), time.thread_time_ns())
"""


def test_each_request_has_a_sched_record_with_its_cpu(loop, tmp_path: Path) -> None:
    script = tmp_path / "burner.py"
    script.write_text(BURNER)
    out = tmp_path / "t.iot"
    res = iotape("record", "-d", loop.path, "-o", str(out), "--wakes", "--",
                 sys.executable, str(script), loop.path, str(READS), str(BURN_NS),
                 timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr
    tid, cpu_total = (int(x) for x in res.stdout.split()[-2:])
    with open_trace(out) as t:
        assert t.header["version"] == SCHED_VERSION
        reqs = t.read_all()
        sched = np.concatenate(list(t.iter_sched()))
        assert t.footer is not None
        assert t.footer["sched"] == len(sched) and t.footer["sched_lost"] == 0
    # Requests are handed out without them, and they are none of the wake records.
    assert not np.isin(reqs["op"], [WAKE_OP, SCHED_OP]).any()
    assert (sched["op"] == SCHED_OP).all()
    mine = reqs[reqs["tid"] == tid]
    assert len(mine) == READS
    # One sched record per request, paired by tid and ts_queue_ns.
    s = sched[sched["tid"] == tid]
    assert len(s) == READS
    assert sorted(s["ts_queue_ns"].tolist()) == sorted(mine["ts_queue_ns"].tolist())
    s = s[np.argsort(s["ts_queue_ns"])]
    run_delay = s[SCHED_FIELDS["run_delay_ns"]].astype(np.int64)
    on_cpu = s[SCHED_FIELDS["on_cpu_ns"]].astype(np.int64)
    runs = s[SCHED_FIELDS["runs"]].astype(np.int64)
    # Cumulative counters: never go back.
    assert (np.diff(run_delay) >= 0).all() and (np.diff(on_cpu) >= 0).all()
    assert (np.diff(runs) >= 0).all() and runs[-1] > runs[0]
    # The thread burnt BURN_NS between each two reads; the kernel brings a running
    # thread's CPU time up to date at its next sleep or tick, so the sum over the
    # run is at least all but the last two burns, and no more than its whole CPU.
    cpu = int(on_cpu[-1] - on_cpu[0])
    assert (READS - 3) * BURN_NS <= cpu <= cpu_total
    # The run-queue wait between two reads fits in the time between them.
    gaps = np.diff(s["ts_queue_ns"].astype(np.int64))
    assert (np.diff(run_delay) <= gaps).all()
    # What the planner makes of them: per request its predecessor's interval.
    split = schedsplit.read_split(str(out))
    assert split is not None
    assert split.pairs(mine) == READS
