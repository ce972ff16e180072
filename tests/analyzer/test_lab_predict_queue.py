"""The prediction's slow-device queue (analyzer/lab/predict.py, issue 38): the
misses of a configuration wait behind the load it puts on the slow device (the
misses' reads, a cache's fills, a tier's migrations), M/G/c by Allen-Cunneen,
against closed forms and constructed loads; a load that stays the baseline's
leaves the old law."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from analyzer.lab import predict, slowqueue
from analyzer.tiering.events import Events


def test_waiting_is_m_m_c_for_exponential_service() -> None:
    s = 0.010  # exponential: E[S^2] / (2 E[S]) = S
    # M/M/1: W = rho / (1 - rho) x S.
    assert slowqueue.waiting(0.6, 1, s) == pytest.approx(0.6 / 0.4 * s)
    # M/M/2 at rho 0.5 (a = 1 Erlang): C = 1/3, W = C / (2 x 0.5) x S.
    assert slowqueue.erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert slowqueue.waiting(0.5, 2, s) == pytest.approx(s / 3)
    # M/D/1 (Pollaczek-Khinchine): half the exponential wait.
    assert slowqueue.waiting(0.6, 1, s / 2) == pytest.approx(0.6 / 0.4 * s / 2)
    assert slowqueue.waiting(1.0, 4, s) == float("inf")


def _queue(**kw: float) -> slowqueue.SlowQueue:
    # One database read of 10 ms per read is all the device's work; 5 disks half busy.
    q = slowqueue.SlowQueue(
        servers=5, rho0=0.5, fixed=0.0, work_s=0.010, requests_per_read=1.0,
        service_s=0.010, service_sq_s2=2 * 0.010**2, read_service_s=0.010,
        write_service_s=0.0, writes_per_read=0.0, copy_s=0.020, copies_per_read=0.0,
        copies_per_s=0.0,
    )  # fmt: skip
    return replace(q, **kw)


def _gains(q: slowqueue.SlowQueue, rate: float = 250.0) -> tuple[float, float, float]:
    # One loop at 250 reads/s (the baseline's 0.5 x 5 disks / 10 ms), reads of 10 ms,
    # no time outside reads; half of them hit at no cost: the old law says 2x.
    one = [np.array([x]) for x in (rate, 0.010, 0.0, 0.0, 0.005, 0.5, 0.0)]
    g, f, rho = slowqueue.queued_gains(q, *one)  # type: ignore[call-arg]
    return float(g[0]), f, rho


def test_no_fills_and_the_baselines_load_is_the_old_law() -> None:
    # At 2x, half the reads miss: the device does the baseline's work per second
    # with the baseline's mix, so the misses keep the baseline's latency.
    g, f, rho = _gains(_queue())
    assert f == pytest.approx(1.0)
    assert rho == pytest.approx(0.5)
    assert g == pytest.approx(2.0)


def test_a_caches_fills_slow_its_misses_and_lower_the_gain() -> None:
    g, f, rho = _gains(_queue(copies_per_read=0.1))  # a tenth of the reads fill 20 ms
    assert f > 1.05 and g < 2.0
    # The fixed point: at gain g the misses take f x 10 ms, so g = 10 / (5 f)...
    assert g == pytest.approx(0.010 / (0.005 * f))
    # ...and the load at that gain: the reads' work and g x 250 x 0.5 fills of 40 ms.
    assert rho == pytest.approx(0.5 * g / 2 + g * 250 * 0.1 * 0.020 / 5)
    assert rho < 1
    more, f_more, _ = _gains(_queue(copies_per_read=0.2))
    assert more < g and f_more > f  # more fills, slower misses
    # A tier's copies come per second.
    tier, f_tier, _ = _gains(_queue(copies_per_s=50.0))
    assert tier < 2.0 and f_tier > 1.0


def test_background_disk_time_stays_per_second() -> None:
    # 20 ms of the device's work per read (10 of it writes a hit does not take off)
    # at 125 reads/s: a faster loop's load grows. With 0.3 of the 0.5 busy share
    # destages that a faster loop does not change, less of it grows: a higher gain.
    q = _queue(copies_per_read=0.1, work_s=0.020)
    g, _, _ = _gains(q, 125.0)
    bg, _, rho = _gains(replace(q, fixed=0.3), 125.0)
    assert bg > g
    load = bg * (0.020 - 0.5 * 0.010) / 0.020  # the work per second against the baseline's
    assert rho == pytest.approx(0.2 * load + 0.3 + bg * 125 * 0.1 * 0.020 / 5)


def _events(offsets: list[int], lat_ms: float, gap_ms: float = 1.0) -> Events:
    n = len(offsets)
    return Events(
        t_ns=(np.arange(n) * gap_ms * 1e6).astype(np.int64),
        dev=np.zeros(n, dtype=np.int64),
        offset=np.array(offsets, dtype=np.int64),
        nbytes=np.full(n, 32768, dtype=np.int64),
        op=np.zeros(n, dtype=np.int8),
        lat_ns=np.full(n, int(lat_ms * 1e6), dtype=np.int64),
    )


def test_predict_with_the_queue_from_constructed_traces() -> None:
    # Reads of 10 ms, 20 ms apart, on 2 disks, cycling over 6 units of 1 MiB with
    # a cache of 4: LRU misses every read (fills on every one). Then a hot unit. The
    # law on the baseline's order (closed=False; the closed loop:
    # test_lab_closed_loop.py).
    mib = 1 << 20
    fast = _events([0] * 10, 0.1)
    p = predict.params("cache", 4, 1024, 5.0, 5.0)
    cold = _events([(i % 6) * mib for i in range(600)], 10.0, 20.0)
    svc = slowqueue.service_times(cold, 2)
    dev = slowqueue.device_time(cold, cold, svc, 100.0, 2)
    assert dev.busy_s / (dev.span_s * 2) == pytest.approx(0.25, rel=0.01)
    got = predict.predict(cold, fast, p, 2, 50.0, dev, closed=False)
    old = predict.predict(cold, fast, p, 2, 50.0, dev, queue=False, closed=False)
    assert got["read_hit_ratio"] == 0.0
    # No hits: the loop cannot run faster, but the fills load the disks and the
    # misses slow down: a loss where the old law said no change.
    assert old["read_throughput_gain"] == pytest.approx(1.0)
    assert got["queue"]["utilization"] > got["queue"]["baseline_utilization"]
    assert got["queue"]["miss_slowdown"] > 1.0
    assert got["read_throughput_gain"] < 1.0
    # A hot unit read over and over: one fill, the rest hits; the one miss hardly
    # moves the mean: the old law's gain.
    hot = _events([0] * 600, 10.0, 20.0)
    dev = slowqueue.device_time(hot, hot, slowqueue.service_times(hot, 2), 100.0, 2)
    got = predict.predict(hot, fast, p, 2, 50.0, dev, closed=False)
    old = predict.predict(hot, fast, p, 2, 50.0, dev, queue=False, closed=False)
    assert got["read_throughput_gain"] == pytest.approx(old["read_throughput_gain"], rel=1e-3)


def test_with_disk_busy_adds_what_the_trace_does_not_show() -> None:
    dev = slowqueue.DeviceTime(
        busy_s=20, span_s=100, reads=1000, read_service_s=0.010, writes=0, write_service_s=0,
        mb_s=100, servers=10,
    )  # fmt: skip
    assert slowqueue.with_disk_busy(dev, None) is dev
    got = slowqueue.with_disk_busy(dev, {"disk_busy_s": 120.0, "now_s": 50.0})
    assert got.background_s == pytest.approx(120 / 50 * 100 - 20)
    q = slowqueue.slow_queue(got, predict.params("cache", 4, 1024, 5.0, 5.0), 0)
    assert q is not None
    assert q.rho0 == pytest.approx(0.24) and q.fixed == pytest.approx(0.22)


def test_a_write_back_arrays_writes_are_not_the_disks_work() -> None:
    # Reads of 10 ms and writes the controller's cache acknowledges in 0.5 ms, in
    # turn: on a write-back array only the reads are the disks' (their destages are
    # the counters' background), and a write has no disk service to take off.
    n = 400
    ev = _events([i * (1 << 20) for i in range(n)], 10.0, 20.0)
    ev.op[1::2] = 1
    ev.lat_ns[1::2] = 500_000
    svc = slowqueue.service_times(ev, 1)
    plain = slowqueue.device_time(ev, ev, svc, 100.0, 1)
    wb = slowqueue.device_time(ev, ev, svc, 100.0, 1, write_back=True)
    assert plain.busy_s == pytest.approx(200 * 0.010 + 200 * 0.0005, rel=1e-6)
    assert wb.busy_s == pytest.approx(200 * 0.010, rel=1e-6)
    assert wb.requests == 200 and wb.service_s == pytest.approx(0.010)
    assert plain.write_service_s == pytest.approx(0.0005) and wb.write_service_s == 0.0
    assert wb.read_service_s == plain.read_service_s == pytest.approx(0.010)


def test_a_copy_waits_in_the_mix_as_its_chunk_requests() -> None:
    # A unit copied as 8 chunk reads on 8 disks: its disk time counts whole in the
    # utilization, but a read queued behind it waits for one chunk, so in the mix's
    # residual E[S^2] / (2 E[S]) a copy counts 8 requests of an eighth each.
    dev = slowqueue.DeviceTime(
        busy_s=1.0, span_s=10.0, reads=1000, read_service_s=0.001, writes=0,
        write_service_s=0.0, mb_s=150.0, servers=8, requests=1000, service_s=0.001,
        service_sq_s2=1e-6,
    )  # fmt: skip
    p = predict.params("cache", 16, 4096, 5, 5)
    whole = slowqueue.slow_queue(dev, p, 0)
    chunks = slowqueue.slow_queue(replace(dev, copy_reads=8), p, 0)
    assert whole is not None and chunks is not None and chunks.copy_reads == 8
    r = np.array([100.0])
    none = np.zeros(1)
    rho1, res1 = slowqueue.load(whole, r, r, none, none, 0.0)
    assert slowqueue.load(chunks, r, r, none, none, 0.0) == (rho1, res1)  # no copies
    rho_w, res_w = slowqueue.load(whole, r, r, none, none, 10.0)
    rho_c, res_c = slowqueue.load(chunks, r, r, none, none, 10.0)
    # The copies' disk time is the utilization's either way (8 positionings here).
    assert rho_c == pytest.approx(rho1 + 10 * chunks.copy_s / 8)
    assert rho_w == pytest.approx(rho1 + 10 * whole.copy_s / 8)
    first = 100 * 0.001 + 10 * chunks.copy_s
    assert res_c == pytest.approx((100 * 1e-6 + 10 * chunks.copy_s**2 / 8) / (2 * first))
    assert res_c < res_w
