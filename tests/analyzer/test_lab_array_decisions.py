"""Differential, on a recorded trace: the emulated array's tier and read cache
(analyzer/lab/src/arraytier.c over workload/src/tierpolicy.c and cachepolicy.c, as
`iotape lab hybrid --tier-in array` runs them) decide as the offline simulator
(analyzer.tiering, as the lab's prediction runs it) on the same requests.

The recording is traces/workload/reference-20mbx-5s.iot (the reference workload,
5.4 s, 1,111 requests of 4-520 KiB, 64 % writes, on one device; see its commit). The
array server's offline mode (`iotape-array --replay SIZE KEY=V...`: the model on its
own clock, fed the trace's requests at their issue times, no FUSE) writes each
decision; the simulator gets the same Events. Units of 1 MiB over 6 disks of 64 KiB
chunks (4 stripes a unit), so that a 5 s trace has a few hundred units and reads
that span chunks and units.

Asserted, all exact (nothing here depends on the machine's speed):
- the tier: the policy's placement of every (request, unit) access, reads and writes,
  and every migration's time and units promoted and demoted, with the array's own
  figures (the copies take their modelled time: the policy's decisions do not wait
  for them);
- the read cache: the same look-ups (one per read and unit, in order), and, with the
  copies made instant, the same hit at every look-up and the same evictions. With
  the model's own copy times a unit read again before its fill is done is a miss in
  the array where the simulator (admitting at once) has a hit: that difference is
  timing, stated in docs/hybrid.md, and counted here, not hidden.
"""

from __future__ import annotations

import subprocess
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from conftest import need

from analyzer.lab.array import SERVER, ArrayModel
from analyzer.tiering import native
from analyzer.tiering.events import Events, load_trace
from analyzer.tiering.fillqueue import FillQueueLRU
from analyzer.tiering.params import Params
from analyzer.tiering.policies import prepare

TRACE = Path(__file__).resolve().parents[2] / "traces" / "workload" / "reference-20mbx-5s.iot"
UNIT = 1 << 20
GEOMETRY = {"disks": 6, "chunk_kb": 64, "tier_unit_kb": UNIT >> 10}
# Every disk and SSD time near 0: a fill is done before the next recorded request.
INSTANT = {
    "rpm": 1e9, "settle_read_ms": 0, "avg_read_ms": 0, "settle_write_ms": 0, "avg_write_ms": 0,
    "mb_s": 1e9, "ssd_read_ms": 0, "ssd_write_ms": 0, "ssd_mb_s": 1e9,
}  # fmt: skip


@pytest.fixture(scope="module")
def events() -> Events:
    ev = load_trace(str(TRACE))
    assert len(ev) == 1111 and len(np.unique(ev.dev)) == 1
    return ev


def _array(ev: Events, **changes: float) -> list[list[str]]:
    """The array's decision lines (arraybase.c's `decisions`) for the trace's requests,
    times from its first request (the simulator's windows start there too)."""
    need(SERVER.exists(), "the array server built (make native)")
    model = ArrayModel.load(changes={**GEOMETRY, **changes})
    size = -(-int((ev.offset + ev.nbytes).max()) // UNIT) * UNIT
    t = ev.t_ns - ev.t_ns[0]
    feed = "".join(
        f"{a} {b} {c} {d}\n"
        for a, b, c, d in zip(t.tolist(), ev.op.tolist(), ev.offset.tolist(), ev.nbytes.tolist(),
                              strict=True)
    )  # fmt: skip
    argv = [str(SERVER), "--replay", str(size), *(f"{k}={v}" for k, v in asdict(model).items())]
    out = subprocess.run(argv, input=feed, capture_output=True, text=True, check=True).stdout
    return [line.split() for line in out.splitlines() if line[:2] in ("a ", "m ", "c ", "f ")]


def _units(ev: Events, keep: np.ndarray) -> list[int]:
    """The absolute unit of every (request, unit) access of the kept requests, in order."""
    out: list[int] = []
    for off, n in zip(ev.offset[keep].tolist(), ev.nbytes[keep].tolist(), strict=True):
        out.extend(range(off // UNIT, (off + n - 1) // UNIT + 1))
    return out


@pytest.mark.parametrize(("k", "stats_s", "migrate_s", "half_life_s"),
                         [(16, 0.5, 1.0, 60.0), (24, 0.25, 0.5, 1.0)])  # fmt: skip
def test_the_arrays_tier_decides_as_the_simulator_on_a_recorded_trace(
    events: Events, k: int, stats_s: float, migrate_s: float, half_life_s: float
) -> None:
    lines = _array(
        events, tier_mb=k * UNIT >> 20, tier_stats_s=stats_s, tier_migrate_s=migrate_s,
        tier_half_life_s=half_life_s,
    )  # fmt: skip
    p = Params(unit=UNIT, capacity=k * UNIT, stats_interval_s=stats_s,
               migrate_interval_s=migrate_s, half_life_s=half_life_s)  # fmt: skip
    run = prepare(events, p)
    sim = run.hits(k)
    acc = [(int(u), f == "1") for _, u, f in (x for x in lines if x[0] == "a")]
    assert [u for u, _ in acc] == _units(events, np.ones(len(events), dtype=bool))
    placed = np.array([f for _, f in acc])
    assert np.array_equal(placed, sim.hit), f"first at {np.flatnonzero(placed != sim.hit)[:1]}"
    t0 = int(events.t_ns[0])
    want = [(round((m.t_ns - t0) / 1e6), m.promoted, m.demoted) for m in sim.moves]
    got = [(round(float(t) * 1e3), int(n_p), int(n_d)) for _, t, n_p, n_d in
           (x for x in lines if x[0] == "m")]  # fmt: skip
    # The simulator stops at the last request's migration; the array's clock runs on.
    assert got[: len(want)] == want
    assert sum(m.promoted for m in sim.moves) > k and any(m.demoted for m in sim.moves)
    assert 0 < placed.sum() < len(placed)  # both placements are exercised


def _simulated_cache(ev: Events, k: int) -> tuple[np.ndarray, int]:
    p = Params(policy="lru", unit=UNIT, capacity=k * UNIT, count_writes=False)
    run = prepare(ev, p)
    flags = run.hits(k).flags[run.counted]
    return (flags & native.HIT) > 0, int(((flags & native.EVICTED) > 0).sum())


@pytest.mark.parametrize("k", [4, 8, 32])
def test_the_arrays_read_cache_decides_as_the_simulator_on_a_recorded_trace(
    events: Events, k: int
) -> None:
    sim_hit, sim_evicted = _simulated_cache(events, k)
    reads = events.op == 0
    lines = _array(events, cache_ssd_mb=k * UNIT >> 20, **INSTANT)
    looks = [x for x in lines if x[0] == "c"]
    assert [int(x[1]) for x in looks] == _units(events, reads)
    hit = np.array([x[2] == "1" for x in looks])
    assert np.array_equal(hit, sim_hit), f"first at {np.flatnonzero(hit != sim_hit)[:1]}"
    assert [x[3] for x in looks] == [x[2] for x in looks]  # instant copies: a hit is served
    fills = [(int(u), int(v)) for _, u, v in (x for x in lines if x[0] == "f")]
    assert sum(v >= 0 for _, v in fills) == sim_evicted
    assert 0 < hit.sum() < len(hit) and (sim_evicted > 0 or k >= len(set(_units(events, reads))))


def test_the_read_caches_copy_time_only_delays_hits(events: Events) -> None:
    """With the model's own disk and SSD times the look-ups are the same (one per read
    and unit), and on this trace the array serves fewer hits than the simulator's
    instant admission gives (106 against 138): reads that came during their unit's
    fill. Deterministic: the model runs on its own clock."""
    k = 8
    sim_hit, _ = _simulated_cache(events, k)
    looks = [x for x in _array(events, cache_ssd_mb=k * UNIT >> 20) if x[0] == "c"]
    assert [int(x[1]) for x in looks] == _units(events, events.op == 0)
    served = np.array([x[3] == "1" for x in looks])
    assert served.sum() > 0 and served.sum() < sim_hit.sum()


def _lagged(ev: Events, k: int, fill_s: float) -> tuple[np.ndarray, list[int], int]:
    """The simulator's array read cache (analyzer.tiering.fillqueue) on the trace's
    reads at their times from its first request: the hit at each look-up, the units
    filled in order, and the evictions."""
    cache = FillQueueLRU(k, fill_s)
    order: list[int] = []
    hits: list[bool] = []
    reads = ev.op == 0
    t = (ev.t_ns - ev.t_ns[0]) / 1e9
    for at, off, n in zip(t[reads].tolist(), ev.offset[reads].tolist(), ev.nbytes[reads].tolist(),
                          strict=True):  # fmt: skip
        for u in range(off // UNIT, (off + n - 1) // UNIT + 1):
            before = cache.queued | ({cache.moving} if cache.moving >= 0 else set())
            hits.append(cache.read(u, at))
            if u not in before and not hits[-1]:
                order.append(u)
    cache.advance(float("inf"))  # the array's mover drains its queue after the last request
    assert cache.fills == len(order)
    return np.array(hits), order, cache.evictions


@pytest.mark.parametrize("k", [4, 8, 32])
def test_the_fill_queue_cache_with_instant_fills_is_the_simulators_lru(
    events: Events, k: int
) -> None:
    sim_hit, sim_evicted = _simulated_cache(events, k)
    hit, _, evicted = _lagged(events, k, 0.0)
    assert np.array_equal(hit, sim_hit) and evicted == sim_evicted


# Disks near 0 and every SSD write FILL_MS: each fill takes exactly FILL_MS (its chunk
# reads instant, one SSD write; no other SSD request waits with ssd_parallel this high).
FILL_MS = 20.0
TIMED = {**INSTANT, "ssd_write_ms": FILL_MS, "ssd_parallel": 1024}


@pytest.mark.parametrize("k", [4, 8, 32])
def test_the_arrays_read_cache_with_timed_fills_decides_as_the_fill_queue_cache(
    events: Events, k: int
) -> None:
    """The copy's time as the array's mover spends it, one fill at a time: the same
    hit at every look-up, the same units filled in the same order, the same
    evictions; and fewer hits than instant admission (the lag is exercised)."""
    lines = _array(events, cache_ssd_mb=k * UNIT >> 20, **TIMED)
    looks = [x for x in lines if x[0] == "c"]
    served = np.array([x[3] == "1" for x in looks])
    hit, filled, evicted = _lagged(events, k, FILL_MS / 1e3)
    assert np.array_equal(served, hit), f"first at {np.flatnonzero(served != hit)[:1]}"
    fills = [(int(u), int(v)) for _, u, v in (x for x in lines if x[0] == "f")]
    assert [u for u, _ in fills] == filled
    assert sum(v >= 0 for _, v in fills) == evicted
    assert hit.sum() < _simulated_cache(events, k)[0].sum()
