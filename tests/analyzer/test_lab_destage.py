"""The destages' growth with a faster loop's writes (analyzer/lab/destage.py), by the
array's own model offline (`iotape-array --replay`): writes that never share a stripe
cost a read-modify-write each, so their disk time follows their rate; a sequential
stream fills whole stripes at a higher rate and costs less per byte. And the slow
device's load takes the background at the configuration's disk-bound writes."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest
from conftest import need

from analyzer.lab import destage, slowqueue
from analyzer.lab.array import SERVER, ArrayModel
from analyzer.tiering.events import Events

MIB = 1 << 20
SPACE = 1 << 40
STRIPE = 8 * 512 << 10  # 10 disks of 512 KiB, RAID 6: 8 data chunks


def _writes(t_s: np.ndarray, offset: np.ndarray, nbytes: int) -> Events:
    n = len(t_s)
    return Events(
        t_ns=(t_s * 1e9).astype(np.int64),
        dev=np.zeros(n, dtype=np.int64),
        offset=offset.astype(np.int64),
        nbytes=np.full(n, nbytes, dtype=np.int64),
        op=np.ones(n, dtype=np.int8),
        lat_ns=np.full(n, 300_000, dtype=np.int64),
    )


def _model() -> dict[str, float]:
    need(SERVER.exists(), "the array server built (make native)")
    return asdict(ArrayModel.load())


def test_isolated_writes_cost_their_rate() -> None:
    # 200 writes of 8 KiB, each in a stripe of its own, 20 a second: one
    # read-modify-write each (3 reads, 3 writes), however fast they come.
    n = 200
    ev = _writes(np.arange(n) * 0.05, np.arange(n) * 3 * STRIPE + 4096, 8192)
    curve = destage.growth(ev, _model(), SPACE, gains=(1.0, 2.0, 4.0))
    assert curve[0] == (1.0, 1.0)
    assert curve[1][1] == pytest.approx(2.0, rel=0.15)
    assert curve[2][1] == pytest.approx(4.0, rel=0.15)


def test_a_stream_coalesces_into_whole_stripes_when_faster() -> None:
    # 64 KiB sequential writes, 100 a second: at that rate a stripe (4 MiB: 64
    # writes) is destaged in parts (every 100 ms); 8x as fast it fills in 80 ms and
    # goes whole (no reads), so 8x the writes cost far less than 8x the disk time.
    n = 1000
    ev = _writes(np.arange(n) * 0.01, np.arange(n) * 65536, 65536)
    curve = dict(destage.growth(ev, _model(), SPACE, gains=(1.0, 8.0)))
    assert 1.0 < curve[8.0] < 4.0


def test_the_load_grows_the_background_with_the_disk_bound_writes() -> None:
    dev = slowqueue.DeviceTime(
        busy_s=2.0, span_s=10.0, reads=1000, read_service_s=0.002, writes=1000,
        write_service_s=0.0, mb_s=150.0, servers=1, background_s=4.0,
        background_growth=((1.0, 1.0), (2.0, 1.5), (4.0, 2.0)),
    )  # fmt: skip
    q = slowqueue.slow_queue(dev, slowqueue.Params(unit=4 * MIB, capacity=16 * MIB), 0)
    assert q is not None and q.fixed == pytest.approx(0.4) and q.rho0 == pytest.approx(0.6)
    rate, none = np.array([100.0]), np.zeros(1)
    assert slowqueue.background_scale(q, 3.0) == pytest.approx(1.75)
    assert slowqueue.background_scale(q, 10.0) == 2.0  # held past the last point
    same, _ = slowqueue.load(q, rate, rate, none, none, 0.0)
    assert same == pytest.approx(0.6)
    # Twice the reads (and writes), no hits: the trace's part doubles (0.2 -> 0.4),
    # the destages grow 1.5x (0.4 -> 0.6).
    twice, _ = slowqueue.load(q, rate, 2 * rate, none, none, 0.0)
    assert twice == pytest.approx(0.4 + 0.6)
    # A tier's write hits destage to its SSDs: half of them leave the disks' writes
    # at the baseline's rate (the trace's part still doubles, less nothing: no reads hit).
    tiered, _ = slowqueue.load(q, rate, 2 * rate, none, np.array([0.5]), 0.0)
    assert tiered == pytest.approx(0.4 + 0.4)
