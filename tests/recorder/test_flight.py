"""The flight recorder's options and files without the kernel: --ring and its
rotation, --trigger checked by the loader's own parser, the control socket's
client against no recorder, a snapshot directory read as one trace, and the files
of an earlier ring capture kept as a snapshot (tests/recorder/test_record_ring.py
runs it against the kernel)."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
from conftest import need
from helpers import iotape

from base.errors import IotapeError
from recorder.capture.flight import (
    LOADER,
    Flight,
    check_trigger,
    control_path,
    keep_previous,
    request,
    snapshots_dir,
)
from recorder.capture.rotation import Rotation
from recorder.tracefile import RECORD_DTYPE, open_trace, segment_path, write_trace

HEADER = {"host": "h", "mono_start_ns": 1000, "wall_start_ns": 2000, "recorder": {"backend": "bpf"}}


@pytest.fixture
def loader() -> None:
    """The loader parses triggers: built by `make native` (a failure under CI)."""
    need(LOADER.exists(), f"the loader built at {LOADER} (make native)")


def _capture(out: Path, first: int, n_files: int) -> None:
    for i in range(first, first + n_files):
        r = np.zeros(3, dtype=RECORD_DTYPE)
        r["ts_complete_ns"] = np.arange(3) + i * 10 + 1
        header = {**HEADER, "segment": {"index": i, "start_ns": i * 10}}
        write_trace(segment_path(out, i), header, r, footer={"stop_reason": "rotate"})


def test_ring_rotates_a_tenth_of_its_window() -> None:
    r = Rotation.parse(None, None, None, None, "30m")
    assert r.keep_s == 1800 and r.every_s == 180
    assert r.loader_args() == ["--rotate-ms", "180000", "--keep-ms", "1800000"]
    r = Rotation.parse("1GiB", None, "10GiB", None, "1h")
    assert r.every_bytes == 1 << 30 and r.every_s == 0 and r.keep_s == 3600
    with pytest.raises(IotapeError, match="shorter than one --rotate"):
        Rotation.parse("2h", None, None, None, "1h")
    with pytest.raises(IotapeError, match="--ring 10M: not a duration"):
        Rotation.parse(None, None, None, None, "10M")


def test_flight_options(loader: None) -> None:
    ring = Rotation.parse(None, None, None, None, "10m")
    f = Flight.parse(ring, None, ["p99 > 50ms over 10s", "queue > 64"])
    assert f.after_s == 120
    assert f.loader_args(ring) == [
        "--snapshot-before-ms",
        "600000",
        "--snapshot-after-ms",
        "120000",
        "--trigger",
        "p99 > 50ms over 10s",
        "--trigger",
        "queue > 64",
    ]
    with pytest.raises(IotapeError, match="need --ring"):
        Flight.parse(Rotation(), "1m", [])
    assert not Flight.parse(Rotation(), None, []).enabled


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("p99 > 50", "a latency needs a unit"),
        ("p0 > 1ms", "a percentile is above p0"),
        ("latency > 1ms", "starts with pNN, max, avg, queue or iops"),
        ("queue = 64", "expected >, >=, < or <="),
        ("queue > 64ms", "queue is a plain number"),
        ("iops > 10 over 10ms", "must be 100ms to 1h"),
        ("max > 1s over 10s and more", "unexpected 'and more'"),
    ],
)
def test_bad_triggers_are_one_line(loader: None, expr: str, message: str) -> None:
    with pytest.raises(IotapeError) as e:
        check_trigger(expr)
    assert str(e.value).startswith(f"--trigger '{expr}': ") and message in str(e.value)
    assert "\n" not in str(e.value)
    for good in ("p99.9 >= 2.5ms over 5m", "avg<1us", "iops < 10 over 1h", "max > 1s"):
        check_trigger(good)


def test_control_without_a_recorder(tmp_path: Path) -> None:
    out = tmp_path / "ring.iot"
    assert control_path(out) == tmp_path / "ring.ctl"
    with pytest.raises(IotapeError, match="no recorder is writing"):
        request(out, "status")
    # A socket left by a recorder that died: nobody listens behind it.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(control_path(out)))
    s.close()
    with pytest.raises(IotapeError, match="no recorder is listening"):
        request(out, "snapshot")
    res = iotape("record", "--snapshot", "-o", str(out))
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_snapshot_directory_reads_as_one_trace(tmp_path: Path) -> None:
    out = tmp_path / "ring.iot"
    snap = snapshots_dir(out) / "20261126T000000.000Z-signal"
    snap.mkdir(parents=True)
    _capture(snap / "ring.iot", 4, 3)
    (snap / "snapshot.json").write_text("{}")
    with open_trace(snap) as t:
        assert len(t.read_all()) == 9
        assert t.header["sequence"]["first_index"] == 4
    (snapshots_dir(out) / "empty").mkdir()
    with pytest.raises(IotapeError, match="without trace files"):
        open_trace(snapshots_dir(out) / "empty")


def test_a_restarted_ring_keeps_the_earlier_files(tmp_path: Path) -> None:
    out = tmp_path / "ring.iot"
    assert keep_previous(out) is None
    _capture(out, 7, 2)
    kept = keep_previous(out)
    assert kept is not None and kept.parent == snapshots_dir(out)
    assert kept.name.endswith("-previous")
    assert sorted(p.name for p in kept.iterdir()) == ["ring-000007.iot", "ring-000008.iot"]
    assert not list(tmp_path.glob("ring-*.iot"))
    _capture(out, 0, 1)
    again = keep_previous(out)
    assert again is not None and again != kept and len(list(again.iterdir())) == 1
