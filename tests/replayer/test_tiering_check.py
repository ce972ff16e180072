"""The tiering projection checked on two real devices (issue 7): a recorded trace is
replayed split by an LRU read cache's placement across a fast loop device (/dev/shm)
and a slow one (direct I/O to the real disk, cgroup blkio-throttled), and the
measured latency is compared with the projection from the profile replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
from hybrid_lab import HybridLab, LabError

# Every test here needs root and loop devices (conftest `kernel`).
pytestmark = pytest.mark.kernel

ROOT = Path(__file__).resolve().parents[2]
IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")
RATE = 2000


@pytest.fixture
def lab(kernel: None):
    try:
        with HybridLab(size_mb=128, slow_iops=2 * RATE) as made:
            yield made
    except LabError as e:
        need(False, f"a hybrid lab: {e}")


def test_projection_matches_the_split_replay(lab: HybridLab, tmp_path: Path):
    src = tmp_path / "src.iot"
    fio = ["fio", "--name=src", f"--filename={lab.fast}", "--rw=randread", "--bs=4k",
           "--direct=1", "--ioengine=psync", "--random_distribution=zipf:1.1", "--size=128M",
           f"--rate_iops={RATE}", "--rate_process=poisson", "--runtime=6",
           "--time_based"]  # fmt: skip
    subprocess.run([IOTAPE, "record", "-d", lab.fast, "-o", str(src), "--", *fio],
                   check=True, capture_output=True)  # fmt: skip
    out = tmp_path / "check"
    res = lab.command(
        [IOTAPE, "replay", "tiering-check", str(src), "--fast", lab.fast, "--slow", lab.slow,
         "-o", str(out), "--policy", "lru", "--unit", "4K", "--capacity", "256K",
         "--destroy-data-on", lab.fast, "--destroy-data-on", lab.slow, "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    assert json.loads((out / "result.json").read_text())["latency"] == r["latency"]
    share = r["split"]["fast_share_of_reads_writes"]
    assert 0.25 < share < 0.75, share  # both devices matter to the answer
    # Every request of the trace was replayed and recorded, also those whose completion
    # the kernel never reported on the throttled loop device (kept with the
    # complete_unseen flag: tiering_check._accounting). Exact, whatever the host.
    for name, acc in r["accounting"].items():
        assert acc["issued"] == acc["planned"], (name, acc)
        assert acc["recorded"] == acc["issued"], (name, acc)
        assert acc["lost"] == {}, (name, acc)
    lat = r["latency"]
    assert lat["measured"]["requests"] == r["accounting"]["tiered"]["recorded"]
    err = lat["error"]
    print(
        f"projection error: p50 {err['p50']:+.3f}, p99 {err['p99']:+.3f}, mean {err['mean']:+.3f}"
    )
    # Medians, not means: a stall of the shared virtual disk during one replay moves
    # its mean by tens of percent and its median hardly at all, so a single run can
    # be judged. The devices differ (the slow disk is a few times slower) and the
    # tiered run lies between them.
    p50 = {k: lat[k]["p50_ns"] for k in ("fast_only", "measured", "slow_only")}
    assert p50["slow_only"] > 2 * p50["fast_only"], p50
    assert p50["fast_only"] < p50["measured"] < p50["slow_only"], p50
    # The goal is 15 % on p50 and mean (bench/tiering_check.py measures it as the
    # median of rounds: met). One run's p50 is held to 30 %: a projection that
    # could not pass by chance (the pure devices are 3-10x apart).
    assert abs(err["p50"]) <= 0.30, err


def test_refuses_a_file_and_one_device_twice(lab: HybridLab, tmp_path: Path):
    src = tmp_path / "src.iot"
    subprocess.run([IOTAPE, "record", "-d", lab.fast, "-o", str(src), "--", "dd",
                    f"if={lab.fast}", "of=/dev/null", "bs=4k", "count=64", "iflag=direct"],
                   check=True, capture_output=True)  # fmt: skip
    for fast, slow, msg in (
        (lab.fast, lab.fast, "same device"),
        (str(tmp_path / "f.img"), lab.slow, "not a block device"),
    ):
        res = subprocess.run([IOTAPE, "replay", "tiering-check", str(src), "--fast", fast,
                              "--slow", slow, "-o", str(tmp_path / "c")],
                             capture_output=True, text=True)  # fmt: skip
        assert res.returncode != 0 and msg in res.stderr and res.stderr.count("\n") == 1
    assert not (tmp_path / "c").exists()
