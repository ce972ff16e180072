"""--rotate-bytes holds when one drain reads many files' worth of records.

A loader kept off the CPU (a loaded host, CI beside other work) reads the rings
rarely, and one drain then holds thousands of records. The size rotation used to be
checked at the drain's end, so that drain's records all went into one file far past
--rotate, and the next files got none. It is now made at the chunk that reaches the
size. The loader's drain timer at 5 s (--timer-ms) makes the one large drain on
purpose: every record of the job arrives after its stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import completed_ios, finish_loader

from recorder.tracefile import open_trace, segments_of

pytestmark = pytest.mark.kernel

REC = Path(__file__).resolve().parents[2] / "recorder" / "build" / "iotape-rec"
ROTATE = 32 * 1024
CHUNK = 64  # records a chunk
RECORD, CHUNK_HEADER, FOOTER_MAX = 80, 24, 8192


def _capture(loop, out: Path, rotate: list[str], fio: list[str]) -> None:
    """The loader on LOOP with its drain timer at 5 s and ROTATE, while FIO runs,
    stopped with SIGINT: every record of the job is read after the stop."""
    st = os.stat(loop.path)
    meta = out.with_suffix(".json")
    meta.write_text('{"host":"test"}')
    cmd = [str(REC), "-o", str(out), "--meta", str(meta), "--timer-ms", "5000"]
    cmd += ["--compress", "none", "--chunk-records", str(CHUNK), *rotate]
    cmd += ["--dev", f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"]
    rec = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert rec.stdout is not None
        assert json.loads(rec.stdout.readline())["type"] == "ready"
        base = ["fio", "--name=drain", f"--filename={loop.path}", "--direct=1"]
        base += ["--rw=randread", "--bs=4k", "--ioengine=io_uring", "--iodepth=4"]
        subprocess.run([*base, *fio, "--output-format=terse"], check=True, capture_output=True)
        rec.send_signal(signal.SIGINT)
    finally:
        finish_loader(rec, 60)


def test_one_drain_of_many_files_rotates_at_each_size(loop, tmp_path: Path) -> None:
    out = tmp_path / "d.iot"
    before = completed_ios(loop.name)
    _capture(loop, out, ["--rotate-bytes", str(ROTATE)], ["--number_ios=3000", "--size=100%"])
    completed = completed_ios(loop.name) - before
    files = segments_of(out)
    footers = [open_trace(f).footer for f in files]
    assert all(f is not None for f in footers)
    # Every file but the last closes at the chunk that reached the size: at most one
    # chunk past it, and the capture spread over as many files as its bytes need.
    most = ROTATE + CHUNK_HEADER + CHUNK * RECORD + FOOTER_MAX
    assert all(f.stat().st_size <= most for f in files[:-1]), [f.stat().st_size for f in files]
    assert len(files) >= completed * RECORD // most
    assert [f["stop_reason"] for f in footers if f] == ["rotate"] * (len(files) - 1) + ["signal"]
    assert sum(f["events"] for f in footers if f) == completed >= 3000


def test_one_drain_of_many_windows_rotates_at_each_window(loop, tmp_path: Path) -> None:
    """--rotate-ms 100 over 1 s of requests read in one drain after the stop: a file
    for each 100 ms window of completions, as if the loader had read them in time."""
    out = tmp_path / "w.iot"
    before = completed_ios(loop.name)
    fio = ["--rate_iops=2000", "--time_based", "--runtime=1"]
    _capture(loop, out, ["--rotate-ms", "100"], fio)
    completed = completed_ios(loop.name) - before
    files = segments_of(out)
    assert len(files) >= 9
    starts = [open_trace(f).header["segment"]["start_ns"] for f in files]
    # whole windows from the capture's start, one file each (none for a window
    # without a request: fio starting)
    assert starts[0] == 0 and all(s % 100_000_000 == 0 for s in starts), starts
    assert starts == sorted(set(starts)), starts
    events = 0
    for f, at in zip(files, starts, strict=True):
        done = open_trace(f).read_all()["ts_complete_ns"]
        assert ((done >= at) & (done < at + 100_000_000)).all(), f
        events += len(done)
    assert events == completed
