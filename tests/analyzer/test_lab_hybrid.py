"""`iotape lab hybrid` (analyzer/lab): the three configurations end to end in CI size on
real loop devices, and the report's invariants (not its speeds): every byte the engine
moved seen by the recorder in its stream, the tier's and the cache's moves as the
engine counted them, the placement read back with checksums, the prediction written
before the cache and tier ran; and the sizing and the prediction's arithmetic alone."""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import need

from analyzer.lab import hybrid, predict, replayed, slowqueue
from analyzer.lab.sizing import reference, size
from analyzer.tiering.events import Events
from base.errors import IotapeError
from recorder.tracefile import open_trace

ROOT = Path(__file__).resolve().parents[2]
IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")


def _run_released(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run the lab; past `timeout`, interrupt it as Ctrl-C would, so that it
    releases its devices, mounts and servers (a killed CLI leaves them), then fail."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)
        try:
            p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
        raise
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


@pytest.mark.kernel
@pytest.mark.parametrize("device", ["hdd", "array", "array2"])
def test_three_configurations_end_to_end(kernel: None, tmp_path: Path, device: str) -> None:
    """On the HDD-like disk the engine tiers and caches; on the array the tier and the
    read cache are the array's own (4 disks: 2 data chunks of 512 KiB, one stripe per
    1 MiB unit), predicted also by a dependent replay of the baseline (`--tier-in`'s
    default on the array; given on the disk). "array2": the array with two controllers,
    a device each, two databases (one per controller)."""
    out = tmp_path / "lab"
    controllers = 2 if device == "array2" else 1
    device = device.rstrip("2")
    tier_in = "array" if device == "array" else "engine"
    argv = [
        IOTAPE, "lab", "hybrid", "--out", str(out), "--db-mb", "48", "--mailboxes", "24",
        "--seconds", "3", "--unit-kb", "1024", "--stats-s", "0.5", "--migrate-s", "1",
        "--verify", "--json", "--db", str(tmp_path / "store.duckdb"), "--device", device,
        *(["--warm-s", "2"] if tier_in == "array" else ["--tier-in", "engine"]),
        *(["--controllers", "2", "--databases", "2"] if controllers == 2 else []),
    ]  # fmt: skip
    r = _run_released(argv, 600)
    if r.returncode != 0 and "blkio" in r.stderr:
        need(False, f"a hybrid lab: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert json.loads((out / "report.json").read_text()) == rep
    c = rep["configs"]
    assert set(c) == {"baseline", "tier", "cache"}
    for key, row in c.items():
        checks = row["checks"]
        # The recorder saw, stream by stream, exactly the bytes the engine moved.
        assert checks["every_request_accounted"], (key, checks)
        assert checks["recorded_bytes"]["db-read"] > 0 and checks["lost_events"] == 0
        assert row["gain"]["db_read_mb_s"] is not None
        # The host's CPU over the run (hostcpu.py): the engine and the recorder were
        # reaped, so their CPU is in; the whole host was at least as busy.
        host = row["host_cpu"]
        assert 0 < host["children_s"] <= host["host_busy_s"] + 0.05 and host["wall_s"] > 0
    for key in ("tier", "cache"):
        # THE prediction is the model's, with the host's cores beside the disks.
        pred = c[key]["predicted"]
        assert pred["prediction_by"] == "model"
        cores = rep["prediction"][key]["host_cpu"]
        assert 0 < cores["utilization"] < 1 and pred["host_cores_gain"] > 0
    assert (
        c["baseline"]["migrated_bytes"] == 0
        and "migration" not in c["baseline"]["checks"]["recorded_bytes"]
    )
    for key in ("tier", "cache") if tier_in == "engine" else ():
        checks = c[key]["checks"]
        assert c[key]["migrated_bytes"] > 0 and checks["moves_match_counters"]
        # Every 4 KiB block written read back through the placement and after it.
        assert checks["verify"]["blocks"] > 0 and checks["placement_read_back"]
        assert 0 <= c[key]["predicted"]["read_hit_ratio"] <= 1
        assert c[key]["predicted"]["read_throughput_gain"] > 0
    # The prediction was written before the tier and the cache ran.
    assert (out / "prediction.json").stat().st_mtime <= (out / "tier.iot").stat().st_mtime
    assert json.loads((out / "prediction.json").read_text()) == rep["prediction"]
    assert (out / "report.txt").read_text().count("every byte accounted") == 1
    # The lab's devices, their files and the HDD-like file's mount are gone.
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    mounts = Path("/proc/mounts").read_text()
    made = rep["devices"]["files"]
    # The fast device's file; each controller's backing and mount.
    assert len(made) == 1 + 2 * controllers and rep["devices"]["kind"] == device
    assert not [f for f in made if Path(f).exists() or f in loops or f in mounts]
    if device == "array":
        # The array's own counters per configuration: the baseline's database reads all
        # reached it (at least those bytes: the log's reads too), and writes were cached
        # (acknowledged at the cache's time, or later when the cache was full).
        # The array's own tier: units moved, reads from the SSDs, the same unit count in
        # the report as in the counters; the replays of the baseline's trace, on the
        # array without and with the tier, issued the same requests, none early.
        assert c["tier"]["array"]["promoted"] > 0 and c["cache"]["array"]["fills"] > 0
        for key in ("tier", "cache"):
            t = c[key]
            assert t["array"]["tier_read_pieces"] > 0
            assert t["migrated_bytes"] == t["array"]["migrated_bytes"] > 0
            assert 0 < t["read_hit_ratio"] <= 1
            # Warmed first (2 s of load before the measured 3): units already in place.
            assert (out / f"replay-{key}-warm").is_dir() and t["array"]["units_at_start"] > 0
            rp = rep["prediction"][key]["replayed"]
            assert rp["reference"]["ios"] == rp[key]["ios"] > 0
            assert rp["reference"]["issued_before_predecessor"] == 0
            assert rp[key]["issued_before_predecessor"] == 0
            assert rp["read_throughput_gain"] > 0 and t["predicted"]["replayed_gain"] > 0
            # The closed loop of the replays' read latencies, their own rates beside.
            ref_ms = rp["reference"]["streams"]["db-read"]["read_ms_mean"]
            got_ms = rp[key]["streams"]["db-read"]["read_ms_mean"]
            other = rp["other_time_per_read_ms"]
            assert rp["read_throughput_gain"] == pytest.approx((ref_ms + other) / (got_ms + other))
            assert rp["replayed_rate_gain"] > 0 and t["predicted"]["replayed_rate_gain"] > 0
            # The replays ran on arrays of their own (a pair each with two controllers),
            # released since; each recorded device mapped to its controller's own.
            assert len(rp["replay_devices"]) == 9 * controllers
            assert not set(made) & set(rp["replay_devices"])
            where = rp["replay_targets"]  # the baseline's replay first, then tier, cache
            each = [[w] if controllers == 1 else list(w.values()) for w in where]
            assert [d for w in each for d in w] == rp["replay_devices"][2::3]
            if controllers == 2:  # both recorded devices (A's, B's), the same in each
                assert len({tuple(w) for w in where}) == 1 and len(where[0]) == 2
            backing_and_mounts = rp["replay_devices"][0::3] + rp["replay_devices"][1::3]
            assert not [f for f in backing_and_mounts if Path(f).exists() or f in mounts]
            assert not [f for f in rp["replay_devices"][0::3] if f in loops]
        # The database writes took the cache's time at the device (the recorder's
        # issue-to-completion), not the disks'.
        ack = rep["devices"]["array_model"]["ack_ms"]
        assert all(row["device_ms"]["db-write"] >= ack * 0.999 for row in c.values())
        base = c["baseline"]["array"]
        assert base["read_bytes"] >= c["baseline"]["checks"]["recorded_bytes"]["db-read"]
        for row in c.values():
            a = row["array"]
            assert a["writes"] > 0 and a["destaged_bytes"] > 0 and a["cpu_cores"] > 0
            assert a["model_write_ms_avg"] >= rep["devices"]["array_model"]["ack_ms"] * 0.999
    else:
        assert all(row["array"] is None for row in c.values())
    if controllers == 2:
        _two_controllers(rep, out)


def _two_controllers(rep: dict, out: Path) -> None:
    """Database 0 and its log on controller A, 1 on B: both recorded, both served in
    every configuration by their own server, every replay mapped device to device."""
    assert rep["devices"]["databases_on"] == ["a", "b"] and len(rep["devices"]["slows"]) == 2
    with open_trace(out / "baseline.iot") as tr:
        names = [d["name"] for d in tr.header["devices"]]
        devs = set(np.unique(tr.read_all()["dev"]).tolist())
    assert len(names) == 2 and len(devs) == 2
    for key, row in rep["configs"].items():
        each = row["array"]["controllers"]
        assert len(each) == 2, key
        for a in each:
            assert a["reads"] > 0 and a["writes"] > 0 and a["destaged_bytes"] > 0, key
        assert row["array"]["writes"] == sum(a["writes"] for a in each)
        assert row["array"]["cpu_s"] == pytest.approx(sum(a["cpu_s"] for a in each))
    for key in ("tier", "cache"):
        # Each controller had its own SSD, half of the lab's (one 1 MiB unit each at least).
        for a in rep["configs"][key]["array"]["controllers"]:
            assert a["units_at_start"] + a["promoted"] + a["fills"] > 0, key
            assert a["tier_read_pieces"] > 0, key
    for jobdir in ("replay-baseline", "replay-tier", "replay-cache"):
        plan = json.loads((out / jobdir / "plan.json").read_text())
        assert len({t["path"] for t in plan["targets"]}) == 2, jobdir


def test_sizing_keeps_the_published_proportion() -> None:
    ratio = reference()["proportions"]["ssd_to_database"]
    assert ratio == pytest.approx(800 / 1000)
    s = size(512, 100, 1)
    assert s.ssd_mb == 408 and s.ssd_mb % 4 == 0  # 0.8 x 512 in whole 4 MiB pages
    assert s.mailbox_size_mb == pytest.approx(5.12) and s.device_mb > s.db_mb
    with pytest.raises(IotapeError, match="--db-mb 4"):
        size(4, 10, 1)
    with pytest.raises(IotapeError, match="--mailboxes 2: fewer than --databases 3"):
        size(64, 2, 3)


def test_two_controllers_split_the_databases_as_published() -> None:
    """6 databases and their logs, 3 of each per controller (the published layout);
    each controller's device holds its share and a log region per database; each its
    share of the SSD in whole units."""
    assert reference()["array"]["controllers"] == 2
    assert hybrid.placement(6, ["A", "B"]) == ["A", "A", "A", "B", "B", "B"]
    assert hybrid.placement(6, ["A"]) == ["A"] * 6
    one = size(256, 64, 1)
    assert one.controller_mb(1) == one.device_mb  # one controller, one database: as before
    six = size(256, 60, 6)
    assert six.controller_share(2) == 3 and six.controller_mb(2) == 128 + 8 + 3 * 64 + 32
    assert six.controller_mb(1) == 256 + 16 + 6 * 64 + 32
    assert six.ssd_mb == 204 and six.controller_ssd_mb(2) == 100  # 25 units of 4 MiB each
    with pytest.raises(IotapeError, match="--databases 3: 2 controllers take an equal share"):
        size(256, 60, 3).controller_share(2)
    with pytest.raises(IotapeError, match="holds no 4096 KiB unit each"):
        size(8, 8, 2).controller_ssd_mb(2)


def _events(offsets: list[int], ops: list[int], lat_ms: float) -> Events:
    n = len(offsets)
    return Events(
        t_ns=np.arange(n, dtype=np.int64) * 1_000_000,
        dev=np.zeros(n, dtype=np.int64),
        offset=np.array(offsets, dtype=np.int64),
        nbytes=np.full(n, 32768, dtype=np.int64),
        op=np.array(ops, dtype=np.int8),
        lat_ns=np.full(n, int(lat_ms * 1e6), dtype=np.int64),
    )


def test_db_events_number_units_per_region_as_the_engine() -> None:
    mib = 1 << 20
    ev = _events([0, 3 * mib, 5 * mib + 7, 9 * mib], [0, 0, 1, 0], 1.0)
    # Two regions: [1 MiB, 4 MiB) and [5 MiB, 6.5 MiB); the rest is log.
    out = predict.db_events(ev, [(mib, 4 * mib), (5 * mib, 5 * mib + mib // 2 * 3)], mib)
    assert out.offset.tolist() == [2 * mib, 3 * mib + 7]
    assert out.op.tolist() == [0, 1]


def test_littles_law_gain_from_the_projection() -> None:
    # Reads of one hot unit at 10 ms on the slow device; the fast device takes 1 ms.
    mib = 1 << 20
    base = _events([0] * 200, [0] * 200, 10.0)
    fast = _events([0] * 10, [0] * 10, 1.0)
    p = predict.params("cache", 4, 1024, 5.0, 5.0)
    got = predict.predict(base, fast, p, threads=2, base_reads_per_s=100.0, closed=False)
    # All but the first read hit: R' = (10 + 199 x 1) / 200 ms; the threads' other
    # time per read is 2 / 100 s - 10 ms = 10 ms.
    r_new = (10 + 199 * 1) / 200
    assert got["read_hit_ratio"] == pytest.approx(199 / 200)
    assert got["read_latency_ms"]["projected"] == pytest.approx(r_new)
    assert got["littles_law"]["other_time_per_read_ms"] == pytest.approx(10.0)
    assert got["littles_law"]["read_throughput_gain"] == pytest.approx(20 / (r_new + 10))
    assert p.unit == mib and not p.count_writes
    # The closed loop: the two threads' first reads at 0 (one miss, its fill instant
    # without a queue, the other's a hit), then every read a hit over the 2 s.
    closed = predict.predict(base, fast, p, threads=2, base_reads_per_s=100.0)
    loop = closed["littles_law"]["closed_loop"]
    assert loop["fills"] == 1 and loop["read_hit_ratio"] > 0.99
    assert closed["read_throughput_gain"] == pytest.approx(20 / (1 + 10), rel=0.01)


def test_loops_of_numbers_each_request_by_its_database() -> None:
    mib = 1 << 20
    regs = [(mib, 4 * mib), (5 * mib, 5 * mib + mib // 2 * 3)]
    ev = predict.db_events(
        _events([mib, 3 * mib, 5 * mib + 7, 6 * mib], [0, 0, 1, 0], 1.0), regs, mib
    )
    assert predict.loops_of(ev, regs, mib).tolist() == [0, 0, 1, 1]


def test_per_loop_law_follows_the_heat_to_the_faster_loop() -> None:
    # Two databases of one thread each, reads at 10 ms, the fast device 1 ms, a tier
    # of 3 units of 1 MiB. Loop 0 reads units 0, 2, 4 and loop 1 units 1, 3, 5 in
    # turn, at one rate: equal heat, so the tier first takes two of loop 0's units
    # and one of loop 1's. Loop 0 then runs faster, its heat counts more, and the
    # tier gives it all three: at the fixed point loop 1 has no hit (gain 1).
    mib = 1 << 20
    n = 12_000  # 1 ms apart: 12 s, two 5 s intervals and the rest
    base = _events([((i // 2 % 3) * 2 + i % 2) * mib for i in range(n)], [0] * n, 10.0)
    fast = _events([0] * 10, [0] * 10, 1.0)
    loops = (np.arange(n) % 2).astype(np.int64)
    p = predict.params("tier", 3, 1024, 5.0, 5.0)
    prof = (predict.profile(fast), predict.profile(base))
    _, first, hit, _, _ = predict._loop_latencies(base, p, loops, np.array([1, 1]), *prof)
    assert 0 < hit[1] < hit[0]  # mixed at first
    one = predict.predict(base, fast, p, threads=2, base_reads_per_s=200.0)
    got = predict.predict(base, fast, p, threads=2, base_reads_per_s=200.0, loops=loops)
    law = got["littles_law"]
    by = law["per_loop"]
    assert by["converged"] and by["rounds"] >= 2
    g0, g1 = (x["gain"] for x in by["loops"])
    assert g1 == pytest.approx(1.0)
    assert g0 > 10 / (first[0] * 1e3) * 1.2  # above its first round's gain
    assert law["read_throughput_gain"] == pytest.approx((g0 + g1) / 2)
    assert law["one_loop_gain"] == pytest.approx(one["littles_law"]["read_throughput_gain"])
    assert got["read_throughput_gain"] == law["read_throughput_gain"]  # no bound given


def test_per_loop_law_moves_one_loop_a_round() -> None:
    # The heat fixed point moves the loop farthest from its gain, the lowest on a
    # tie, so loops that share the tier alike do not move alike.
    step = predict.next_copies(np.array([1, 1, 1]), np.array([6, 2, 2]))
    assert step.tolist() == [6, 1, 1]
    assert predict.next_copies(np.array([6, 1, 1]), np.array([6, 2, 2])).tolist() == [6, 2, 1]
    # Loop 0 reads unit 0, loop 1 units 1 and 3, loop 2 units 2 and 4, in turn, at
    # one rate, 60 s; a tier of 3 units: loops 1 and 2 each hit part of their
    # reads at first; at the fixed point one of them has both its units and the
    # other none.
    mib = 1 << 20
    n = 60_000
    unit = [0, 1, 2, 0, 3, 4]  # loop i % 3 reads unit[i % 6]
    base = _events([unit[i % 6] * mib for i in range(n)], [0] * n, 10.0)
    fast = _events([0] * 10, [0] * 10, 1.0)
    loops = (np.arange(n) % 3).astype(np.int64)
    p = predict.params("tier", 3, 1024, 5.0, 5.0)
    prof = (predict.profile(fast), predict.profile(base))
    _, _, hit, _, _ = predict._loop_latencies(base, p, loops, np.array([1, 1, 1]), *prof)
    assert 0.2 < hit[1] < 0.8 and 0.2 < hit[2] < 0.8  # both in part
    got = predict.predict(base, fast, p, threads=3, base_reads_per_s=300.0, loops=loops)
    by = got["littles_law"]["per_loop"]
    g0, g1, g2 = sorted(x["gain"] for x in by["loops"])
    assert by["converged"] and g0 == pytest.approx(1.0) and g1 > 5 and g2 > 5


def test_per_loop_law_of_one_loop_is_the_single_loop_law() -> None:
    base = _events([0] * 200, [0] * 200, 10.0)
    fast = _events([0] * 10, [0] * 10, 1.0)
    p = predict.params("cache", 4, 1024, 5.0, 5.0)
    one = predict.predict(base, fast, p, threads=2, base_reads_per_s=100.0)
    same = predict.predict(base, fast, p, 2, 100.0, loops=np.zeros(200, dtype=np.int64))
    assert same["littles_law"]["per_loop"] is None
    assert same["read_throughput_gain"] == one["read_throughput_gain"]


def _lanes(jobs: list[tuple[str, int, float, int, float]], elapsed_ms: int) -> dict:
    """iotape-lanes' JSON: (job name, reads, their mean ms, writes, runtime ms) each."""

    def side(n: int, mean_ms: float) -> dict:
        pct = {"50.000000": mean_ms * 1e6}
        return {"total_ios": n, "iops": 0.0, "clat_ns": {"mean": mean_ms * 1e6, "percentile": pct}}

    return {
        "fio version": "iotape-lanes",
        "elapsed_ms": elapsed_ms,
        "jobs": [
            {"jobname": name, "read": side(r, ms), "write": side(w, 0.5), "job_runtime": rt}
            for name, r, ms, w, rt in jobs
        ],
    }


def test_replayed_gain_is_the_closed_loop_of_the_replays_read_latencies() -> None:
    # Two session threads and a log writer replayed twice: on the slow device reads
    # take 10 ms, on the faster 3.5 ms; each thread also waits 7 s for the log
    # writer's replayed clock, on either device (issue 38's cache replay).
    def replay(ms: float) -> dict:
        runtime = 5000 * ms + 7000
        res = _lanes(
            [
                ("db0.db-read.t1", 5000, ms, 0, runtime),
                ("db0.db-read.t2", 5000, ms, 0, runtime - 10),
                ("db0.log-write.t3", 0, 0.0, 4000, runtime),
            ],
            int(runtime),
        )
        return {"streams": replayed._streams(res["jobs"])}

    ref, cfg = replay(10.0), replay(3.5)
    assert ref["streams"]["db-read"]["read_ms_mean"] == pytest.approx(10.0)
    assert cfg["streams"]["log-write"]["read_ms_mean"] is None
    # The replays' own rates carry the constant wait: 57 s against 24.5 s.
    assert replayed.rate_gain(ref, cfg) == pytest.approx(57000 / 24500)
    # The closed loop: the threads' time per read outside reads from the baseline.
    assert replayed.gain(ref, cfg) == pytest.approx(10.0 / 3.5)
    assert replayed.gain(ref, cfg, other_ms=0.5) == pytest.approx(10.5 / 4.0)
    assert replayed.gain(ref, {"streams": {}}) is None


def test_service_times_of_one_fifo_device() -> None:
    # Issued at 0, 0, 10 ms; done at 5, 9, 30 ms: served 5, then 4 (queued behind
    # the first), then 20 (the device idle from 9 to 10 ms).
    ms = 1_000_000
    ev = _events([0, 1 << 20, 2 << 20], [0, 0, 1], 0.0)
    ev.t_ns = np.array([0, 0, 10 * ms], dtype=np.int64)
    ev.lat_ns = np.array([5 * ms, 9 * ms, 20 * ms], dtype=np.int64)
    assert (slowqueue.service_times(ev) // ms).tolist() == [5, 4, 20]
    # On two disks the second is served from its issue: 9 ms.
    assert (slowqueue.service_times(ev, 2) // ms).tolist() == [5, 9, 20]


def test_utilization_bound() -> None:
    # Busy 90 of 100 s for 9,000 reads (10 ms each, all of the device's work): 90
    # reads/s. Half of them hit, and copies take 100 MB at 100 MB/s + 10 units x
    # 10 ms = 1.1 s of 100: (1 - 0.011) / (0.010 - 0.5 x 0.010) = 197.8 reads/s.
    dev = slowqueue.DeviceTime(
        busy_s=90, span_s=100, reads=9000, read_service_s=0.010, writes=0, write_service_s=0,
        mb_s=100,
    )  # fmt: skip
    got = slowqueue.utilization_bound(dev, 0.5, 100_000_000, 10_000_000)
    assert got["copy_share"] == pytest.approx(0.011)
    assert got["read_throughput_gain"] == pytest.approx((1 - 0.011) / 0.005 / 90)
    assert got["baseline_busy_share"] == pytest.approx(0.9)
    # Two disks: twice the room, the copies a share of twice the time.
    two = slowqueue.utilization_bound(replace(dev, servers=2), 0.5, 100_000_000, 10_000_000)
    assert two["read_throughput_gain"] == pytest.approx(2 * (1 - 0.0055) / 0.005 / 90)
    # A tier's write hits come off too: 4,500 writes of 2 ms, 80 % of them hits.
    w = replace(dev, busy_s=99, writes=4500, write_service_s=0.002)
    got = slowqueue.utilization_bound(w, 0.5, 100_000_000, 10_000_000, write_hit=0.8)
    assert got["read_throughput_gain"] == pytest.approx(
        (1 - 0.011) / (0.011 - 0.005 - 0.8 * 0.5 * 0.002) / 90
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "ssd"], "--device ssd: hdd, array or throttle"),
        (["--spindles", "0"], "--spindles 0: between 1 and 64"),
        (["--seconds", "0"], "--seconds 0.0: must be positive"),
        (["--rounds", "0"], "--rounds 0: must be at least 1"),
        (["--db-mb", "4"], "--db-mb 4: at least 8 MiB of database"),
        (["--mailboxes", "100000", "--db-mb", "64"], "--mailboxes 100000: under 128 KiB"),
        (
            ["--controllers", "2", "--device", "array", "--tier-in", "engine"],
            "--controllers 2: 1, or 2 with --tier-in",
        ),
        (["--controllers", "2"], "--controllers 2: 1, or 2 with --tier-in"),  # hdd: engine
        (
            ["--controllers", "2", "--device", "array", "--databases", "3"],  # tier-in: array
            "--databases 3: 2 controllers take an equal share",
        ),
        (
            ["--controllers", "2", "--device", "array", "--tier-in", "array", "--databases", "3"],
            "--databases 3: 2 controllers take an equal share",
        ),
    ],
)
def test_bad_options_one_line_and_nothing_made(
    tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "lab"
    argv = [IOTAPE, "lab", "hybrid", "--out", str(out), "--db", str(tmp_path / "s.duckdb"), *args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert not out.exists() and not (tmp_path / "s.duckdb").exists()


def test_refuses_an_output_directory_in_use(tmp_path: Path) -> None:
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "report.json").write_text("{}")
    r = subprocess.run(
        [IOTAPE, "lab", "hybrid", "--out", str(tmp_path / "lab")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2 and "not empty; give a new directory" in r.stderr
    assert (tmp_path / "lab" / "report.json").read_text() == "{}"
