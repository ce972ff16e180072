"""`replay fidelity` on made-up traces whose timing error is known exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from trace_helpers import make_trace, workload_records

from iotape.replayer import fidelity

N = 4000


def _pair(tmp_path: Path, delay_ns) -> dict:
    """An original and a replay of the same requests, each delayed by `delay_ns`."""
    o = workload_records(N, seed=3)
    o["offset"] = np.arange(N) * 4096  # every request unique: pairs are certain
    o["dev"] = o["dev"][0]
    r = o.copy()
    for col in ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns"):
        r[col] = o[col] + np.asarray(delay_ns, dtype=np.int64)
    return fidelity.compare(make_trace(tmp_path / "o.iot", o), make_trace(tmp_path / "r.iot", r))[
        "overall"
    ]


def test_constant_offset_is_no_error(tmp_path: Path) -> None:
    f = _pair(tmp_path, 7_000_000)
    assert f["match_share"] == 1.0
    assert f["issue_error"]["max_ms"] == 0
    assert f["drift_ms_per_s"] == 0


def test_late_start_is_not_the_reference(tmp_path: Path) -> None:
    # The first requests 2 ms late (start-up), the rest on time: the rest defines
    # the alignment, so only the first 100 count as 2 ms off.
    d = np.full(N, 5_000_000)
    d[:100] += 2_000_000
    f = _pair(tmp_path, d)
    assert f["issue_error"]["p90_ms"] == 0
    assert f["issue_error"]["max_ms"] == 2.0


def test_drift_is_reported_and_counts_as_error(tmp_path: Path) -> None:
    o_t = np.sort(np.random.default_rng(3).integers(1, 10**9, size=N))
    # 1 ms per second late, against the original's own times.
    f = _pair(tmp_path, (o_t * 1e-3).astype(np.int64))
    assert abs(f["drift_ms_per_s"] - 1.0) < 0.01
    assert 0.4 < f["issue_error"]["max_ms"] < 0.6  # half a second either side of the median
