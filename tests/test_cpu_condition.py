"""bench/cpu_condition.py: the CPU conditions issue 34's benches give their timed
runs hold what they say while held and leave nothing changed after, also when
the run fails."""

from __future__ import annotations

import os
import signal
import struct
import sys
import time
from pathlib import Path

import pytest
from conftest import need

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import cpu_condition as cpu


def _dma_latency() -> int:
    """The system's CPU latency limit now (reading the device gives the aggregate)."""
    fd = os.open(cpu.DMA_LATENCY, os.O_RDONLY)
    try:
        return int(struct.unpack("i", os.read(fd, 4))[0])
    finally:
        os.close(fd)


def _need_dma_latency() -> None:
    need(os.access(cpu.DMA_LATENCY, os.R_OK | os.W_OK), f"root and {cpu.DMA_LATENCY}")


@pytest.mark.kernel  # root: /dev/cpu_dma_latency
def test_awake_holds_the_latency_limit_at_zero_and_drops_it_after() -> None:
    _need_dma_latency()
    before = _dma_latency()
    with pytest.raises(RuntimeError), cpu.hold("awake"):
        assert _dma_latency() == 0
        raise RuntimeError("the run failed")
    assert _dma_latency() == before


@pytest.mark.kernel
def test_awake_keeps_every_vcpu_out_of_the_halting_states() -> None:
    """With the limit at 0 the governors pick only POLL: no halt in the window (the
    wake-up probe before it makes every vCPU run once, ending a halt begun before)."""
    _need_dma_latency()
    with cpu.held("awake", quiet_s=0.05) as h:
        time.sleep(0.2)
    rep = h.report(requests=1)
    assert rep["condition"] == "awake"
    assert rep["halts_per_request"] == 0, rep["idle"]
    assert rep["wake_p50_us"] is None or rep["wake_p50_us"] > 0
    assert 0 <= rep["host_cpus"] <= (os.cpu_count() or 1) + 0.5


def test_haltpoll_sets_the_knob_back_on_failure_and_on_sigterm(tmp_path: Path) -> None:
    knob = tmp_path / "guest_halt_poll_ns"  # a stand-in: the real one is the VM's
    knob.write_text("0\n")
    with pytest.raises(RuntimeError), cpu._haltpoll(12345, knob):
        assert knob.read_text() == "12345"
        raise RuntimeError("the run failed")
    assert knob.read_text() == "0"
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as e, cpu._haltpoll(777, knob):
        assert knob.read_text() == "777"
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert e.value.code == 128 + signal.SIGTERM
    assert knob.read_text() == "0"
    assert signal.getsignal(signal.SIGTERM) == handler


def test_spin_ends_its_busy_loop(tmp_path: Path) -> None:
    with cpu.hold("spin"):
        kids = _children()
        assert kids, "no busy loop beside the body"
    assert not (_children() & kids)


def _children() -> set[int]:
    me = os.getpid()
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            out.add(int(stat.parent.name))
    return out


def test_an_unknown_condition_is_refused() -> None:
    with pytest.raises(ValueError, match="awake"), cpu.hold("asleep"):
        pass
