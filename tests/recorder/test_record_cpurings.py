"""The completion records' per-CPU rings (recorder/bpf/iotape.h, recorder/cpurings.c)
against the real kernel: when the loader stops draining, a full ring loses records
and counts each one (never a torn or repeated record); what was written comes back
whole, in completion order."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import IOTAPE, completed_ios, finish_loader

from devices import naming
from recorder.tracefile import open_trace

pytestmark = pytest.mark.kernel


def _loader_of(out: Path, deadline_s: float = 60.0) -> int:
    """The pid of the iotape-rec writing OUT, once it has attached."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-f", f"iotape-rec .*{out}"], capture_output=True)
        pids = found.stdout.split()
        if pids:
            return int(pids[0])
        time.sleep(0.05)
    raise AssertionError(f"no iotape-rec for {out} within {deadline_s:g} s")


def _fio_reads(dev: str, res: Path, *extra: str) -> list[str]:
    """fio's 4 KiB random reads from two io_uring jobs for 4 s, JSON to RES."""
    return [
        "fio",
        "--name=rings",
        f"--filename={dev}",
        "--direct=1",
        "--rw=randread",
        "--bs=4k",
        "--ioengine=io_uring",
        "--numjobs=2",
        *extra,
        "--time_based",
        "--runtime=4",
        "--output-format=json",
        f"--output={res}",
    ]


def _fio_reads_done(res: Path) -> int:
    return sum(j["read"]["total_ios"] for j in json.loads(res.read_text())["jobs"])


def test_a_full_ring_counts_what_it_loses_and_keeps_the_rest_whole(loop, tmp_path: Path) -> None:
    """--ring-mb 1 gives each CPU a few thousand slots; the loader stopped (SIGSTOP)
    for a second of fio at full speed fills them. Every request the kernel completed
    is a record or counted in lost.ringbuf_full, and every record is one of fio's
    reads, whole (a slot overwritten while read would show a foreign byte)."""
    out, res = tmp_path / "full.iot", tmp_path / "fio.json"
    size = os.path.getsize(loop.backing)
    before = completed_ios(loop.name)
    fio = _fio_reads(loop.path, res, "--iodepth=16")
    cmd = [*IOTAPE, "record", "-o", str(out), "-d", loop.path, "--ring-mb", "1", "--", *fio]
    rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        pid = _loader_of(out)
        time.sleep(1.0)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(1.5)
        os.kill(pid, signal.SIGCONT)
    finally:
        finish_loader(rec, 300)
    completed = completed_ios(loop.name) - before
    assert completed == _fio_reads_done(res)

    trace = open_trace(out)
    footer = trace.footer
    recs = trace.read_all()
    assert footer is not None and footer["events"] == len(recs)
    lost = footer["lost"]["ringbuf_full"]
    assert lost > 0, "the loader stopped for 1.5 s and no ring filled"
    assert len(recs) + lost == completed
    assert set(recs["op"].tolist()) == {0} and set(recs["bytes"].tolist()) == {4096}
    assert set(recs["comm"].tolist()) == {b"fio"}
    assert set(recs["dev"].tolist()) == {naming.resolve(loop.path).dev}
    assert (recs["offset"] % 4096 == 0).all() and (recs["offset"] < size).all()
    assert (recs["ts_queue_ns"] <= recs["ts_issue_ns"]).all()
    assert (recs["ts_issue_ns"] <= recs["ts_complete_ns"]).all()
    # No record twice: each (tid, queue time) is one request.
    keys = np.unique(recs[["tid", "ts_queue_ns"]])
    assert len(keys) == len(recs)


REC = Path(__file__).resolve().parents[2] / "recorder" / "build" / "iotape-rec"


def test_a_ring_past_half_full_wakes_the_loader(loop, tmp_path: Path) -> None:
    """With its drain timer at 5 s (--timer-ms), the loader reads the rings only
    when the kernel side wakes it: at half full and every eighth after. fio at
    a steady 2 x 10k IOPS for 4 s writes ~80k records into --ring-mb 1's few
    thousand slots a CPU, ten times what they hold: without the wake-up they
    fill before the first timer and lose most; with it, every completed request
    is a record and none is lost. The rate leaves the woken loader ~100 ms to
    run before a ring fills, which a loaded 2-vCPU machine gives it."""
    st = os.stat(loop.path)
    out, res, meta = tmp_path / "wake.iot", tmp_path / "fio.json", tmp_path / "m.json"
    meta.write_text('{"host":"test"}')
    before = completed_ios(loop.name)
    cmd = [str(REC), "-o", str(out), "--meta", str(meta), "--timer-ms", "5000"]
    cmd += ["--ring-mb", "1", "--dev", f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"]
    rec = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert rec.stdout is not None
        assert json.loads(rec.stdout.readline())["type"] == "ready"
        fio = _fio_reads(loop.path, res, "--iodepth=8", "--rate_iops=10000")
        subprocess.run(fio, check=True, capture_output=True)
        rec.send_signal(signal.SIGINT)
    finally:
        finish_loader(rec, 60)
    completed = completed_ios(loop.name) - before
    assert completed == _fio_reads_done(res)
    trace = open_trace(out)
    footer = trace.footer
    assert footer is not None and footer["lost"]["ringbuf_full"] == 0
    slots = (1 << 20) // os.cpu_count() // 80  # at most this many a CPU (a power of 2 below)
    assert completed > 4 * slots * os.cpu_count(), "too few requests to fill the rings"
    assert footer["events"] == len(trace.read_all()) == completed
