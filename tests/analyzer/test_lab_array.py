"""The emulated array (analyzer/lab/array.py, src/array.c and src/arraymodel.c) against
its own stated model (array_model.toml), as a block device brought up by blockdev.py
(`iotape lab device`).

Asserted on the server's own counters (MOUNT/stats: its modelled times and the disk
operations it issued), which a loaded machine does not change, and on wall-clock only
as lower bounds (a stall makes a request slower, never faster) or as an upper bound on
what the model allows through (the destage rate): a slower machine only lowers that."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import need

from analyzer.lab import blockdev
from analyzer.lab.array import ArrayModel

pytestmark = pytest.mark.kernel
KIB = 1024


@pytest.fixture
def lab_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("IOTAPE_LAB_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


class Device:
    def __init__(self, st: blockdev.DeviceState, model: ArrayModel) -> None:
        self.st, self.model, self.dev = st, model, st.loop

    def stats(self) -> dict[str, Any]:
        return json.loads(self.st.stats_path.read_text())

    def fio(self, *args: str) -> dict[str, Any]:
        out = subprocess.run(
            ["fio", "--name=t", f"--filename={self.dev}", "--direct=1", "--ioengine=libaio",
             "--output-format=json", "--randrepeat=1", *args],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return json.loads(out.stdout)["jobs"][0]

    def drained(self, timeout_s: float = 60) -> dict[str, Any]:
        """The counters once every dirty byte is on the disks."""
        deadline = time.monotonic() + timeout_s
        while True:
            s = self.stats()
            if s["dirty_bytes"] == 0 and s["destaging"] == 0:
                return s
            assert time.monotonic() < deadline, f"not drained: {s}"
            time.sleep(0.05)


@pytest.fixture
def array(kernel: None, lab_state: Path) -> Iterator[Any]:
    """array(size_mb, **model changes) -> Device, taken down at teardown."""
    need(blockdev.ARRAY_SERVER.exists(), "the array server built (make native)")
    made: list[str] = []

    def up(size_mb: int = 512, **changes: float) -> Device:
        model = ArrayModel.load(changes=changes)
        name = f"array38-test-{len(made)}"
        try:
            st = blockdev.up(name, "array", size_mb, model)
        except blockdev.DeviceError as e:
            need(False, f"an emulated array: {e}")
        made.append(name)
        return Device(st, model)

    yield up
    for name in made:
        blockdev.down(name)


def _delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The counters' change; a list (a histogram) element by element."""
    out: dict[str, Any] = {}
    for k, x in a.items():
        if isinstance(x, list):
            out[k] = [q - p for p, q in zip(x, b[k], strict=True)]
        elif isinstance(x, int | float):
            out[k] = b[k] - x
    return out


def test_random_reads_take_a_disks_time_and_reordering_shortens_seeks(array: Any) -> None:
    d = array(disks=4)
    m = d.model
    s0 = d.stats()
    job = d.fio("--rw=randread", "--bs=8k", "--iodepth=1", "--number_ios=400", "--size=512m")
    qd1 = _delta(s0, d.stats())
    assert qd1["reads"] == 400 and qd1["disk_reads"] == 400  # one chunk, one disk each
    mean = qd1["host_disk_read_service_s"] / 400 * 1e3
    # The model's mean (seek + half a turn + transfer): 400 random draws, SE about 2 %.
    assert mean == pytest.approx(m.random_read_ms(8192), rel=0.10)
    # At depth 1 nothing queues: the modelled latency is the disks' service.
    assert qd1["read_latency_s_sum"] == pytest.approx(qd1["host_disk_read_service_s"], rel=1e-6)
    # fio sees at least the modelled time (a lower bound: load only adds).
    assert job["read"]["clat_ns"]["mean"] / 1e6 >= 0.95 * mean
    # At depth 32 on 4 disks each disk takes the request its head reaches first
    # (seek and the sector's turn): shorter positioning.
    s1 = d.stats()
    d.fio("--rw=randread", "--bs=8k", "--iodepth=32", "--number_ios=1600", "--size=512m")
    qd32 = _delta(s1, d.stats())
    assert qd32["reads"] == 1600
    pos1 = (qd1["disk_seek_s"] + qd1["disk_rotation_s"]) / qd1["disk_reads"]
    pos32 = (qd32["disk_seek_s"] + qd32["disk_rotation_s"]) / qd32["disk_reads"]
    assert pos32 < 0.75 * pos1, (pos1, pos32)
    # Every host read's queue wait is in the histogram.
    assert sum(qd32["read_wait_hist"]) == 1600
    # The aging weight acts: at a weight that makes the queue first-come first-served
    # the same load positions as long as at depth 1.
    f = array(disks=4, age_weight=1e6)
    s2 = f.stats()
    f.fio("--rw=randread", "--bs=8k", "--iodepth=32", "--number_ios=1600", "--size=512m")
    fifo = _delta(s2, f.stats())
    pos_fifo = (fifo["disk_seek_s"] + fifo["disk_rotation_s"]) / fifo["disk_reads"]
    assert pos_fifo > 0.9 * pos1 and pos_fifo > 1.3 * pos32, (pos1, pos32, pos_fifo)
    # Little's law on the model's own times: 32 outstanding on 4 disks queue.
    assert qd32["read_latency_s_sum"] > 3 * qd32["host_disk_read_service_s"] / 4


def test_writes_under_the_dirty_limit_are_acknowledged_at_the_cache_time(array: Any) -> None:
    d = array(dirty_mb=64)
    s0 = d.stats()
    job = d.fio("--rw=randwrite", "--bs=8k", "--iodepth=8", "--number_ios=1000", "--size=512m")
    w = _delta(s0, d.stats())
    ack = d.model.ack_ms_of(8192) / 1e3
    assert w["writes"] == 1000 and w["writes_waited"] == 0
    assert w["write_latency_s_sum"] / 1000 == pytest.approx(ack, rel=1e-3)
    assert d.stats()["write_latency_s_max"] == pytest.approx(ack, rel=1e-3)
    assert job["write"]["clat_ns"]["mean"] / 1e9 >= 0.95 * ack
    s = d.drained()
    assert s["destaged_bytes"] - s0["destaged_bytes"] <= 1000 * 8192  # overwrites coalesce


def _pwrite(dev: str, offset: int, data: bytes) -> None:
    buf = mmap.mmap(-1, len(data))  # page-aligned, as O_DIRECT needs
    buf.write(data)
    fd = os.open(dev, os.O_WRONLY | os.O_DIRECT)
    try:
        assert os.pwritev(fd, [buf], offset) == len(data)
    finally:
        os.close(fd)


def _pread(dev: str, offset: int, n: int) -> bytes:
    buf = mmap.mmap(-1, n)
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    try:
        assert os.preadv(fd, [buf], offset) == n
    finally:
        os.close(fd)
    return bytes(buf)


def test_raid6_destage_costs(array: Any) -> None:
    """6 disks (4 data + P + Q), 64 KiB chunks: a stripe holds 256 KiB of data."""
    d = array(size_mb=64, disks=6, chunk_kb=64)
    stripe = 4 * 64 * KIB
    s0 = d.drained()
    # 40 small writes, each alone in its stripe: read-modify-write, 3 reads + 3 writes.
    small = {s * stripe + 8 * KIB: os.urandom(8 * KIB) for s in range(0, 80, 2)}
    for off, data in small.items():
        _pwrite(d.dev, off, data)
    s1 = d.drained()
    r = _delta(s0, s1)
    assert (r["destage_rmw"], r["destage_full"], r["destage_reconstruct"]) == (40, 0, 0)
    assert r["disk_read_ops_destage"] == 120 and r["disk_write_ops_destage"] == 120
    assert r["destaged_bytes"] == 40 * 8 * KIB
    assert r["disk_read_bytes"] == r["disk_write_bytes"] == 120 * 8 * KIB
    # A whole stripe in one write: P and Q from the new data alone, no reads.
    _pwrite(d.dev, 100 * stripe, os.urandom(stripe))
    s2 = d.drained()
    f = _delta(s1, s2)
    assert (f["destage_full"], f["disk_read_ops_destage"], f["disk_write_ops_destage"]) == (1, 0, 6)
    # Three of four chunks: reading the clean one (1) is cheaper than 3 + P + Q (5).
    _pwrite(d.dev, 102 * stripe, os.urandom(3 * 64 * KIB))
    s3 = d.drained()
    c = _delta(s2, s3)
    assert (c["destage_reconstruct"], c["disk_read_ops_destage"], c["disk_write_ops_destage"]) == (
        1,
        1,
        5,
    )
    # Every byte reads back as written, cached or destaged.
    for off, data in small.items():
        assert _pread(d.dev, off, len(data)) == data


def test_reads_of_dirty_data_come_from_the_cache(array: Any) -> None:
    d = array(size_mb=64, disks=6, chunk_kb=64, destage_delay_ms=60_000, watermark=1.0)
    data = os.urandom(8 * KIB)
    _pwrite(d.dev, 5 * 256 * KIB, data)  # stays dirty: no pressure, a long delay
    s0 = d.stats()
    assert _pread(d.dev, 5 * 256 * KIB, 8 * KIB) == data
    r = _delta(s0, d.stats())
    assert (r["cache_read_pieces"], r["disk_read_pieces"], r["disk_reads"]) == (1, 0, 0)
    assert r["read_latency_s_sum"] == pytest.approx(d.model.ack_ms_of(8 * KIB) / 1e3, rel=1e-3)


def test_a_full_cache_holds_writes_to_the_destage_rate(array: Any) -> None:
    """Random 8 KiB writes, 12x the dirty limit: once full, writes wait and go at the
    rate the disks destage them, each costing its read-modify-write."""
    d = array(size_mb=1024, disks=6, chunk_kb=64, dirty_mb=2)
    m = d.model
    s0 = d.stats()
    d.fio("--rw=randwrite", "--bs=8k", "--iodepth=16", "--number_ios=3000", "--size=1024m")
    s1 = d.stats()
    w = _delta(s0, s1)
    assert w["writes"] == 3000 and w["writes_waited"] > 2000
    assert s1["write_latency_s_max"] > 10 * m.ack_ms_of(8192) / 1e3
    # The RAID 6 penalty: six disk operations per destaged stripe, nearly all of them
    # one write alone in its stripe (3000 writes over 4096 stripes, 256 dirty at once).
    ops = w["disk_read_ops_destage"] + w["disk_write_ops_destage"]
    stripes = w["destage_rmw"] + w["destage_reconstruct"] + w["destage_full"]
    assert 6 * w["destage_rmw"] >= 0.9 * 6 * stripes
    assert ops >= 6 * stripes
    # No faster than the disks allow: the bytes acknowledged in the window are at most
    # what was dirty at its end plus what the disks destaged, at their modelled rate.
    window = w["now_s"]
    allowed = m.dirty_mb * 2**20 + 1.2 * m.destage_writes_per_s(8192) * 8192 * window
    assert w["write_bytes"] <= allowed, (w["write_bytes"], allowed, window)


def test_the_tier_promotes_the_hot_units_and_serves_them(array: Any) -> None:
    """A 2-unit SSD tier of 1 MiB units (4 stripes of 4 x 64 KiB), no decay: units 3
    and 7 read often, unit 20 once; the policy (workload/src/tierpolicy.c) wants the
    two hot ones, the mover copies them (each: 16 chunk reads, one SSD write), and then
    their reads and the destages of their stripes go to the SSDs."""
    mib = 1 << 20
    d = array(
        size_mb=64, disks=6, chunk_kb=64, tier_mb=2, tier_unit_kb=1024,
        tier_stats_s=0.2, tier_migrate_s=0.2, tier_half_life_s=0,
    )  # fmt: skip
    s0 = d.stats()
    for unit in (3, 7):
        for i in range(40):
            _pread(d.dev, unit * mib + i * 8 * KIB, 8 * KIB)
    _pread(d.dev, 20 * mib, 8 * KIB)
    deadline = time.monotonic() + 30
    while d.stats()["tier_units"] < 2:
        assert time.monotonic() < deadline, d.stats()
        time.sleep(0.05)
    s1 = d.stats()
    m = _delta(s0, s1)
    assert (m["promoted"], m["demoted"], m["migrated_bytes"]) == (2, 0, 2 * mib)
    assert m["ssd_writes"] == 2 and m["ssd_write_bytes"] == 2 * mib
    # The host's 81 reads (from the disks, or from the SSDs once a unit's copy is done:
    # a boundary may fall while they run), and the copies' 2 x 16 chunk reads.
    assert m["disk_reads"] + m["tier_read_pieces"] == 81 + 2 * 16
    assert m["reads"] == 81 and m["disk_read_ops_host"] + m["tier_read_pieces"] == 81
    for unit in (3, 7):
        for i in range(10):
            _pread(d.dev, unit * mib + i * 64 * KIB, 8 * KIB)
    r = _delta(s1, d.stats())
    assert (r["tier_read_pieces"], r["ssd_reads"], r["disk_reads"]) == (20, 20, 0)
    # A write to a unit in the tier is destaged there: no read-modify-write.
    _pwrite(d.dev, 3 * mib + 4 * KIB * 2, os.urandom(8 * KIB))
    w = _delta(s1, d.drained())
    assert (w["tier_destages"], w["destage_rmw"], w["disk_write_ops_destage"]) == (1, 0, 0)
    assert w["ssd_writes"] == 1


def _until(d: Device, key: str, n: int) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while (s := d.stats())[key] < n:
        assert time.monotonic() < deadline, s
        time.sleep(0.02)
    return s


def test_the_read_cache_fills_missed_units_and_evicts_the_least_recent(array: Any) -> None:
    """A 2-unit SSD read cache of 1 MiB units (workload/src/cachepolicy.c): a missed
    unit is copied in (16 chunk reads, one SSD write), then its reads are the SSDs';
    a third unit evicts the least recently read."""
    mib = 1 << 20
    d = array(size_mb=64, disks=6, chunk_kb=64, cache_ssd_mb=2, tier_unit_kb=1024)
    s0 = d.stats()
    _pread(d.dev, 3 * mib, 8 * KIB)
    s1 = _until(d, "fills", 1)
    f = _delta(s0, s1)
    assert (f["rcache_misses"], f["disk_reads"], f["ssd_writes"]) == (1, 1 + 16, 1)
    for i in range(10):
        _pread(d.dev, 3 * mib + i * 64 * KIB, 8 * KIB)
    h = _delta(s1, d.stats())
    assert (h["rcache_hits"], h["ssd_reads"], h["disk_reads"]) == (10, 10, 0)
    _pread(d.dev, 5 * mib, 8 * KIB)
    _until(d, "fills", 2)
    _pread(d.dev, 9 * mib, 8 * KIB)
    s2 = _until(d, "fills", 3)
    assert s2["evictions"] - s0["evictions"] == 1 and s2["tier_units"] == 2
    _pread(d.dev, 3 * mib, 8 * KIB)  # evicted: from the disks again
    m = _delta(s2, d.stats())
    assert (m["rcache_misses"], m["rcache_hits"], m["disk_read_ops_host"]) == (1, 0, 1)
    # A write to a cached unit updates its copy when destaged.
    _pwrite(d.dev, 9 * mib + 8 * KIB, os.urandom(8 * KIB))
    w = _delta(s2, d.drained())
    assert w["rcache_updates"] == 1 and w["destage_rmw"] == 1


def test_the_read_cache_decides_as_the_simulators_lru_on_one_sequence(array: Any) -> None:
    """Differential: one sequence of reads (skewed over 12 units, a cache of 4) on the
    array, each read after the previous one's fill is done, and through the offline
    simulator's `lru` (analyzer.tiering.native): the same hit or miss at every read,
    the same evictions. The array's hit is read off its counters read by read."""
    import numpy as np

    from analyzer.tiering import native

    mib = 1 << 20
    d = array(size_mb=64, disks=6, chunk_kb=64, cache_ssd_mb=4, tier_unit_kb=1024)
    rng = np.random.default_rng(38)
    units = np.minimum(rng.zipf(1.4, size=150) - 1, 11)  # skewed: a few hot units
    s0 = prev = d.stats()
    array_hits: list[bool] = []
    for u in units.tolist():
        _pread(d.dev, u * mib + int(rng.integers(0, 16)) * 64 * KIB, 8 * KIB)
        s = d.stats()
        hit = s["rcache_hits"] > prev["rcache_hits"]
        array_hits.append(hit)
        if not hit:  # its fill done before the next read, as the simulator admits at once
            s = _until(d, "fills", s["rcache_misses"] - s0["rcache_misses"] + s0["fills"])
        prev = s
    flags = native.lru(units.astype(np.int32), 64, 4)
    sim_hits = [bool(f & native.HIT) for f in flags.tolist()]
    assert 20 < sum(sim_hits) < len(units) - 20  # both outcomes are exercised
    assert array_hits == sim_hits
    sim_evictions = sum(bool(f & native.EVICTED) for f in flags.tolist())
    assert d.stats()["evictions"] - s0["evictions"] == sim_evictions


def _settled(d: Device, fresh: bool = False) -> dict[str, Any]:
    """The array's counters at a time 0.3-0.9 s into a 1 s window of its clock (a
    migration's copies done, the next boundary not near), waiting for one if need be;
    `fresh`: in the next window. Waits, not assertions: load only delays it."""
    s = d.stats()
    start = int(s["now_s"])
    while True:
        frac = s["now_s"] - int(s["now_s"])
        if 0.3 <= frac < 0.9 and (not fresh or int(s["now_s"]) > start):
            return s
        time.sleep(0.02)
        s = d.stats()


def test_the_tier_decides_as_the_simulators_tiering_on_one_sequence(array: Any) -> None:
    """Differential: reads in bursts, each from a new 1 s window of the array's clock
    (its stats' now_s), first to units 0-2, then more to units 5-7, none near a
    boundary; the same accesses, at their times from the array's start, through the
    offline simulator's `tiering` (analyzer.tiering.migration, the policy in Python):
    the same placement at every read (the array's read served by the SSDs exactly
    where the simulator's hit)."""
    import numpy as np

    from analyzer.tiering.migration import tiering
    from analyzer.tiering.params import Params

    mib = 1 << 20
    d = array(size_mb=64, disks=6, chunk_kb=64, tier_mb=3, tier_unit_kb=1024,
              tier_stats_s=1, tier_migrate_s=1)  # fmt: skip
    plan = [[0, 1, 2, 0, 1, 2, 0, 1, 3]] * 3 + [[5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6, 7, 4]] * 3
    t_acc: list[int] = []
    uids: list[int] = []
    served: list[bool] = []
    for burst in plan:
        _settled(d, fresh=True)
        for u in burst:
            s = _settled(d)
            _pread(d.dev, u * mib, 8 * KIB)
            after = d.stats()
            t_acc.append(int(s["now_s"] * 1e9))
            uids.append(u)
            served.append(after["tier_read_pieces"] > s["tier_read_pieces"])
    p = Params(unit=mib, capacity=3 * mib, stats_interval_s=1, migrate_interval_s=1, half_life_s=60)
    n = len(uids)
    hit, moves = tiering(p, np.array(t_acc), np.array(uids), np.ones(n, dtype=bool), 64, 3, 0)
    assert sum(m.promoted for m in moves) > 3 and sum(m.demoted for m in moves) > 0
    assert served == [bool(h) for h in hit.tolist()]
