"""`replay fidelity` on made-up traces whose timing error is known exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from trace_helpers import make_trace, workload_records

from replayer.run import fidelity

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


def _locality_pair(tmp_path: Path, replay_offsets) -> dict:
    """A zipf-like original (8 KiB reads over 256 MiB) and a replay with the same
    times, ops and sizes whose offsets come from `replay_offsets(rng, n)`."""
    rng = np.random.default_rng(5)
    o = workload_records(N * 5, seed=5)
    o["dev"], o["op"], o["bytes"] = o["dev"][0], 0, 8192
    blocks = 32768
    rank = np.minimum(rng.zipf(1.3, size=len(o)), blocks) - 1
    o["offset"] = rng.permutation(blocks)[rank] * 8192
    r = o.copy()
    r["offset"] = replay_offsets(rng, len(o), o["offset"])
    return fidelity.compare(make_trace(tmp_path / "o.iot", o), make_trace(tmp_path / "r.iot", r))


def test_fidelity_flags_a_replay_that_destroys_locality(tmp_path: Path) -> None:
    """Same rate, read share and sizes, uniform offsets over the same space: the
    shape figures are perfect and the locality verdict still says unfaithful."""
    c = _locality_pair(tmp_path, lambda rng, n, off: rng.integers(0, 32768, size=n) * 8192)
    assert c["overall"]["iops_mape_pct"] == 0
    assert c["overall"]["size_hist_tv"] == 0
    loc = c["locality"]
    assert not loc["faithful"]
    assert loc["max_gap_pp"] > 20
    assert loc["hot10_share"][0] > 2 * loc["hot10_share"][1]
    assert any("LRU hit ratio" in w for w in loc["why_not"])
    assert len(loc["lru_hit_ratio"][0]) == len(loc["lru_fractions"]) == 9


def test_fidelity_passes_a_replay_that_keeps_locality(tmp_path: Path) -> None:
    """The same offsets, relabelled onto other blocks (a permutation of the 64 KiB
    units): popularity and reuse are the original's, so the curve matches."""

    def moved(rng, n, off):
        units = 32768 * 8192 >> 16
        return rng.permutation(units)[off >> 16] * 65536 + off % 65536

    loc = _locality_pair(tmp_path, moved)["locality"]
    assert loc["faithful"], loc["why_not"]
    assert loc["max_gap_pp"] < 0.01
    assert loc["footprint_bytes"][0] == loc["footprint_bytes"][1]
