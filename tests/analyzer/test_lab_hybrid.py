"""`iotape lab hybrid` (analyzer/lab): the three configurations end to end in CI size on
real loop devices, and the report's invariants (not its speeds): every byte the engine
moved seen by the recorder in its stream, the tier's and the cache's moves as the
engine counted them, the placement read back with checksums, the prediction written
before the cache and tier ran; and the sizing and the prediction's arithmetic alone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import need

from analyzer.lab import predict
from analyzer.lab.sizing import reference, size
from analyzer.tiering.events import Events
from iotape.errors import IotapeError

ROOT = Path(__file__).resolve().parents[2]
IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")


@pytest.mark.kernel
def test_three_configurations_end_to_end(kernel: None, tmp_path: Path) -> None:
    out = tmp_path / "lab"
    argv = [
        IOTAPE, "lab", "hybrid", "--out", str(out), "--db-mb", "48", "--mailboxes", "24",
        "--seconds", "3", "--unit-kb", "1024", "--stats-s", "0.5", "--migrate-s", "1",
        "--verify", "--json", "--db", str(tmp_path / "store.duckdb"),
    ]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
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
    assert (
        c["baseline"]["migrated_bytes"] == 0
        and "migration" not in c["baseline"]["checks"]["recorded_bytes"]
    )
    for key in ("tier", "cache"):
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
    assert len(made) == 3 and rep["devices"]["kind"] == "hdd"
    assert not [f for f in made if Path(f).exists() or f in loops or f in mounts]


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
    got = predict.predict(base, fast, p, threads=2, base_reads_per_s=100.0)
    # All but the first read hit: R' = (10 + 199 x 1) / 200 ms; the threads' other
    # time per read is 2 / 100 s - 10 ms = 10 ms.
    r_new = (10 + 199 * 1) / 200
    assert got["read_hit_ratio"] == pytest.approx(199 / 200)
    assert got["read_latency_ms"]["projected"] == pytest.approx(r_new)
    assert got["littles_law"]["other_time_per_read_ms"] == pytest.approx(10.0)
    assert got["littles_law"]["read_throughput_gain"] == pytest.approx(20 / (r_new + 10))
    assert p.unit == mib and not p.count_writes
