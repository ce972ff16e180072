"""The loader's trigger evaluator (recorder/trigger.c) against exact values: fed
records through recorder/build/iotape-trigger-check, its percentiles, max, avg,
queue (Little's law, iostat's aqu-sz) and iops over the sliding window match numpy's
over the same records, within the histogram's bin (1/16) for percentiles."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import need

CHECK = Path(__file__).resolve().parents[2] / "recorder" / "build" / "iotape-trigger-check"
OVER_NS = 1_000_000_000
STEP_NS = OVER_NS // 50  # the window slides in 50 steps


def _run(expr: str, queue: np.ndarray, complete: np.ndarray, evals: list[int]) -> list[float]:
    need(CHECK.exists(), f"{CHECK} (make native)")
    lines, i = [], 0
    for now in evals:
        while i < len(complete) and complete[i] <= now:
            lines.append(f"add {queue[i]} {complete[i]}")
            i += 1
        lines.append(f"eval {now}")
    res = subprocess.run(
        [str(CHECK), expr], input="\n".join(lines) + "\n", capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    return [float(line.split()[0]) for line in res.stdout.splitlines()]


def _workload(seed: int = 35) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    complete = np.sort(rng.integers(1, 5 * OVER_NS, 20000))
    latency = rng.lognormal(math.log(200e3), 1.2, complete.size).astype(np.int64) + 1
    return np.maximum(complete - latency, 1), complete


def _window(complete: np.ndarray, now: int) -> np.ndarray:
    """The records the window holds at NOW: its 50 steps end with NOW's."""
    start = (now // STEP_NS - 49) * STEP_NS
    return (complete >= start) & (complete <= now)


EVALS = [int(x) for x in np.linspace(1.2 * OVER_NS, 4.9 * OVER_NS, 12)]


@pytest.mark.parametrize("pct", [50, 99, 99.9])
def test_percentiles_within_a_bin(pct: float) -> None:
    queue, complete = _workload()
    got = _run(f"p{pct:g} > 1ms", queue, complete, EVALS)
    for now, value in zip(EVALS, got, strict=True):
        lat = np.sort((complete - queue)[_window(complete, now)])
        exact = lat[math.ceil(pct / 100 * lat.size) - 1]
        assert exact <= value <= exact * (1 + 1 / 16) + 1, (now, exact, value)


def test_max_avg_queue_iops_exact() -> None:
    queue, complete = _workload()
    lat = complete - queue
    got = {
        m: _run(f"{m} > 1" + ("ms" if m in ("max", "avg") else ""), queue, complete, EVALS)
        for m in ("max", "avg", "queue", "iops")
    }
    for k, now in enumerate(EVALS):
        w = _window(complete, now)
        assert got["max"][k] == lat[w].max()
        assert got["avg"][k] == pytest.approx(lat[w].mean(), rel=1e-12)
        # Little's law: the latencies in the window over its length, iostat's aqu-sz.
        assert got["queue"][k] == pytest.approx(lat[w].sum() / OVER_NS, rel=1e-12)
        assert got["iops"][k] == pytest.approx(w.sum() * 1e9 / OVER_NS, rel=1e-12)


def test_an_empty_window_holds_no_latency() -> None:
    queue, complete = np.array([1]), np.array([1000])
    p99, iops = (_run(e, queue, complete, [1000, 3 * OVER_NS]) for e in ("p99 < 1s", "iops < 1"))
    assert p99[0] == 1023 and math.isnan(p99[1])  # a latency of 999 ns: its bin's top
    assert iops[1] == 0.0
