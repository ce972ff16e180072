"""`--backend ftrace` against the real kernel: the fio run's I/O, exactly, and a clean tracefs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import need
from helpers import fio_args, fio_multiset, trace_multiset, trace_records

from base.errors import IotapeError
from recorder.capture import ftrace_backend, labels
from recorder.capture import record as rec

TRACEFS = ftrace_backend.TRACEFS


def _settings() -> dict[str, str]:
    ftrace_backend.ensure_tracefs()
    names = ["current_tracer", "trace_clock", "options/blk_classic", "buffer_size_kb"]
    return {n: (TRACEFS / n).read_text() for n in names}


def _restored(before: dict[str, str]) -> dict[str, str]:
    """`before` as it reads once restored: an unexpanded buffer comes back at the
    size it would have expanded to (tracefs rounds a size to whole pages)."""
    out = dict(before)
    size = before["buffer_size_kb"]
    if "(expanded:" in size:
        want = int(ftrace_backend.restorable("buffer_size_kb", size))
        now = int((TRACEFS / "buffer_size_kb").read_text())
        out["buffer_size_kb"] = (TRACEFS / "buffer_size_kb").read_text()
        assert want <= now <= want + 8, (size, now)
    return out


def test_an_unexpanded_buffer_is_restored_to_its_expanded_size() -> None:
    # What a freshly booted kernel shows before anyone has traced.
    assert ftrace_backend.restorable("buffer_size_kb", "7 (expanded: 1408)") == "1408"
    # As read raw from tracefs, with its newline (this failed on a fresh boot).
    assert ftrace_backend.restorable("buffer_size_kb", "7 (expanded: 1408)\n") == "1408"
    assert ftrace_backend.restorable("buffer_size_kb", "16387") == "16387"
    clocks = "local global counter uptime perf [mono] mono_raw boot tai x86-tsc"
    assert ftrace_backend.restorable("trace_clock", clocks) == "mono"


def _record(opts: rec.RecordOptions) -> rec.RecordResult:
    devs = rec.validate(opts)
    extents, streams, summary = labels.label_extents(opts.labels, devs)
    meta = rec.build_meta(opts, devs, [], streams, summary)
    return ftrace_backend.record(opts, devs, meta, extents)


@pytest.mark.kernel
def test_ftrace_capture_matches_fio_log(loop, tmp_path: Path) -> None:
    need(Path("/sys/block", loop.name, "trace", "enable").exists(), "CONFIG_BLK_DEV_IO_TRACE")
    need(shutil.which("fio") is not None, "fio")
    before = _settings()
    log, out = tmp_path / "fio.log", tmp_path / "t.iot"
    opts = rec.RecordOptions(
        devices=[loop.path],
        output=out,
        backend="ftrace",
        command=fio_args(loop.path, log, ios=2000),
    )
    result = _record(opts)
    assert result.command_exit == 0
    assert _settings() == _restored(before)
    assert (Path("/sys/block", loop.name, "trace", "enable").read_text().strip()) == "0"
    recs = trace_records(out)
    expected = fio_multiset(log)
    assert sum(expected.values()) == 2000
    assert trace_multiset(recs) == expected
    assert set(recs["comm"].tolist()) == {b"fio"}
    assert (recs["ts_queue_ns"] <= recs["ts_issue_ns"]).all()
    assert (recs["ts_issue_ns"] <= recs["ts_complete_ns"]).all()
    assert result.summary["lost"] == {"ring_overrun": 0}
    assert result.summary["unpaired"] == {}


@pytest.mark.kernel
def test_ftrace_restores_settings_on_failure(loop, tmp_path: Path) -> None:
    need(Path("/sys/block", loop.name, "trace", "enable").exists(), "CONFIG_BLK_DEV_IO_TRACE")
    before = _settings()
    opts = rec.RecordOptions(
        devices=[loop.path],
        output=tmp_path / "t.iot",
        backend="ftrace",
        command=["/nonexistent/command"],
    )
    with pytest.raises(IotapeError, match="cannot run"):
        _record(opts)
    assert _settings() == _restored(before)
    assert not (tmp_path / "t.iot").exists()
