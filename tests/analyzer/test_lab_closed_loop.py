"""The read cache's closed-loop prediction (analyzer/lab/closedloop.py) on
constructed loops: where the closed loop and the baseline's order part, the mover's
lag, background reads, a cache per controller, the queue's fixed point, and the
array's hit latency and copy cost from the baseline's counters."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from analyzer.lab import closedloop, hybrid, predict, slowqueue
from analyzer.tiering.events import Events

MIB = 1 << 20
HIT_S, MISS_S = 0.0001, 0.010


def _events(units: list[int], gap_ms: float = 1.0, lat_ms: float = 10.0) -> Events:
    n = len(units)
    return Events(
        t_ns=(np.arange(n) * gap_ms * 1e6).astype(np.int64),
        dev=np.zeros(n, dtype=np.int64),
        offset=np.array(units, dtype=np.int64) * MIB,
        nbytes=np.full(n, 32768, dtype=np.int64),
        op=np.zeros(n, dtype=np.int8),
        lat_ns=np.full(n, int(lat_ms * 1e6), dtype=np.int64),
    )


def _loops(units: list[int], loop: list[int], span_s: float, **kw: object) -> closedloop.Loops:
    ev = _events(units)
    n = max(loop) + 1
    lp = closedloop.Loops(
        loop=np.array(loop, dtype=np.int64),
        starts=np.arange(len(units)),
        uid=np.array(units, dtype=np.int64),
        hit_s=np.full(len(units), HIT_S),
        miss_s=np.full(len(units), MISS_S),
        threads=1,
        other_s=np.zeros(n),
        span_s=span_s,
        t_s=(ev.t_ns - ev.t_ns[0]) / 1e9,
        cache=np.zeros(len(units), dtype=np.int64),
    )
    return replace(lp, **kw)  # type: ignore[arg-type]


def test_recency_follows_the_faster_loop() -> None:
    # Two databases of one thread, each reading its own 3 units in turn, one after
    # the other in the baseline: A0 B3 A1 B4 A2 B5 ... An LRU of 3 units on that
    # order never hits (each unit comes back after 5 others). In the closed loop B's
    # thread spends 30 ms a read elsewhere: A reads its three units before B's
    # second read, hits from then on at the hit's latency, keeps them the most
    # recent, and B's fills evict B's own units.
    units = [(i // 2) % 3 + 3 * (i % 2) for i in range(600)]
    loop = [i % 2 for i in range(600)]
    hits, _ = _lru_on_order(units, 3)
    assert hits == 0
    lp = _loops(units, loop, span_s=3.0, other_s=np.array([0.0, 0.030]))
    ref = closedloop.run(lp, 0, 0.0)["reads"]
    got = closedloop.run(lp, 3, 0.0)
    gains = got["reads"] / ref
    assert got["hits"].sum() / got["reads"].sum() > 0.95
    assert max(gains) > 20 and min(gains) == pytest.approx(1.0, abs=0.05)


def _lru_on_order(units: list[int], k: int) -> tuple[int, int]:
    from analyzer.tiering.fillqueue import FillQueueLRU

    c = FillQueueLRU(k, 0.0)
    return sum(c.read(u, i * 1e-3) for i, u in enumerate(units)), c.fills


def test_a_fill_is_a_hit_only_when_the_mover_is_done() -> None:
    # One database over 2 units and a cache of 2: with instant fills every read but
    # the first two hits; with fills longer than the run none does.
    units = [i % 2 for i in range(100)]
    lp = _loops(units, [0] * 100, span_s=1.0)
    instant = closedloop.run(lp, 2, 0.0)
    assert instant["fills"] == 2 and instant["hits"][0] == instant["reads"][0] - 2
    slow = closedloop.run(lp, 2, 10.0)
    assert slow["hits"][0] == 0 and slow["fills"] == 0
    # A fill of 50 ms: the misses until the first one is done, then the second's.
    lagged = closedloop.run(lp, 2, 0.05)
    assert 0 < lagged["hits"][0] < instant["hits"][0]
    assert lagged["fills"] == 2


def test_background_reads_are_looked_up_and_not_counted() -> None:
    # The session reads unit 0 over and over; a background reader reads units 1, 2,
    # 3 at its own times (one every 1 ms). With a cache of 1 unit each background
    # read evicts the session's unit: the session's gain falls, and the background
    # reads are in no loop's count.
    units = [0 if i % 2 == 0 else 1 + (i // 2) % 3 for i in range(400)]
    loop = [0 if i % 2 == 0 else -1 for i in range(400)]
    lp = _loops(units, loop, span_s=0.4)
    alone = _loops([0] * 200, [0] * 200, span_s=0.4)
    ref = closedloop.run(lp, 0, 0.0)["reads"][0]
    assert ref == closedloop.run(alone, 0, 0.0)["reads"][0] >= 39  # 0.4 s of 10 ms misses
    with_bg = closedloop.run(lp, 1, 0.0)
    without = closedloop.run(alone, 1, 0.0)
    assert with_bg["reads"][0] < without["reads"][0]
    assert with_bg["lookups"] > with_bg["reads"][0]  # the background's look-ups


def test_each_controller_has_its_own_cache() -> None:
    # Two databases, one per controller, each reading one unit; a cache of 1 unit per
    # controller holds both. One cache of 1 unit for both would thrash.
    units = [i % 2 for i in range(400)]
    loop = [i % 2 for i in range(400)]
    lp = _loops(units, loop, span_s=0.4, cache=np.array(loop, dtype=np.int64))
    got = closedloop.run(lp, 1, 0.0)
    assert (got["hits"] >= got["reads"] - 1).all() and got["fills"] == 2
    one = closedloop.run(replace(lp, cache=np.zeros(400, dtype=np.int64)), 1, 0.0)
    assert one["hits"].sum() < got["hits"].sum()


def test_the_simulated_hits_are_each_controllers_own() -> None:
    # The tier's (and the law's) hits by the simulator, per controller: A's database
    # cycles 3 units, B's reads 1. One pool of 4 units holds all four; each
    # controller's own 2 cannot hold A's 3 (LRU on a cycle longer than the cache
    # never hits), as the array's two servers would not.
    units = [(i // 2) % 3 if i % 2 == 0 else 3 for i in range(600)]
    ctl = np.array([i % 2 for i in range(600)], dtype=np.int64)
    ev = _events(units)
    p = predict.params("cache", 4, 1024, 5, 5)
    pooled = predict._reads_hit(ev, p)
    own = predict._reads_hit(ev, p, ctl)
    assert pooled[ctl == 0][10:].all() and own[ctl == 0].sum() == 0
    assert own[ctl == 1][1:].all()


def test_the_gain_is_at_the_queues_fixed_point() -> None:
    # Six databases reading 4 units each at random, a cache of 12 units, fills of 4
    # MiB on 2 disks that the baseline keeps 30 % busy: the closed loop's fills and
    # faster reads load the disks, and the slowdown returned is where the load gives
    # that slowdown.
    rng = np.random.default_rng(1)
    units = [(i % 6) * 4 + int(rng.integers(4)) for i in range(6000)]
    loop = [i % 6 for i in range(6000)]
    lp = _loops(units, loop, span_s=10.0, other_s=np.full(6, 0.0002))
    dev = slowqueue.DeviceTime(
        busy_s=6.0, span_s=10.0, reads=6000, read_service_s=0.005, writes=0,
        write_service_s=0.0, mb_s=150.0, servers=2,
    )  # fmt: skip
    q = slowqueue.slow_queue(dev, predict.params("cache", 48, 4096, 5, 5), 0)
    assert q is not None and q.rho0 == pytest.approx(0.3)
    mover = closedloop.Mover(4 * MIB / 150e6, 0.0)
    got = closedloop.gain(lp, 12, 600.0, q, mover)
    free = closedloop.gain(lp, 12, 600.0, None, mover)
    assert got["slowdown"] > 1.0 and got["gain"] > 2.0
    assert free["slowdown"] == 1.0 and free["fill_s"] == 0.0 and free["rounds"] == 1
    assert got["fill_s"] == pytest.approx(
        mover.fill_s(got["slowdown"] * slowqueue.baseline_miss_s(q))
    )
    # At the returned slowdown the load's own slowdown is no higher (the bisection
    # keeps the upper end of its bracket).
    hit = got["hits"] / got["reads"]
    rate = 600.0 * np.ones(6) / 6
    rho, res = slowqueue.load(q, rate, rate * got["gains"], hit, np.zeros(6), got["fills"] / 10.0)
    assert slowqueue.miss_factor(q, rho, res) <= got["slowdown"] + 1e-9
    assert got["utilization"] == pytest.approx(rho)


def test_a_fill_waits_for_the_slowest_of_its_chunk_reads() -> None:
    # arraytier.c issues a unit's chunk reads at once, one per data disk, and writes
    # the SSDs when the last is done: the fill's read phase is the longest of n
    # draws of a disk's response, E[max] / E[one] the fork-join factor.
    assert closedloop.fork_join(np.full(100, 0.01), 8) == pytest.approx(1.0)  # no spread
    two = np.array([0.0, 0.02])  # mean 10 ms; the longest of 2 is 20 ms 3/4 of the time
    assert closedloop.fork_join(two, 2) == pytest.approx(1.5)
    assert closedloop.fork_join(two, 1) == 1.0 and closedloop.fork_join(np.zeros(0), 8) == 1.0
    u = np.random.default_rng(2).uniform(0, 1, 200_000)  # E[max of 8 uniform] = 8/9
    assert closedloop.fork_join(u, 8) == pytest.approx((8 / 9) / 0.5, rel=0.01)
    m = closedloop.Mover(0.0035, 0.0085, fork=2.0)
    assert m.fill_s(0.010) == pytest.approx(0.0035 + 0.020 + 0.0085)


def test_the_arrays_hit_and_copy_from_the_baselines_counters() -> None:
    ev = replace(_events([0, 1, 2, 3]), op=np.array([0, 1, 1, 0], dtype=np.int8))
    ev.lat_ns[1:3] = [400_000, 600_000]  # the two writes: 0.5 ms on average
    counters = {"writes": 10, "write_latency_s_sum": 0.0035}  # the model's 0.35 ms
    model = {"ssd_read_ms": 0.1, "ssd_write_ms": 0.2, "ssd_mb_s": 500}
    hit = closedloop.array_hit(ev, counters, model)
    assert hit is not None and hit.path_s == pytest.approx(0.00015)
    assert hit.latency(ev)[0] == pytest.approx(0.0001 + 32768 / 500e6 + 0.00015)
    assert closedloop.array_hit(ev, None, model) is None
    dev = slowqueue.DeviceTime(
        busy_s=1.0, span_s=10.0, reads=100, read_service_s=0.010, writes=0,
        write_service_s=0.0, mb_s=150.0, servers=10,
    )  # fmt: skip
    array = {"disk_reads": 600, "disk_writes": 400, "disk_seek_s": 4.0, "disk_rotation_s": 2.0}
    striped = slowqueue.striped(dev, 4 * MIB, 512 << 10, array)
    assert striped.copy_reads == 8 and striped.position_s == pytest.approx(0.006)
    p = predict.params("cache", 48, 4096, 5, 5)
    q0, q = slowqueue.slow_queue(dev, p, 0), slowqueue.slow_queue(striped, p, 0)
    assert q0 is not None and q is not None
    assert q0.copy_s == pytest.approx(4 * MIB / 150e6 + 0.010)  # one read's service
    assert q.copy_s == pytest.approx(4 * MIB / 150e6 + 8 * 0.006)  # each chunk positioned


def test_the_cache_site_of_the_arrays_own_cache() -> None:
    # Two controllers' devices laid end to end (hybrid.one_space): a database region
    # on each, a log beyond. The array's cache: each request's controller and its
    # offset on the array; the engine's cache (--tier-in engine): neither.
    ev = replace(
        _events([0, 1, 9, 0, 1]),
        offset=np.array([0, MIB, 9 * MIB, hybrid.SPACE, hybrid.SPACE + 5], dtype=np.int64),
        op=np.array([0, 0, 1, 0, 0], dtype=np.int8),  # a log write: the host's path
    )
    regs = [(0, 4 * MIB), (hybrid.SPACE, hybrid.SPACE + 4 * MIB)]
    session = np.array([True, False, True, True])
    counters = {"writes": 1, "write_latency_s_sum": 0.0}
    model = {"ssd_read_ms": 0.1, "ssd_write_ms": 0.1, "ssd_mb_s": 500}
    engine = hybrid.cache_site("engine", ev, session, regs, counters, model)
    assert engine.hit is None and engine.controller is None and engine.session is session
    site = hybrid.cache_site("array", ev, session, regs, counters, model)
    assert site.controller is not None and site.array_offset is not None
    assert site.controller.tolist() == [0, 0, 1, 1]
    assert site.array_offset.tolist() == [0, MIB, hybrid.SPACE, hybrid.SPACE + 5]
    assert site.hit is not None and site.hit.path_s == pytest.approx(0.010)
