"""The tiering simulator (issue 7): answers known by construction, bounds, the one-pass
sweep against single runs, and projected latency as a mixture."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.tiering import native as N
from analyzer.tiering.events import Events, events_from_columns
from analyzer.tiering.params import Params, TieringError, parse_size
from analyzer.tiering.policies import prepare
from analyzer.tiering.presets import PRESETS, params_for
from analyzer.tiering.simulate import simulate
from analyzer.tiering.sweep import sweep
from base.errors import IotapeError

UNIT = 1 << 20
SEC = 10**9


def events(
    units: np.ndarray,
    t_ns: np.ndarray | None = None,
    op: np.ndarray | None = None,
    nbytes: int | np.ndarray = 4096,
    lat_ns: np.ndarray | int = 100_000,
) -> Events:
    """One 4 KiB request per entry of `units` (a 1 MiB unit index), 1 ms apart."""
    n = len(units)
    t = np.arange(1, n + 1, dtype=np.int64) * 1_000_000 if t_ns is None else t_ns
    off = np.asarray(units, dtype=np.int64) * UNIT
    return events_from_columns(
        t,
        t + lat_ns,
        np.full(n, 8 << 20),
        off,
        np.broadcast_to(nbytes, n),
        np.zeros(n, dtype=np.int8) if op is None else op,
    )


def params(policy: str, units: int, **kw) -> Params:
    kw.setdefault("stats_interval_s", 1.0)
    kw.setdefault("migrate_interval_s", 1.0)
    return params_for(policy, None, unit=UNIT, capacity=units * UNIT, **kw)


def hit_ratio(ev: Events, p: Params) -> float:
    return simulate(ev, p)["hit_ratio"]["count"]["all"]


# ------------------------------------------------------------------ known answers


def test_a_sequential_scan_defeats_lru() -> None:
    # Ten passes over 1000 units, a tier of 100: LRU evicts each unit just before it
    # comes back.
    ev = events(np.tile(np.arange(1000), 10))
    assert hit_ratio(ev, params("lru", 100)) == 0.0
    # The bound keeps about a tier's worth per pass.
    assert hit_ratio(ev, params("belady", 100)) > 0.08
    # One pass and no reuse: nothing to gain for any policy that must see a unit first.
    once = events(np.arange(5000))
    for policy in ("lru", "s3fifo", "belady", "tiering"):
        assert hit_ratio(once, params(policy, 100)) == 0.0, policy


def test_a_scan_through_a_hot_set_is_resisted_by_s3fifo_not_lru() -> None:
    # Every other request reads one of 50 hot units, the rest scan 10,000 units once.
    rng = np.random.default_rng(7)
    units = np.empty(20_000, dtype=np.int64)
    units[0::2] = rng.integers(0, 50, 10_000)
    units[1::2] = 1000 + np.arange(10_000)
    ev = events(units)
    lru, s3 = hit_ratio(ev, params("lru", 60)), hit_ratio(ev, params("s3fifo", 60))
    assert lru < 0.25 and s3 > 0.45 and s3 <= hit_ratio(ev, params("belady", 60))


def test_a_static_hot_set_fits_a_tier_of_exactly_its_size() -> None:
    rng = np.random.default_rng(3)
    hot = 64
    ev = events(rng.integers(0, hot, 20_000))
    for policy in ("lru", "s3fifo", "belady"):
        r = simulate(ev, params(policy, hot))
        # Only the first access to each unit misses.
        assert r["hit_ratio"]["hit_requests"] == 20_000 - hot, policy
    # One unit short, LRU misses often.
    assert hit_ratio(ev, params("lru", hot - 1)) < 0.99
    # Tiering: everything misses until the first migration (1 s: 1000 requests), then
    # every request hits.
    r = simulate(ev, params("tiering", hot, half_life_s=10.0))
    assert r["hit_ratio"]["hit_requests"] == 20_000 - 1000
    assert sum(r["timeline"]["promotions"]) == hot and sum(r["timeline"]["demotions"]) == 0
    assert hit_ratio(ev, params("oracle", hot)) == 1.0
    # A half-life far shorter than the statistics interval (the heat forgets each
    # interval; 0.5 ** (1 / 1e-9) underflows) still tiers, like one interval's history.
    short = simulate(ev, params("tiering", hot, half_life_s=1e-9))
    one = simulate(ev, params("tiering", hot, half_life_s=None, history_s=1.0))
    assert short["hit_ratio"] == one["hit_ratio"]


def test_writes_bypass_a_read_cache_but_hit_a_tier() -> None:
    ev = events(np.zeros(100, dtype=np.int64), op=np.tile([0, 1], 50))
    lru = simulate(ev, params("lru", 1))["hit_ratio"]["count"]
    assert lru["write"] == 0.0 and lru["read"] == pytest.approx(49 / 50)
    ora = simulate(ev, params("oracle", 1))["hit_ratio"]["count"]
    assert ora["write"] == 1.0 and ora["read"] == 1.0


def test_easy_tier_counts_only_small_ios() -> None:
    # Unit 0 gets many large reads, unit 1 a few small ones: Easy Tier promotes unit 1.
    units = np.array([0] * 50 + [1] * 5)
    nb = np.array([256 * 1024] * 50 + [8192] * 5)
    order = np.random.default_rng(0).permutation(55)
    ev = events(units[order], nbytes=nb[order])
    p = params_for("tiering", "easytier", unit=UNIT, capacity=UNIT, migrate_interval_s=0.01,
                     stats_interval_s=0.01, history_s=1.0)  # fmt: skip
    r = prepare(ev, p)
    hit, _, _ = r.hits(1)
    unit_of = ev.offset[r.acc.req] // UNIT
    assert not hit[unit_of == 0].any() and hit[unit_of == 1][-1]


def test_a_request_spanning_units_hits_only_when_all_its_units_are_fast() -> None:
    # 2 MiB requests at offset 0.5 MiB touch units 0, 1 and 2.
    n = 50
    t = np.arange(1, n + 1, dtype=np.int64) * SEC // 100
    ev = events_from_columns(t, t + 1, np.full(n, 1), np.full(n, UNIT // 2),
                               np.full(n, 2 * UNIT), np.zeros(n, dtype=np.int8))  # fmt: skip
    r = simulate(ev, params("lru", 2))
    assert r["hit_ratio"]["count"]["all"] == 0.0  # three units never fit in two
    r = simulate(ev, params("lru", 3))
    assert r["hit_ratio"]["hit_requests"] == n - 1
    assert r["hit_ratio"]["bytes_total"] == n * 2 * UNIT


# ------------------------------------------------------------------ bounds (property)

traces = st.lists(st.integers(0, 30), min_size=1, max_size=400)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces, st.integers(0, 35), st.integers(0, 2**31 - 1))
def test_no_policy_beats_its_oracle(units: list[int], cap: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = len(units)
    t = np.cumsum(rng.integers(1, 400_000_000, n))
    ev = events(np.array(units), t_ns=t, op=rng.integers(0, 2, n).astype(np.int8))
    # The oracle holds each migration window's most used units: no tiering of the same
    # windows, whatever its heat model, budget or headroom, serves more.
    best = simulate(ev, params("oracle", cap))["hit_ratio"]["hit_requests"]
    for kw in ({}, {"half_life_s": 0.5}, {"budget_bytes": 2 * UNIT}, {"headroom": 0.3},
               {"history_s": 3.0, "half_life_s": None}, {"count_writes": False}):  # fmt: skip
        got = simulate(ev, params("tiering", cap, **kw))["hit_ratio"]["hit_requests"]
        assert got <= best, kw
    # Belady's MIN bounds every cache that admits only on a miss.
    bound = simulate(ev, params("belady", cap))["hit_ratio"]["hit_requests"]
    for policy in ("lru", "s3fifo"):
        got = simulate(ev, params(policy, cap))["hit_ratio"]["hit_requests"]
        assert got <= bound, policy


# ------------------------------------------------------------------ one-pass sweep


@pytest.mark.parametrize(
    "policy,kw",
    [("lru", {}), ("oracle", {}), ("tiering", {}), ("tiering", {"headroom": 0.25}),
     ("tiering", {"history_s": 4.0, "half_life_s": None}), ("s3fifo", {})],
)  # fmt: skip
def test_sweep_equals_single_runs_exactly(policy: str, kw: dict) -> None:
    rng = np.random.default_rng(11)
    n = 30_000
    units = (rng.zipf(1.2, n) % 500).astype(np.int64)
    t = np.sort(rng.integers(0, 60 * SEC, n))
    # Some requests cross a unit boundary, so request and byte hits differ.
    nb = rng.choice([4096, 65536, 3 * UNIT // 2], n, p=[0.6, 0.3, 0.1])
    ev = events_from_columns(t, t + 1, np.full(n, 1), units * UNIT + UNIT // 2, nb,
                               rng.integers(0, 2, n).astype(np.int8))  # fmt: skip
    p = params(policy, 8, **kw)
    caps = [c * UNIT for c in (0, 1, 3, 16, 50, 100, 333, 600)]
    r = prepare(ev, p)
    swept = sweep(r, caps)
    assert swept["one_pass"] == (policy != "s3fifo")
    for row, cap in zip(swept["points"], caps, strict=True):
        single = simulate(ev, Params(**{**p.__dict__, "capacity": cap}))["hit_ratio"]
        assert row["hit_ratio_count"] == single["count"]["all"], cap
        assert row["hit_ratio_bytes"] == single["bytes"]["all"], cap
    ratios = [row["hit_ratio_count"] for row in swept["points"]]
    if policy in ("lru", "oracle"):  # stack algorithms: more capacity never hurts
        assert ratios == sorted(ratios) and ratios[-1] > ratios[1] > 0


# ------------------------------------------------------------------ the C and the references


@given(traces, st.integers(0, 35))
@settings(max_examples=150, deadline=None)
def test_the_c_simulators_match_the_python_references(units: list[int], cap: int) -> None:
    if not N.native():
        pytest.fail("IOTAPE_TIERING_PURE is set: the C simulators are not in use")
    ids = np.array(units, dtype=np.int32)
    assert (N.lru(ids, 31, cap) == N.lru_reference(ids, cap)).all()
    assert (N.s3fifo(ids, 31, cap) == N.s3fifo_reference(ids, cap)).all()
    assert (N.belady(ids, 31, cap) == N.belady_reference(ids, N.next_use(ids), cap)).all()
    ref = N.stack_distances_reference(ids)
    ref[ref < 0] = N.NEVER
    assert (N.stack_distances(ids, 31) == ref).all()


def test_a_missing_c_library_says_to_build_it(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("IOTAPE_TIERING_PURE", raising=False)
    monkeypatch.setattr(N, "LIBRARY", tmp_path / "libtiering.so")
    N._lib.cache_clear()
    try:
        with pytest.raises(IotapeError, match="run `make native`") as e:
            N.lru(np.zeros(3, dtype=np.int32), 1, 1)
        assert "\n" not in str(e.value)
    finally:
        monkeypatch.undo()
        N._lib.cache_clear()
    assert N.native()


@given(st.integers(1, 400), st.integers(1, 10**6), st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_the_c_tallies_match_numpy(n: int, step: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(5, 10**7, n))
    intervals = int((t[-1] - t[0]) // step) + 1
    op = rng.integers(0, 2, n).astype(np.int8)
    flags = rng.integers(0, 8, n).astype(np.uint8)
    args = (t, int(t[0]), step, op, rng.random(n) < 0.5, flags, rng.integers(0, 1 << 20, n),
            intervals)  # fmt: skip
    c, b = N.tally(*args)
    rc, rb = N.tally_reference(*args)
    assert c.shape == (intervals, 2, 2, 4) and (c == rc).all() and (b == rb).all()
    assert c.sum() == n
    uid = rng.integers(0, 50, n).astype(np.int32)
    c, b = N.unit_tally(uid, args[6], 50)
    assert (c == np.bincount(uid, minlength=50)).all()
    assert (b == np.bincount(uid, weights=args[6], minlength=50)).all()


# ------------------------------------------------------------------ projected latency


def device(lat: np.ndarray, op: int = 0, nbytes: int = 4096) -> Events:
    n = len(lat)
    return events(np.arange(n), op=np.full(n, op, dtype=np.int8), nbytes=nbytes, lat_ns=lat)


def test_projected_latency_is_the_mixture_of_the_two_devices() -> None:
    rng = np.random.default_rng(5)
    fast = device(rng.lognormal(np.log(100_000), 0.3, 5000).astype(np.int64))
    slow = device(rng.lognormal(np.log(8_000_000), 0.5, 5000).astype(np.int64))
    hot = events(rng.integers(0, 10, 3000))
    # Every unit fits: after the first touches, every request is on the fast device.
    r = simulate(hot, params("oracle", 10), fast=fast, slow=slow)["latency"]
    assert r["projected"] == r["fast_only"]
    assert r["fast_only"]["mean_ns"] == pytest.approx(fast.lat_ns.mean())
    assert r["fast_only"]["p50_ns"] == float(np.sort(fast.lat_ns)[2499])
    # No fast tier: the slow device's own distribution.
    r = simulate(hot, params("oracle", 0), fast=fast, slow=slow)["latency"]
    assert r["projected"] == r["slow_only"]
    assert r["slow_only"]["p99_ns"] == float(np.sort(slow.lat_ns)[4949])
    # Half the units fast: the mean is the hit-weighted mean of the two means, and the
    # median lies between the pure devices'.
    res = simulate(hot, params("oracle", 5), fast=fast, slow=slow)
    h = res["hit_ratio"]["count"]["all"]
    lat = res["latency"]
    want = h * fast.lat_ns.mean() + (1 - h) * slow.lat_ns.mean()
    assert lat["projected"]["mean_ns"] == pytest.approx(want)
    assert lat["fast_only"]["p50_ns"] <= lat["projected"]["p50_ns"] <= lat["slow_only"]["p50_ns"]


def test_latency_uses_the_class_of_each_request() -> None:
    # The slow device is slow only for writes: a read-only trace projects the same
    # with or without a fast tier.
    cols = ([1, 2, 3, 4], [101, 102, 10_003, 10_004], [1] * 4, [0] * 4, [4096] * 4, [0, 0, 1, 1])
    slow = events_from_columns(*(np.array(x) for x in cols))
    fast = device(np.array([50, 50]))
    ev = events(np.zeros(10, dtype=np.int64))
    lat = simulate(ev, params("lru", 0), fast=fast, slow=slow)["latency"]
    assert lat["slow_only"]["mean_ns"] == 100.0 and lat["fast_only"]["mean_ns"] == 50.0


# ------------------------------------------------------------------ parameters


def test_presets_name_their_source_and_bad_parameters_are_refused() -> None:
    for name, preset in PRESETS.items():
        assert len(preset.source) > 40, name
        p = params_for("tiering", name)
        assert p.unit == preset.unit and p.preset == name
    assert params_for("tiering", "easytier").max_io_bytes == 64 * 1024
    assert params_for("lru").count_writes is False
    assert parse_size("4M") == parse_size("4MiB") == 4 << 20
    assert parse_size("1.5g") == 3 << 29
    for bad in ("x", "4Q", "-1"):
        with pytest.raises(TieringError, match="size"):
            parse_size(bad)
    with pytest.raises(TieringError, match="power of two"):
        params_for("lru", unit=3000)
    with pytest.raises(TieringError, match="policy"):
        params_for("arc")
    with pytest.raises(TieringError, match="shorter"):
        params_for("tiering", migrate_interval_s=1.0, stats_interval_s=5.0)


def test_skew_finds_the_capacity_that_serves_the_io() -> None:
    # 80 % of requests go to 2 of 10 units.
    units = np.array([0] * 40 + [1] * 40 + list(range(2, 10)) * 2 + [2] * 4)
    sk = simulate(events(units), params("lru", 1))["skew"]
    assert sk["units"] == 10 and sk["footprint_bytes"] == 10 * UNIT
    assert sk["capacity_for_80pct_io"] == 2 * UNIT
    assert sk["capacity_for_100pct_io"] == 10 * UNIT
    assert sk["curve"][-1]["io_share"] == 1.0
