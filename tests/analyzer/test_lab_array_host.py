"""The emulated array's host path (analyzer/lab/src/array.c, analyzer/lab/hostpath.py):
the server's threads at the real-time priority array_model.toml states, and its debug
trace (IOTAPE_ARRAY_TRACE) set beside a recording of the same requests. Asserted on
the order of each request's stamps and on the model's own times, never on how long the
host took (a loaded machine changes that)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import need

from analyzer.lab import blockdev
from analyzer.lab.array import ArrayModel
from analyzer.lab.hostpath import analyse, load_server

pytestmark = pytest.mark.kernel
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def array(kernel: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """array(**model changes) -> (state, model) of a 64 MiB array, down at teardown."""
    need(blockdev.ARRAY_SERVER.exists(), "the array server built (make native)")
    monkeypatch.setenv("IOTAPE_LAB_STATE", str(tmp_path / "state"))
    made: list[str] = []

    def up(**changes: float) -> tuple[blockdev.DeviceState, ArrayModel]:
        model = ArrayModel.load(changes=changes)
        name = f"hostpath-test-{len(made)}"
        try:
            st = blockdev.up(name, "array", 64, model)
        except blockdev.DeviceError as e:
            need(False, f"an emulated array: {e}")
        made.append(name)
        return st, model

    yield up
    still = {s.name for s in blockdev.listed()}  # a test may have taken one down itself
    for name in made:
        if name in still:
            blockdev.down(name)


def _policies(pid: int) -> list[tuple[int, int]]:
    return [
        (os.sched_getscheduler(int(t)), os.sched_getparam(int(t)).sched_priority)
        for t in os.listdir(f"/proc/{pid}/task")
    ]


def test_the_models_thread_runs_at_the_real_time_priority_the_readers_do_not(array: Any) -> None:
    st, model = array(rt_priority=10)
    assert blockdev.stats(st.name)["rt_priority"] == model.rt_priority
    got = _policies(st.pid)
    assert len(got) == 6  # main, the model's thread, 4 FUSE readers
    # The model's thread only (the second started); the readers at the default.
    assert got[1] == (os.SCHED_RR, model.rt_priority)
    assert got[:1] + got[2:] == [(os.SCHED_OTHER, 0)] * 5
    # reader_batch: the FUSE readers at SCHED_BATCH (no preemption on their wakeup).
    both, _ = array(rt_priority=10, reader_batch=1)
    got = _policies(both.pid)
    assert got[1] == (os.SCHED_RR, 10)
    assert got[:1] + got[2:] == [(os.SCHED_BATCH, 0)] * 5  # main (it only waits) and readers
    # 0 (array_model.toml's): the host's default scheduling.
    off, _ = array()
    assert blockdev.stats(off.name)["rt_priority"] == 0
    assert {p for p, _ in _policies(off.pid)} == {os.SCHED_OTHER}


def test_the_host_trace_pairs_every_recorded_request(
    array: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = tmp_path / "srv"
    srv.mkdir()
    monkeypatch.setenv("IOTAPE_ARRAY_TRACE", str(srv))
    st, model = array()
    rec = tmp_path / "fio.iot"
    fio = ["fio", "--name=t", f"--filename={st.loop}", "--direct=1", "--ioengine=libaio",
           "--rw=randrw", "--bs=8k", "--iodepth=4", "--number_ios=300", "--size=64m",
           "--randrepeat=1", "--output-format=json"]  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "iotape", "record", "-d", st.loop, "-o", str(rec), "--", *fio],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    blockdev.down(st.name)  # the server ends and writes the rest of its trace
    traces = list(srv.glob(f"array-{st.pid}.trace"))
    assert len(traces) == 1
    lines = load_server(traces[0])
    assert len(lines) == 300
    op, recv, submit, take, arrive, done, r0, r1 = (lines[:, i] for i in (0, 3, 4, 5, 6, 7, 8, 9))
    # Each stamp after the one before it: received, handed to the model, taken by it;
    # the model's completion, then the reply started and written.
    assert (recv <= submit).all() and (submit <= take).all()
    assert (arrive >= recv).all() and (done >= arrive).all()
    assert (r0 >= done).all() and (r1 >= r0).all()
    # The model's own time for a write under the dirty limit: the cache's.
    writes = op == 1
    assert writes.any() and (~writes).any()
    ack = model.ack_ms_of(8192) / 1e3
    assert (done - arrive)[writes] == pytest.approx(ack, abs=2e-6)
    got = analyse(rec, traces)
    assert got is not None
    assert got["requests"] == got["paired"] == 300
    # The model's time lies inside each request's block-layer time.
    assert got["host_min_ms"] >= 0
