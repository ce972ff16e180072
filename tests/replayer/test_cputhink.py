"""The dependent plan's thinks less the cold CPU time a long sleep added
(replayer/plan/cputhink.py, `replay plan --timing dependent --cpu-think
recorded|warm`). No root: synthetic traces with sched records, a file target."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_schedsplit import _files, _plan, _sched, _thinks, _write
from test_wakeedges import FLUSHER, SESSION, _req, _wake

from iotape.commands.replay.plan import _cpu_think_line
from recorder.tracefile.format import SCHED_OP, WAKE_OP
from replayer.plan import cputhink, schedsplit

N = 12
THINK = 200_000  # the session's think between a read's completion and its next read
WAIT = 20_000  # the run-queue wait each think holds
CPU = 60_000  # the session's time on a CPU each cycle
SLOW, FAST = 10_000_000, 50_000  # service: a sleep that chills the caches, one that does not


def _session(service: int, sched: bool = True) -> np.ndarray:
    """A synchronous session (SESSION): N reads of `service`, THINK after each
    completion, each with a sched record whose run-queue wait grew WAIT and
    whose CPU time grew CPU since the previous read, and a flusher (FLUSHER)
    the session wakes, writing 100 us after each wake."""
    parts = []
    t = 1_000_000
    for k in range(N):
        parts.append(_req(t, service, SESSION, "db-read", "read", 2 * k))
        if sched:
            parts.append(_sched(t, SESSION, 1_000_000 + WAIT * k, 5_000_000 + CPU * k))
        parts.append(_wake(t + service + 10_000, SESSION, FLUSHER))
        parts.append(_req(t + service + 110_000, 100_000, FLUSHER, "db-write", "write", 2 * k + 1))
        t += service + THINK
    r = np.zeros(len(parts), parts[0].dtype)  # not np.concatenate: it packs the dtype
    for i, x in enumerate(parts):
        r[i] = x[0]
    return r[np.argsort(r["ts_complete_ns"], kind="stable")]


def test_the_cold_ratio_grows_with_the_sleep_from_one() -> None:
    us = np.array([0, 10, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, 10**7])
    r = cputhink.cold_ratio(us * 1000)
    assert r[0] == r[1] == r[2] == 1.0  # a short sleep: the warm figure itself
    assert (np.diff(r) >= 0).all() and r[-1] == r[-2] == cputhink.COLD_RATIO[-1]
    assert r[6] > 2  # 10 ms: the calibration's point (docs/benchmarks.md)
    think, cpu = np.array([THINK, THINK, THINK, CPU // 2]), np.array([CPU, CPU, 0, CPU])
    cut = cputhink.cut_ns(think, cpu, np.array([10_000_000, 50_000, 10**9, 10_000_000]))
    assert 0 < cut[0] < CPU and cut[1] == 0 and cut[2] == 0
    # the cycle's CPU longer than the think: the think is all CPU, made warm, never 0
    assert cut[3] == CPU // 2 - round(CPU // 2 / r[6]) and cut[3] < CPU // 2


def test_cycles_are_split_into_cpu_and_sleep() -> None:
    r = _session(SLOW)
    split = schedsplit.SchedSplit.of(r[r["op"] == SCHED_OP])
    reads = r[(r["tid"] == SESSION) & ~np.isin(r["op"], [SCHED_OP, WAKE_OP])]
    cpu, asleep = split.cpu_sleep_ns(reads)
    assert cpu[0] == asleep[0] == 0  # the thread's first record: no cycle before it
    assert (cpu[1:] == CPU).all() and (asleep[1:] == SLOW + THINK - CPU - WAIT).all()


@pytest.mark.parametrize("service", [SLOW, FAST])
def test_thinks_are_replayed_less_their_cold_cpu_time(tmp_path: Path, service: int) -> None:
    trace = _write(tmp_path / "t.iot", _session(service))
    jobdir, man = _plan(tmp_path, trace, "warm", cpu_think="warm")
    d = {x["stream"]: x for x in man["dependencies"]}["db0.db-read"]
    asleep = np.array([service + THINK - CPU - WAIT])
    cold = int(cputhink.cut_ns(np.array([THINK - WAIT]), np.array([CPU]), asleep)[0])
    thinks = _thinks(jobdir)
    assert thinks[0].startswith("@")
    assert all(thinks[k] == str(round((THINK - WAIT - cold) / 1000)) for k in range(1, N))
    assert (d["cpu_think"], d["run_queue"], d["run_queue_thinks"]) == ("warm", "net", N - 1)
    if service == FAST:  # woken within 100 us: warm as recorded, nothing taken
        assert cold == 0 and d["cpu_think_thinks"] == 0
        return
    assert cold > 0 and d["cpu_think_thinks"] == N - 1
    was, now = (N - 1) * (THINK - WAIT), (N - 1) * (THINK - WAIT - cold)
    assert d["cpu_think_s"] == [round(was / 1e9, 4), round(now / 1e9, 4)]
    assert f"; {N - 1} thinks less their cold CPU time: " in _cpu_think_line(d)
    # the default keeps the CPU time; --run-queue recorded with warm: the cold CPU only
    rec, man = _plan(tmp_path, trace, "recorded")
    assert all(_thinks(rec)[k] == str((THINK - WAIT) // 1000) for k in range(1, N))
    d = {x["stream"]: x for x in man["dependencies"]}["db0.db-read"]
    assert (d["cpu_think"], d["cpu_think_thinks"], _cpu_think_line(d)) == ("recorded", 0, "")
    only, _ = _plan(tmp_path, trace, "only", cpu_think="warm", run_queue="recorded")
    assert all(_thinks(only)[k] == str(round((THINK - cold) / 1000)) for k in range(1, N))


def test_a_trace_without_sched_records_plans_as_before(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.iot", _session(SLOW, sched=False))
    a, man = _plan(tmp_path, trace, "warm", cpu_think="warm")
    b, _ = _plan(tmp_path, trace, "recorded", cpu_think="recorded")
    assert _files(a) == _files(b)
    d = {x["stream"]: x for x in man["dependencies"]}["db0.db-read"]
    assert (d["sched_recorded"], d["cpu_think_thinks"]) == (False, 0)
    assert _cpu_think_line(d) == "; CPU time as recorded (no sched records to tell it)"
    assert all(_thinks(a)[k] == str(THINK // 1000) for k in range(1, N))
