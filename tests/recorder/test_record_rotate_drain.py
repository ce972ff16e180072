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

from recorder.tracefile import open_trace, segments_of

pytestmark = pytest.mark.kernel

REC = Path(__file__).resolve().parents[2] / "recorder" / "build" / "iotape-rec"
ROTATE = 32 * 1024
CHUNK = 64  # records a chunk
RECORD, CHUNK_HEADER, FOOTER_MAX = 80, 24, 8192


def _completed_ios(name: str) -> int:
    fields = Path(f"/sys/block/{name}/stat").read_text().split()
    return int(fields[0]) + int(fields[4])


def test_one_drain_of_many_files_rotates_at_each_size(loop, tmp_path: Path) -> None:
    st = os.stat(loop.path)
    out, meta = tmp_path / "d.iot", tmp_path / "m.json"
    meta.write_text('{"host":"test"}')
    before = _completed_ios(loop.name)
    cmd = [str(REC), "-o", str(out), "--meta", str(meta), "--timer-ms", "5000"]
    cmd += ["--compress", "none", "--chunk-records", str(CHUNK), "--rotate-bytes", str(ROTATE)]
    cmd += ["--dev", f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"]
    rec = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert rec.stdout is not None
        assert json.loads(rec.stdout.readline())["type"] == "ready"
        fio = ["fio", "--name=drain", f"--filename={loop.path}", "--direct=1"]
        fio += ["--rw=randread", "--bs=4k", "--ioengine=io_uring", "--iodepth=4"]
        fio += ["--number_ios=3000", "--size=100%", "--output-format=terse"]
        subprocess.run(fio, check=True, capture_output=True)
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=60)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
    assert rec.returncode == 0, err
    completed = _completed_ios(loop.name) - before
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
