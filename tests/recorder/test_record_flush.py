"""One record per application flush, checked against the kernel's own counts.

A loop device set to `write back` (the default on 6.18, set here anyway) runs
the flush machinery as a disk with a volatile cache does: the fsync's empty write
waits for a separate device flush request (REQ_OP_FLUSH). The kernel counts the
first as a zero-sector write and the second as a flush (/sys/block/X/stat fields
5 and 16, /proc/diskstats 8 and 19). The trace must hold one op=flush record per
device flush, attributed to fio and carrying that flush's dispatch as its issue
time, and no second record for the device's request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import iotape, trace_records

import schemas
from recorder.tracefile import open_trace

pytestmark = pytest.mark.kernel

OP = schemas.enum("op")
FLAG = {k: 1 << v for k, v in schemas.bits("flag").items()}


def _stat(name: str) -> tuple[int, int]:
    """(writes, flushes) the kernel has completed on a disk."""
    f = Path(f"/sys/block/{name}/stat").read_text().split()
    return int(f[4]), int(f[15])


@pytest.mark.parametrize("scheduler", ["none", "mq-deadline"])
def test_one_record_per_kernel_flush(loop, tmp_path: Path, scheduler: str) -> None:
    q = Path(f"/sys/block/{loop.name}/queue")
    (q / "write_cache").write_text("write back")
    assert (q / "write_cache").read_text().strip() == "write back"
    (q / "scheduler").write_text(scheduler)
    out = tmp_path / "f.iot"
    w0, f0 = _stat(loop.name)
    res = iotape(
        "record", "-o", str(out), "-d", loop.path, "--",
        "fio", "--name=f", f"--filename={loop.path}", "--rw=write", "--bs=4k",
        "--size=2M", "--fsync=4", "--ioengine=psync",
        timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    w1, f1 = _stat(loop.name)
    kernel_writes, kernel_flushes = w1 - w0, f1 - f0
    assert kernel_flushes >= 100  # 128 fsyncs asked for: the machinery ran

    r = trace_records(out)
    flush = r["op"] == OP["flush"]
    footer = open_trace(out).footer
    assert footer is not None
    assert int(flush.sum()) == kernel_flushes
    assert footer["device_flushes"] == {"issued": kernel_flushes, "linked": kernel_flushes}
    # Each is the application's: fio's pid, its empty PREFLUSH write, linked to
    # the device flush's dispatch; none is the device's request on its own.
    f = r[flush]
    assert set(f["comm"].tolist()) == {b"fio"} and (f["pid"] > 0).all()
    assert ((f["flags"] & FLAG["preflush"]) != 0).all()
    assert ((f["flags"] & FLAG["device_flush"]) == 0).all()
    assert (f["bytes"] == 0).all()
    assert ((f["ts_queue_ns"] > 0) & (f["ts_queue_ns"] <= f["ts_issue_ns"])).all()
    assert (f["ts_issue_ns"] <= f["ts_complete_ns"]).all()
    # The kernel's writes are the data writes plus the flushes' empty writes.
    assert int((r["op"] == OP["write"]).sum()) + int(flush.sum()) == kernel_writes


def test_no_flush_without_a_write_cache(loop, tmp_path: Path) -> None:
    """Write-through: the block layer ends an fsync's empty write before it is a
    request; nothing reaches the device and nothing is recorded as a flush."""
    q = Path(f"/sys/block/{loop.name}/queue")
    (q / "write_cache").write_text("write through")
    assert (q / "write_cache").read_text().strip() == "write through"
    out = tmp_path / "f.iot"
    _, f0 = _stat(loop.name)
    res = iotape(
        "record", "-o", str(out), "-d", loop.path, "--",
        "fio", "--name=f", f"--filename={loop.path}", "--rw=write", "--bs=4k",
        "--size=512k", "--fsync=4", "--ioengine=psync",
        timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    _, f1 = _stat(loop.name)
    r = trace_records(out)
    assert f1 - f0 == 0
    assert int((r["op"] == OP["flush"]).sum()) == 0
    assert int((r["op"] == OP["write"]).sum()) == 128


def test_ftrace_backend_one_record_per_flush(loop, tmp_path: Path) -> None:
    """The ftrace fallback reads the blk tracer's events, paired as a blktrace import:
    the same model, the device flush giving the fsync's record its issue time."""
    q = Path(f"/sys/block/{loop.name}/queue")
    (q / "write_cache").write_text("write back")
    out = tmp_path / "f.iot"
    _, f0 = _stat(loop.name)
    res = iotape(
        "record", "--backend", "ftrace", "-o", str(out), "-d", loop.path, "--",
        "fio", "--name=f", f"--filename={loop.path}", "--rw=write", "--bs=4k",
        "--size=512k", "--fsync=4", "--ioengine=psync",
        timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    _, f1 = _stat(loop.name)
    r = trace_records(out)
    f = r[r["op"] == OP["flush"]]
    footer = open_trace(out).footer
    assert footer is not None
    assert f1 - f0 >= 25 and len(f) == f1 - f0
    assert footer["device_flushes"] == {"issued": f1 - f0, "linked": f1 - f0}
    assert (f["pid"] > 0).all() and ((f["flags"] & FLAG["preflush"]) != 0).all()
    assert (f["ts_issue_ns"] > 0).all()


def test_bpftrace_backend_one_record_per_flush(loop, tmp_path: Path) -> None:
    """The bpftrace fallback sees only requests that passed block_io_start: the
    fsync's empty write (completing as a sizeless `WS`), never the device's flush.
    It is the flush record, once; its issue time is unknown there."""
    q = Path(f"/sys/block/{loop.name}/queue")
    (q / "write_cache").write_text("write back")
    out = tmp_path / "f.iot"
    _, f0 = _stat(loop.name)
    res = iotape(
        "record", "--backend", "bpftrace", "-o", str(out), "-d", loop.path, "--",
        "fio", "--name=f", f"--filename={loop.path}", "--rw=write", "--bs=4k",
        "--size=512k", "--fsync=4", "--ioengine=psync",
        timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    _, f1 = _stat(loop.name)
    r = trace_records(out)
    f = r[r["op"] == OP["flush"]]
    assert f1 - f0 >= 25 and len(f) == f1 - f0
    assert set(f["comm"].tolist()) == {b"fio"} and ((f["flags"] & FLAG["preflush"]) != 0).all()
    w = r[r["op"] == OP["write"]]
    assert len(w) == 128 and (w["bytes"] > 0).all()
