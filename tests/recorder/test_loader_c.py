"""The C loader (recorder/build/iotape-rec) on its own: command line, output, real kernel."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import schemas

ROOT = Path(__file__).resolve().parents[2]
REC = ROOT / "recorder" / "build" / "iotape-rec"


@pytest.fixture(scope="module")
def rec() -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "recorder")], check=True)
    return REC


def read_trace(path: Path) -> tuple[dict, np.ndarray, dict]:
    b = path.read_bytes()
    assert b[:8] == b"IOTAPE\r\n"
    _, rsize, jlen, jcrc = struct.unpack_from("<IIII", b, 8)
    assert zlib.crc32(b[24 : 24 + jlen]) == jcrc
    header = json.loads(b[24 : 24 + jlen])
    pos, seq, payload, footer = 24 + (jlen + 7) // 8 * 8, 0, [], None
    while pos < len(b):
        (magic,) = struct.unpack_from("<I", b, pos)
        if magic == 0x4B4E4843:
            _, count, s, pcrc, hcrc = struct.unpack_from("<IIQII", b, pos)
            assert zlib.crc32(b[pos : pos + 20]) == hcrc and s == seq
            body = b[pos + 24 : pos + 24 + count * rsize]
            assert zlib.crc32(body) == pcrc
            payload.append(body)
            pos, seq = pos + 24 + count * rsize, seq + 1
        elif magic == 0x5A4B4843:
            # A compressed chunk (docs/trace-format.md), decoded here on its own as a
            # check of the C writer against the document, not against the reader.
            _, count, s, stored, codec, transform, zero, pcrc, hcrc = struct.unpack_from(
                "<IIQIBBHII", b, pos
            )
            assert zlib.crc32(b[pos : pos + 28]) == hcrc and s == seq and zero == 0
            body = b[pos + 32 : pos + 32 + stored]
            assert zlib.crc32(body) == pcrc and transform == 1
            name = {1: "zstd", 2: "lz4_raw"}[codec]
            planes = pa.Codec(name).decompress(body, decompressed_size=count * rsize)
            payload.append(_undo_delta_split(bytes(planes), count, rsize))
            pos, seq = pos + 32 + stored + (-stored) % 8, seq + 1
        else:
            assert magic == 0x544F4F46
            _, flen, fcrc, _ = struct.unpack_from("<IIII", b, pos)
            footer = json.loads(b[pos + 16 : pos + 16 + flen])
            assert zlib.crc32(b[pos + 16 : pos + 16 + flen]) == fcrc
            end = pos + 16 + (flen + 7) // 8 * 8
            assert struct.unpack_from("<Q", b, end)[0] == pos and b[end + 8 :] == b"IOTEND\r\n"
            break
    records = np.frombuffer(b"".join(payload), dtype=schemas.record_dtype())
    return header, records, footer


def _undo_delta_split(planes: bytes, n: int, rsize: int) -> bytes:
    """Byte j of record i is planes[j * n + i]; then the deltas, record by record."""
    out = bytearray(n * rsize)
    for j in range(rsize):
        out[j::rsize] = planes[j * n : (j + 1) * n]
    m = (1 << 64) - 1
    prev_done = prev_end = 0
    for i in range(n):
        at = i * rsize
        zq, zi, zc, zo = struct.unpack_from("<QQQQ", out, at)
        (size,) = struct.unpack_from("<I", out, at + 44)
        done = (prev_done + _unzigzag(zc)) & m
        issue = (done - _unzigzag(zi)) & m
        queue = (issue - _unzigzag(zq)) & m
        offset = (prev_end + _unzigzag(zo)) & m
        struct.pack_into("<QQQQ", out, at, queue, issue, done, offset)
        prev_done, prev_end = done, (offset + size) & m
    return bytes(out)


def _unzigzag(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "-o OUT.iot is required"),
        (["-o", "x.iot", "--meta", "m.json"], "--dev is required"),
        (["-o", "x.iot", "--meta", "m.json", "--dev", "7"], "--dev: '7'"),
        (["-o", "x.iot", "--meta", "m.json", "--dev", "7:0", "--op", "bogus"], "--op"),
        (["-o", "x.iot", "--meta", "m.json", "--dev", "7:0", "--ring-mb", "3"], "power of two"),
        (["-o", "x.iot", "--meta", "m.json", "--dev", "7:0", "--rule", "x"], "--rule"),
    ],
)
def test_usage_errors(rec: Path, tmp_path: Path, args: list[str], message: str) -> None:
    r = subprocess.run([str(rec), *args], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("iotape-rec: error: ") and message in r.stderr
    assert not (tmp_path / "x.iot").exists()


def test_bad_extents_line_named(rec: Path, tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text("{}")
    (tmp_path / "ext").write_text("# comment\n1 0 10 3 3\n1 20 10 3 3\n")
    r = subprocess.run(
        [str(rec), "-o", "x.iot", "--meta", "m.json", "--dev", "7:0", "--extents", "ext"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "ext: line 3:" in r.stderr
    assert not (tmp_path / "x.iot").exists()


needs_kernel = pytest.mark.kernel


def _kernel_available() -> bool:
    return (
        os.geteuid() == 0 and Path("/sys/kernel/btf/vmlinux").exists() and bool(shutil.which("fio"))
    )


@pytest.fixture
def loop_dev(tmp_path: Path):
    if not _kernel_available():
        if os.environ.get("CI") == "true":
            pytest.fail("needs root, BTF and fio")
        pytest.skip("needs root, BTF and fio")
    img = Path("/dev/shm") / f"iotape-test-{os.getpid()}.img"
    img.write_bytes(b"")
    os.truncate(img, 256 << 20)
    dev = subprocess.run(
        ["losetup", "-f", "--show", str(img)], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
        img.unlink(missing_ok=True)


@needs_kernel
def test_records_fio_on_loop(rec: Path, tmp_path: Path, loop_dev: str) -> None:
    st = os.stat(loop_dev)
    majmin = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    (tmp_path / "m.json").write_text('{"host":"test"}')
    out = tmp_path / "t.iot"
    p = subprocess.Popen(
        [str(rec), "-o", str(out), "--meta", str(tmp_path / "m.json"), "--dev", majmin],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = json.loads(p.stdout.readline())
        assert ready["type"] == "ready"
        fio = subprocess.run(
            [
                "fio",
                "--name=t",
                f"--filename={loop_dev}",
                "--direct=1",
                "--rw=randrw",
                "--bs=4k",
                "--size=16m",
                "--io_size=8m",
                "--ioengine=psync",
                "--output-format=json",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        p.send_signal(2)
        stdout, stderr = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, stderr
    done = json.loads(stdout.strip().splitlines()[-1])
    job = json.loads(fio.stdout)["jobs"][0]
    header, recs, footer = read_trace(out)
    assert header["host"] == "test" and header["mono_start_ns"] == ready["mono_start_ns"]
    assert done["type"] == "done" and footer["events"] == len(recs) == done["events"]
    assert footer["lost"] == {"ringbuf_full": 0, "inflight_full": 0, "recursion": 0}
    # Every request is a record, also the rare one whose completion the kernel never
    # reports: that one is kept, flagged, when its tag is reused, and counted.
    assert len(recs) == job["read"]["total_ios"] + job["write"]["total_ios"] == 2048
    unseen = recs["flags"] & (1 << schemas.bits("flag")["complete_unseen"]) != 0
    assert int(unseen.sum()) == footer["completion_unseen"]
    assert set(recs["offset"] // 4096) <= set(range(4096))
    assert set(recs["comm"]) == {b"fio"} and len(set(recs["pid"])) == 1
    assert (recs["ts_queue_ns"] > 0).all()
    assert (recs["ts_queue_ns"] <= recs["ts_issue_ns"]).all()
    assert (recs["ts_issue_ns"] <= recs["ts_complete_ns"]).all()
    assert (recs["bytes"] == 4096).all() and (recs["error"] == 0).all()
