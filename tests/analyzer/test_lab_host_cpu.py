"""The host's cores in the lab's prediction (analyzer/lab/hostcpu.py, issue 38): what a
run's CPU is measured as (children's rusage, /proc/stat), the M/M/m wait of the
sessions' CPU, its fixed point against closed forms, and the prediction with it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from analyzer.lab import hostcpu, predict
from analyzer.tiering.events import READ, Events


def test_host_busy_is_all_but_idle_and_iowait() -> None:
    hz = hostcpu.os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice
    text = f"cpu  {hz} 0 {hz} {5 * hz} {hz} 0 0 0 {hz} 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
    busy, total = hostcpu.host_busy_s(text)
    assert busy == pytest.approx(2.0)  # guest is inside user already: not counted twice
    assert total == pytest.approx(8.0)


def test_since_counts_a_reaped_childs_own_cpu() -> None:
    before = hostcpu.Snapshot.now()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n"
    out = subprocess.run(
        [sys.executable, "-c", burn + "print(time.process_time())"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    own = float(out.stdout)
    got = hostcpu.since(before)
    # The child's own CPU (its process_time) is inside what the kernel adds for it.
    assert got["children_s"] >= own - 0.02
    assert got["host_busy_s"] >= 0 and got["wall_s"] > 0 and got["cores"] >= 1


def test_stretch_is_m_m_m_time_in_system() -> None:
    assert hostcpu.stretch(1, 0.5) == pytest.approx(2.0)  # M/M/1: 1 / (1 - U)
    # M/M/2 at U 0.5 (1 Erlang): C = 1/3, wait C / (2 x 0.5) of a service.
    assert hostcpu.stretch(2, 0.5) == pytest.approx(1 + 1 / 3)
    assert hostcpu.stretch(2, 0.0) == pytest.approx(1.0)
    assert hostcpu.stretch(2, 1.0) == float("inf")


def _demand(run_cores: float = 0.2, session_ms: float = 0.1) -> hostcpu.Demand:
    return hostcpu.Demand(2, run_cores, session_ms / 1e3, 0.3e-3, 0.0)


def test_demand_from_a_measurement() -> None:
    host = {"children_s": 2.0, "host_busy_s": 10.0, "wall_s": 20.0, "cores": 2}
    d = hostcpu.demand(host, server_s=4.0, reads=10_000)
    assert d is not None
    assert d.run_cores == pytest.approx(0.3)
    assert d.session_s == pytest.approx(2.0 / 10_000)
    assert d.per_read_s == pytest.approx(6.0 / 10_000)
    assert d.other_cores == pytest.approx(0.2)
    assert d.max_gain == pytest.approx(2 / 0.3)
    assert hostcpu.demand(None, 1.0, 10) is None
    assert hostcpu.demand(host, 0.0, 0) is None


def test_bounded_is_the_fixed_point_of_the_wait() -> None:
    d = _demand()
    cycle = np.array([1e-3])  # one loop: its sessions' cycle a read at the gain 8
    got = hostcpu.bounded(d, np.array([8.0]), np.array([1.0]), cycle)
    e = got["cpu_wait_ms"] / 1e3
    g = got["read_throughput_gain"]
    # The gain is the loop's with the wait in its cycle, the wait the one that gain makes.
    assert g == pytest.approx(8.0 / (1 + e / 1e-3), rel=1e-6)
    assert e == pytest.approx(d.extra_s(g), rel=1e-4, abs=1e-9)
    assert 1 < g < 8 and got["utilization"] < 1
    assert got["unbounded_gain"] == pytest.approx(8.0)


def test_bounded_leaves_the_baselines_load_alone_and_never_passes_the_cores() -> None:
    d = _demand()
    same = hostcpu.bounded(d, np.array([1.0]), np.array([1.0]), np.array([1e-3]))
    assert same["read_throughput_gain"] == pytest.approx(1.0) and same["cpu_wait_ms"] == 0
    # A gain of 100 would ask for 10 x the 2 cores: the wait keeps it under m / D.
    big = hostcpu.bounded(d, np.array([100.0]), np.array([1.0]), np.array([1e-4]))
    assert big["read_throughput_gain"] < d.max_gain == pytest.approx(10.0)
    # More CPU a read at the same load waits longer: a lower gain.
    one = (np.array([8.0]), np.array([1.0]), np.array([1e-3]))
    more = hostcpu.bounded(_demand(session_ms=0.3), *one)
    less = hostcpu.bounded(_demand(session_ms=0.1), *one)
    assert more["read_throughput_gain"] < less["read_throughput_gain"]


def _events(n: int, lat_ms: float) -> Events:
    """n reads of one unit, 1 ms apart (test_lab_hybrid's)."""
    return Events(
        t_ns=np.arange(n, dtype=np.int64) * 1_000_000,
        dev=np.zeros(n, dtype=np.int64),
        offset=np.zeros(n, dtype=np.int64),
        nbytes=np.full(n, 32768, dtype=np.int64),
        op=np.full(n, READ, dtype=np.int8),
        lat_ns=np.full(n, int(lat_ms * 1e6), dtype=np.int64),
    )


def test_predict_with_the_cores() -> None:
    # The law's case of test_lab_hybrid: one hot unit, 10 ms reads, 1 ms hits, 2
    # threads at 100 reads/s: about 1.8x; with the cores, less, by the wait.
    base, fast = _events(200, 10.0), _events(10, 1.0)
    p = predict.params("cache", 4, 1024, 5.0, 5.0)
    kw = {"threads": 2, "base_reads_per_s": 100.0, "closed": False}
    without = predict.predict(base, fast, p, **kw)  # type: ignore[arg-type]
    d = hostcpu.Demand(1, 0.5, 2e-3, 5e-3, 0.0)  # half a core at the baseline, 2 ms a read
    got = predict.predict(base, fast, p, cpu=d, **kw)  # type: ignore[arg-type]
    assert without["host_cpu"] is None
    host = got["host_cpu"]
    assert host["unbounded_gain"] == pytest.approx(without["read_throughput_gain"])
    assert got["read_throughput_gain"] == pytest.approx(host["read_throughput_gain"])
    assert 1 < got["read_throughput_gain"] < without["read_throughput_gain"]
    assert host["utilization"] < 1  # one core: never more than 2x the baseline's reads
    # The law itself is reported as before, the cores beside it.
    assert got["littles_law"] == without["littles_law"]
