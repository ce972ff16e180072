"""`iotape record --rotate/--keep/--keep-bytes/--max-bytes` against the real kernel:
every file a complete trace, and the files together exactly the capture (the kernel's
own completion count, /sys/block/DEV/stat, against the events summed over files)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers import fio_args, fio_multiset, iotape, trace_multiset

from recorder.tracefile import open_trace, segments_of

PROGRESS = re.compile(r"^[\d,]+ events  [\d,]+/s  ")  # iotape/commands/record.py's status

pytestmark = pytest.mark.kernel


def _completed(name: str) -> int:
    fields = Path(f"/sys/block/{name}/stat").read_text().split()
    return int(fields[0]) + int(fields[4])


def _record(out: Path, loop, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    # Plain chunks unless a test names a codec: these tests reason about file sizes in
    # records (80 bytes each); compressed, a request takes 8-15 bytes.
    codec = () if "--compress" in args else ("--compress", "none")
    res = iotape("record", "-o", str(out), "-d", loop.path, "--json", *codec, *args, timeout=300)
    if ok:
        assert res.returncode == 0, res.stderr
    return res


def _each_file_checks(out: Path) -> list[Path]:
    files = segments_of(out)
    for f in files:
        res = iotape("trace", "check", str(f))
        assert res.returncode == 0, f"{f}: {res.stdout}{res.stderr}"
    return files


def _done(res: subprocess.CompletedProcess) -> dict:
    """The --json summary: the last line of stdout (the traced command's output before it)."""
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("codec", "size"), [("none", "128KiB"), ("auto", "16KiB")])
def test_rotate_by_size_no_gap_no_duplicate(loop, tmp_path: Path, codec: str, size: str) -> None:
    out, log = tmp_path / "r.iot", tmp_path / "fio.log"
    before = _completed(loop.name)
    args = ("--compress", codec, "--rotate", size, "--chunk-records", "128", "--")
    _record(out, loop, *args, *fio_args(loop.path, log, ios=12000, iodepth=4))
    completed = _completed(loop.name) - before
    files = _each_file_checks(out)
    assert len(files) >= 4
    per_file = [open_trace(f).footer for f in files]
    assert all(f is not None and sum(f["lost"].values()) == 0 for f in per_file)
    assert [f["stop_reason"] for f in per_file if f] == ["rotate"] * (len(files) - 1) + [
        "command-exit"
    ]
    assert sum(f["events"] for f in per_file if f) == completed > 5000
    # The sequence is the capture: every fio request once, none twice, across the seams.
    with open_trace(out) as t:
        recs = t.read_all()
        assert t.footer is not None and t.footer["events"] == completed
    assert trace_multiset(recs) == fio_multiset(log)
    # A single-file capture of the same job holds as many events.
    single, log2 = tmp_path / "one.iot", tmp_path / "fio2.log"
    _record(single, loop, "--", *fio_args(loop.path, log2, ios=12000, iodepth=4))
    assert len(open_trace(single).read_all()) == len(recs)
    info = json.loads(iotape("trace", "info", "--json", str(out), check=True).stdout)
    assert info["events"] == completed and len(info["sequence"]["files"]) == len(files)
    db = f"duckdb://{tmp_path / 'db'}"
    res = iotape("ingest", str(out), "--db", db)
    assert res.returncode == 0 and f"{completed:,} events" in res.stdout + res.stderr, res.stderr


def test_rotate_by_time(loop, tmp_path: Path) -> None:
    out = tmp_path / "t.iot"
    before = _completed(loop.name)
    fio = [*fio_args(loop.path, tmp_path / "f.log", ios=100000, iodepth=2)]
    fio += ["--rate_iops=2000", "--time_based", "--runtime=2"]
    _record(out, loop, "--rotate", "300ms", "--", *fio)
    completed = _completed(loop.name) - before
    files = _each_file_checks(out)
    assert 5 <= len(files) <= 9
    # Each file is one 300 ms window of completions, wherever the loader read them
    # (a drain the host delayed holds records of the next window: they go there).
    starts = [open_trace(f).header["segment"]["start_ns"] for f in files]
    # whole windows from the capture's start, one file each (none for a window
    # without a request: fio starting)
    assert starts[0] == 0 and all(s % 300_000_000 == 0 for s in starts), starts
    assert starts == sorted(set(starts)), starts
    for f, at in zip(files, starts, strict=True):
        done = open_trace(f).read_all()["ts_complete_ns"]
        assert ((done >= at) & (done < at + 300_000_000)).all(), f
    assert open_trace(out).footer["events"] == completed


def test_keep_ring_and_keep_bytes(loop, tmp_path: Path) -> None:
    out = tmp_path / "k.iot"
    before = _completed(loop.name)
    fio = fio_args(loop.path, tmp_path / "f.log", ios=20000, iodepth=4)
    res = _record(
        out, loop, "--rotate", "64KiB", "--chunk-records", "64", "--keep", "3", "--", *fio
    )
    done = _done(res)
    assert done["events"] == _completed(loop.name) - before
    files = _each_file_checks(out)
    assert len(files) == 3 and done["files"]["deleted"] == done["files"]["last"] - 2
    with open_trace(out) as t:
        assert t.header["sequence"]["first_index"] == done["files"]["last"] - 2
        assert t.footer is not None and 0 < t.footer["events"] < done["events"]
    ring = tmp_path / "kb.iot"
    fio = fio_args(loop.path, tmp_path / "g.log", ios=20000, iodepth=4)
    args = ("--rotate", "64KiB", "--chunk-records", "64", "--keep-bytes", "256KiB", "--")
    _record(ring, loop, *args, *fio)
    on_disk = sum(f.stat().st_size for f in _each_file_checks(ring))
    assert on_disk <= 256 << 10, on_disk


def test_max_bytes_stops_cleanly(loop, tmp_path: Path) -> None:
    out = tmp_path / "m.iot"
    fio = [*fio_args(loop.path, tmp_path / "f.log", ios=10**6, iodepth=4)]
    res = _record(out, loop, "--rotate", "256KiB", "--max-bytes", "1MiB", "--", *fio, ok=False)
    assert res.returncode == 0, res.stderr
    done = _done(res)
    assert done["stop_reason"] == "max-bytes"
    assert "stopped at --max-bytes" in res.stderr
    files = _each_file_checks(out)
    total = sum(f.stat().st_size for f in files)
    assert (1 << 20) * 0.3 < total <= 1 << 20, total
    assert open_trace(out).footer["events"] == done["events"]


def test_full_disk_mid_rotation_leaves_every_file_valid(loop, small_mount, tmp_path: Path) -> None:
    where = small_mount(600)
    out, log = where / "full.iot", tmp_path / "fio.log"
    fio = fio_args(loop.path, log, ios=50000, iodepth=4)
    res = _record(out, loop, "--rotate", "100KiB", "--chunk-records", "128", "--", *fio, ok=False)
    assert res.returncode == 2, res.stderr
    # A capture past a second prints a status line a second (stderr not a terminal):
    # on a loaded host this one did. The error is the only other line.
    lines = [ln for ln in res.stderr.strip().splitlines() if not PROGRESS.match(ln)]
    assert len(lines) == 1 and "No space left" in lines[0], res.stderr
    files = _each_file_checks(out)
    assert len(files) >= 3
    with open_trace(out) as t:
        recs = t.read_all()
    assert len(recs) > 0 and not (trace_multiset(recs) - fio_multiset(log))


def test_next_file_cannot_be_made(loop, small_mount, tmp_path: Path) -> None:
    # Room for the directory, the footer's reserve (.n.iot.reserve), the control
    # socket (n.ctl) and two files: the third cannot be created.
    where = small_mount(64 << 10, "nr_inodes=5")
    out, log = where / "n.iot", tmp_path / "fio.log"
    fio = fio_args(loop.path, log, ios=20000, iodepth=4)
    res = _record(out, loop, "--rotate", "64KiB", "--chunk-records", "64", "--", *fio, ok=False)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "n-000002.iot: cannot write the next file" in lines[0], lines
    files = _each_file_checks(out)
    assert [f.name for f in files] == ["n-000000.iot", "n-000001.iot"]
    with open_trace(out) as t:
        assert t.footer is not None and t.footer["stop_reason"] == "disk-full"
        recs = t.read_all()
    assert len(recs) > 0 and not (trace_multiset(recs) - fio_multiset(log))
