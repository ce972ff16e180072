"""Think time net of the host's delay (replayer/src/deps.c, docs/replay.md "Think
time net of the host"): iotape-lanes replays each relative think less the smaller
of its job's floor (the job's smallest think in the log) and this host's own
delay, never below 0, and still issues nothing before its predecessor completed.
The own delay is timed on the target (replayer/src/calib.c: a chain of reads, less
the device's service time), or, where it cannot be, estimated from sleeps with the
reason said. No root except where a test names the kernel: the target is a file."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import DT, SDA, header

import schemas
from recorder.tracefile import write_trace
from replayer.plan.build import PlanOptions, plan
from replayer.run import runner

OP = schemas.enum("op")
MIB = 1 << 20
LAT_NS = 100_000


def _trace(path: Path, thinks_us: dict[int, list[int]], reads_only: bool = False) -> Path:
    """A synchronous submitter per tid, each request issued its think (us) after
    its thread's previous completion (every third a write unless `reads_only`)."""
    rows = []
    for k, (tid, thinks) in enumerate(thinks_us.items()):
        t = 1_000_000 + k * 37_000
        for think in [0, *thinks]:
            t += think * 1000
            rows.append((t, tid))
            t += LAT_NS
    r = np.zeros(len(rows), dtype=DT)
    q = np.array([t for t, _ in rows], np.int64)
    r["ts_queue_ns"] = q
    r["ts_issue_ns"] = q + 2_000
    r["ts_complete_ns"] = q + LAT_NS
    r["tid"] = [tid for _, tid in rows]
    r["pid"] = 400
    r["offset"] = np.arange(len(r)) % 64 * 8192
    r["bytes"] = 8192
    writes = (np.arange(len(r)) % 3 == 0) & (not reads_only)
    r["op"] = np.where(writes, OP["write"], OP["read"])
    r["dev"] = SDA
    h = header()
    h["devices"] = h["devices"][:1]
    return write_trace(path, h, r[np.argsort(r["ts_issue_ns"], kind="stable")])


def _plan(tmp_path: Path, target: Path | None = None, reads_only: bool = False) -> Path:
    if target is None:
        target = tmp_path / "target.img"
        target.write_bytes(b"\0" * MIB)
    rng = np.random.default_rng(5)
    # t500: thinks of 300 us and more (a floor above the host's delay given below);
    # t501: one of 20 us (a floor under it: no more than 20 us may come off).
    some = lambda lo: rng.integers(lo, 900, 10).tolist()  # noqa: E731
    thinks = {500: [300, *some(300), *some(300)], 501: [*some(100), 20, *some(100)]}
    trace = _trace(tmp_path / "t.iot", thinks, reads_only)
    jobdir = tmp_path / "jobs"
    plan(PlanOptions(trace=trace, jobdir=jobdir, targets=[f"all={target}"], timing="dependent"))
    return jobdir


def _lanes(jobdir: Path, own_us: str | None) -> subprocess.CompletedProcess:
    assert runner.LANES.exists(), f"{runner.LANES}: run `make native`"
    env = {k: v for k, v in os.environ.items() if k != "IOTAPE_LANES_OWN_FLOOR_US"}
    if own_us is not None:
        env["IOTAPE_LANES_OWN_FLOOR_US"] = own_us
    return subprocess.run([str(runner.LANES), "replay.fio"], cwd=jobdir, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def _logged_thinks(jobdir: Path) -> dict[str, list[int]]:
    """Each job's relative thinks (us) as the plan wrote them."""
    out = {}
    for log in (jobdir / "iologs").glob("*.log"):
        fields = [ln.split() for ln in log.read_text().splitlines()[2:] if ln and ln[0] != ";"]
        out[log.stem] = [int(f[2]) for f in fields if not f[2].startswith("@")]
    return out


def test_each_job_replays_its_thinks_less_the_smaller_of_its_floor_and_the_hosts(
    tmp_path: Path,
) -> None:
    jobdir = _plan(tmp_path)
    out = _lanes(jobdir, "100")
    assert out.returncode == 0, out.stderr
    dep = json.loads(out.stdout)["dependencies"]
    assert dep["issued_before_predecessor"] == 0 and dep["requests"] == 44
    net = dep["think_net"]
    assert net["own_floor_us"] == 100.0
    logged = _logged_thinks(jobdir)
    assert set(net["jobs"]) == set(logged) and len(logged) == 2
    floors = {}
    for name, thinks in logged.items():
        floor = min(thinks)
        floors[name] = floor
        # the spin rule (test_spin_rule.py): a think of 200 us or more is slept
        # through, its floor the smallest such think
        asleep = min(t for t in thinks if t >= 200)
        less = [min(floor if t < 200 else asleep, 100) for t in thinks]
        assert net["jobs"][name]["floor_us"] == floor
        assert net["jobs"][name]["floor_asleep_us"] == asleep
        expect = sum(max(0, t - x) for t, x in zip(thinks, less, strict=True))
        assert net["jobs"][name]["replayed_think_us"] == expect
    # The trace's floors as built: one above the host's delay, one under it.
    assert sorted(floors.values()) == [20, 300]


def test_a_given_host_delay_of_0_replays_the_thinks_as_logged(tmp_path: Path) -> None:
    jobdir = _plan(tmp_path)
    out = _lanes(jobdir, "0")
    assert out.returncode == 0, out.stderr
    net = json.loads(out.stdout)["dependencies"]["think_net"]
    for name, thinks in _logged_thinks(jobdir).items():
        assert net["jobs"][name]["replayed_think_us"] == sum(thinks)


def test_the_measured_host_delay_takes_off_no_more_than_each_jobs_floor(tmp_path: Path) -> None:
    jobdir = _plan(tmp_path)
    out = _lanes(jobdir, None)
    assert out.returncode == 0, out.stderr
    dep = json.loads(out.stdout)["dependencies"]
    assert dep["issued_before_predecessor"] == 0
    net = dep["think_net"]
    own, awake, line = net["own_floor_us"], net["own_awake_us"], dep["spin_think_us"]
    assert own >= 0 and awake >= 0 and line == 200.0
    for name, thinks in _logged_thinks(jobdir).items():
        # each think net of the own delay of the wait it is replayed with (the
        # spin rule: awake under 200 us), no more than its job's floor for it
        asleep = min(t for t in thinks if t >= line)
        less = [min(min(thinks), awake) if t < line else min(asleep, own) for t in thinks]
        # The report's microseconds have 3 decimals; each think is whole ns.
        expect = sum(max(0.0, t - x) for t, x in zip(thinks, less, strict=True))
        assert abs(net["jobs"][name]["replayed_think_us"] - expect) < 0.01 * len(thinks)


def test_a_host_delay_that_is_not_microseconds_is_refused_by_name(tmp_path: Path) -> None:
    jobdir = _plan(tmp_path)
    out = _lanes(jobdir, "-3")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        "iotape-lanes: IOTAPE_LANES_OWN_FLOOR_US=-3: not microseconds "
        "(0 or more; a slept think's[,an awake one's])"
    )


def _disk_stat(name: str) -> tuple[int, int]:
    """Reads and writes a block device has completed."""
    f = Path(f"/sys/block/{name}/stat").read_text().split()
    return int(f[0]), int(f[4])


@pytest.mark.kernel
def test_the_own_delay_is_timed_on_a_cycle_of_reads_of_the_target_that_writes_nothing(
    tmp_path: Path, loop
) -> None:
    jobdir = _plan(tmp_path, Path(loop.path), reads_only=True)
    reads0, writes0 = _disk_stat(loop.name)
    out = _lanes(jobdir, None)
    reads1, writes1 = _disk_stat(loop.name)
    assert out.returncode == 0, out.stderr
    dep = json.loads(out.stdout)["dependencies"]
    net = dep["think_net"]
    assert net["own_floor_from"] == "cycle", net.get("reason")
    cyc = net["cycle"]
    assert 1 <= cyc["rounds"] <= 5 and 16 <= cyc["reads"] <= 400 and 1 <= cyc["blocks"] <= 8
    # The delay is the median round's lateness plus a read's time in the caller
    # beyond the device's (never below 0), the sleeps' estimate reported beside it.
    assert net["own_floor_us"] == pytest.approx(
        max(0.0, cyc["late_us"] + cyc["wake_us"]), abs=0.002
    )
    # The plan has thinks under the spin rule's 200 us: the cycle is timed again
    # with the think's end waited awake, and those thinks are net of that.
    awake = net["cycle_awake"]
    assert dep["thinks_awake"] > 0 and dep["thinks_asleep"] > 0
    assert awake["blocks"] == cyc["blocks"] and 1 <= awake["rounds"] <= 5
    assert net["own_awake_us"] == pytest.approx(
        max(0.0, awake["late_us"] + awake["wake_us"]), abs=0.002
    )
    assert net["timer_us"] >= 0 and "reason" not in net
    # Read-only: the device saw no write, and every read it served is the plan's
    # or the calibration's (its probe of each block, then each kind's rounds).
    assert writes1 == writes0
    calib_reads = cyc["blocks"] + sum(c["rounds"] * c["reads"] for c in (cyc, awake))
    assert reads1 - reads0 == dep["requests"] + calib_reads
    assert dep["issued_before_predecessor"] == 0


def test_the_own_delay_falls_back_to_the_sleeps_with_the_reason_where_it_cannot_be_timed(
    tmp_path: Path,
) -> None:
    # A file on tmpfs: no block device statistics to take a service time from.
    # The planner refuses a file under /dev, so the plan's logs are pointed at it.
    jobdir = _plan(tmp_path)
    fd, name = tempfile.mkstemp(prefix="thinkcal-test-", suffix=".img", dir="/dev/shm")
    os.close(fd)
    target = Path(name)
    try:
        target.write_bytes(b"\1" * MIB)
        for log in (jobdir / "iologs").glob("*.log"):
            lines = log.read_text().splitlines(keepends=True)
            log.write_text(
                "".join(f"open {target}\n" if ln.startswith("open ") else ln for ln in lines)
            )
        out = _lanes(jobdir, None)
    finally:
        target.unlink()
    assert out.returncode == 0, out.stderr
    net = json.loads(out.stdout)["dependencies"]["think_net"]
    assert net["own_floor_from"] == "timer" and "cycle" not in net and "cycle_awake" not in net
    assert net["own_floor_us"] == net["timer_us"]
    assert net["own_awake_us"] == net["timer_awake_us"]
    assert net["reason"].startswith(f"{target}: no block device statistics (/sys/dev/block/0:")


def test_a_given_host_delay_says_so_and_times_nothing(tmp_path: Path) -> None:
    out = _lanes(_plan(tmp_path), "12.5")
    assert out.returncode == 0, out.stderr
    net = json.loads(out.stdout)["dependencies"]["think_net"]
    assert net["own_floor_from"] == "given" and net["own_floor_us"] == 12.5
    assert net["own_awake_us"] == 12.5
    assert "timer_us" not in net and "cycle" not in net and "reason" not in net
