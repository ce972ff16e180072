"""Files shaped like traces published elsewhere: comments, headers, CRLF, binary vscsi.

Each input is built here from the format's own definition (not from the
importer's tables), and compared with the import of the plain fixture.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import need
from import_helpers import TRACES, VSCSI_REQS, vscsi

import schemas
from base.errors import IotapeError
from recorder.importers.core import FORMATS, detect, import_trace
from recorder.tracefile import open_trace

OP = schemas.enum("op")
DATA = Path(__file__).resolve().parents[1] / "data" / "import"
# What blkparse prints above its events when asked for a header.
BLKPARSE_HEAD = (
    "#Maj,Mn CPU SeqNo   Time          PID   Act RWBS Sector + Size [Process]\n"
    "#------------------------------------------------------------------\n"
)
MSR_HEADER = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime"


def _import(
    tmp_path: Path, fmt: str, src: Path, name: str = "t.iot", **kw
) -> tuple[np.ndarray, dict]:
    out = tmp_path / name
    import_trace(fmt, [src], out, argv=["test"], force=True, **kw)
    with open_trace(out) as t:
        return t.read_all(), t.header


def _same(a: np.ndarray, b: np.ndarray) -> None:
    cols = ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns", "offset", "bytes", "op", "dev", "pid")
    assert len(a) == len(b) > 0
    for c in cols:
        assert (a[c] == b[c]).all(), c


@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_blkparse_text_with_comment_lines(tmp_path: Path, line_end: str) -> None:
    text = BLKPARSE_HEAD + (DATA / "blkparse-corners.txt").read_text()
    src = tmp_path / "blkparse.txt"
    src.write_bytes(text.replace("\n", line_end).encode())
    assert detect(src) == "blkparse"
    got, h = _import(tmp_path, "auto", src)
    want, _ = _import(tmp_path, "blkparse", DATA / "blkparse-corners.txt", "want.iot")
    _same(got, want)
    meta = h["metadata"]
    assert meta["ignored_lines"]["comment"] == 2
    assert meta["crlf_line_ends"] == (text.count("\n") if line_end == "\r\n" else 0)
    assert meta["self_check"]["ok"] is True


def test_blkparse_bad_line_keeps_its_file_line_number(tmp_path: Path) -> None:
    lines = (BLKPARSE_HEAD + (DATA / "blkparse-corners.txt").read_text()).splitlines()
    lines[4] = "  8,0    0        3     0.0000002xx  100  M   W 1008 + 8 [writer]"
    src = tmp_path / "bad.txt"
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(IotapeError, match=r"bad\.txt: line 5: field"):
        import_trace("blkparse", [src], tmp_path / "o.iot")
    assert not (tmp_path / "o.iot").exists()


def _msr_shaped(tmp_path: Path, line_end: str) -> Path:
    rows = (DATA / "msr.csv").read_text().splitlines()
    text = line_end.join(
        [
            "# MSR Cambridge, hm volume, three requests",
            MSR_HEADER,
            rows[0],
            "",
            rows[1],
            "  ",
            rows[2],
        ]
    )
    src = tmp_path / "msr-shaped.csv"
    src.write_bytes((text + line_end).encode())
    return src


@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_csv_with_header_comment_blank_lines_and_crlf(tmp_path: Path, line_end: str) -> None:
    src = _msr_shaped(tmp_path, line_end)
    assert detect(src) == "msr"
    got, h = _import(tmp_path, "auto", src)
    want, _ = _import(tmp_path, "msr", DATA / "msr.csv", "want.iot")
    _same(got, want)
    assert h["metadata"]["ignored_lines"] == {"comment": 1, "header": 1, "blank": 2}
    assert h["metadata"]["crlf_line_ends"] == (7 if line_end == "\r\n" else 0)
    assert h["metadata"]["skipped"] == 0


def test_csv_header_only_counts_on_the_first_line(tmp_path: Path) -> None:
    # A second header, in the middle, is a bad record: named by its line.
    rows = (DATA / "alibaba.csv").read_text().splitlines()
    header = "device_id,opcode,offset,length,timestamp"
    src = tmp_path / "a.csv"
    src.write_text("\n".join([header, rows[0], header, rows[1]]) + "\n")
    with pytest.raises(IotapeError, match=r"a\.csv: line 3: field offset: 'offset' is not"):
        import_trace("alibaba", [src], tmp_path / "o.iot")
    # As a spreadsheet saves it: a byte-order mark, CRLF line ends.
    src.write_bytes(b"\xef\xbb\xbf" + ("\r\n".join([header, *rows]) + "\r\n").encode())
    got, h = _import(tmp_path, "auto", src)
    want, _ = _import(tmp_path, "alibaba", DATA / "alibaba.csv", "want.iot")
    _same(got, want)
    assert h["metadata"]["format"] == "alibaba"
    assert h["metadata"]["ignored_lines"]["header"] == 1


def test_bad_value_after_ignored_lines_names_the_file_line(tmp_path: Path) -> None:
    src = tmp_path / "m.csv"
    rows = (DATA / "msr.csv").read_text().splitlines()
    src.write_text("\n".join(["# c", MSR_HEADER, "", rows[0], rows[1].replace("512", "x5")]) + "\n")
    with pytest.raises(IotapeError, match=r"m\.csv: line 5: field size: 'x5' is not a number"):
        import_trace("msr", [src], tmp_path / "o.iot")


def test_fio_iolog_with_comments_and_crlf(tmp_path: Path) -> None:
    lines = (DATA / "fio-v3.log").read_text().splitlines()
    src = tmp_path / "job.log"
    src.write_bytes("\r\n".join([lines[0], "# from a job file", "", *lines[1:]]).encode() + b"\r\n")
    got, h = _import(tmp_path, "auto", src)
    assert h["metadata"]["format"] == "fio-iolog"
    assert got["ts_issue_ns"].tolist() == [5_000_000, 17_000_000]
    assert h["metadata"]["ignored_lines"] == {"comment": 1, "header": 0, "blank": 1}


@pytest.mark.parametrize("version", [1, 2])
def test_vscsi_files_with_newline_bytes(tmp_path: Path, version: int) -> None:
    src = tmp_path / "w84.vscsitrace"
    src.write_bytes(vscsi(version))
    assert b"\n" in src.read_bytes()[:16]
    assert detect(src) == "vscsi"
    recs, h = _import(tmp_path, "auto", src)
    assert len(recs) == 40
    assert h["metadata"]["format"] == "vscsi"
    ops = {0x0A: OP["write"], 0x28: OP["read"], 0x2A: OP["write"]}
    # Times count from the earliest request: record 0, at 1,000,010 µs.
    for i, r in enumerate(recs[:6]):
        cmd, lbn, size, ts = VSCSI_REQS[i % 3]
        issue = (ts + 1000 * i - 1_000_010) * 1000
        lat = (25 + i) * 1000 if version == 2 else 0
        assert int(r["op"]) == ops[cmd]
        assert (int(r["offset"]), int(r["bytes"])) == ((lbn + i) * 512, size)
        assert (int(r["ts_issue_ns"]), int(r["ts_complete_ns"])) == (issue, issue + lat)


def test_vscsi_detection_checks_every_record(tmp_path: Path) -> None:
    data = bytearray(vscsi(1))
    data[3 * 32 + 15] = 0x07  # record 3's version
    src = tmp_path / "damaged.vscsi"
    src.write_bytes(bytes(data))
    with pytest.raises(IotapeError) as e:
        detect(src)
    assert "vscsi: not a vscsi record (v1: byte 96: version 0x0700" in str(e.value)


def test_vscsi_time_out_of_range_is_a_bad_record(tmp_path: Path) -> None:
    data = bytearray(vscsi(2, 4))
    struct.pack_into("<Q", data, 2 * 40 + 24, 1 << 63)  # record 2's ts
    src = tmp_path / "v.vscsi"
    src.write_bytes(bytes(data))
    with pytest.raises(IotapeError, match=r"v\.vscsi: byte 80: field ts: \d+ is out of range"):
        import_trace("vscsi", [src], tmp_path / "o.iot")
    recs, h = _import(tmp_path, "vscsi", src, skip_bad=1)
    assert len(recs) == 3 and h["metadata"]["skipped"] == 1


# One file for every format `iotape import` reads, in the shape found elsewhere.
def _example(fmt: str, tmp_path: Path) -> Path:
    plain = {
        "blktrace": TRACES / "blktrace-nvme" / "sample.blktrace.0",
        "disksim": TRACES / "disksim-websearch" / "wsrch-small.trace",
        "fio-iolog": DATA / "fio-v3.log",
        "fiu": DATA / "fiu.txt",
        "msr": DATA / "msr.csv",
        "spc": DATA / "spc.csv",
        "tencent": DATA / "tencent.csv",
    }
    src = tmp_path / fmt
    if fmt in plain:
        return plain[fmt]
    if fmt == "vscsi":
        src.write_bytes(vscsi(2))
    elif fmt == "blkparse":
        src.write_text(BLKPARSE_HEAD + (DATA / "blkparse-corners.txt").read_text())
    elif fmt == "alibaba":
        src.write_text(
            "device_id,opcode,offset,length,timestamp\n" + (DATA / "alibaba.csv").read_text()
        )
    return src


@pytest.mark.parametrize("fmt", FORMATS)
def test_auto_recognises_every_format(tmp_path: Path, fmt: str) -> None:
    assert detect(_example(fmt, tmp_path)) == fmt


def test_auto_lists_each_format_and_why_it_was_rejected(tmp_path: Path) -> None:
    src = tmp_path / "notes.txt"
    src.write_text("# my notes\nread 4096 at 0\nwrite 512 at 8\n")
    out = tmp_path / "o.iot"
    with pytest.raises(IotapeError) as e:
        import_trace("auto", [src], out)
    msg = str(e.value)
    assert msg.startswith(f"{src}: cannot tell the format")
    for fmt in FORMATS:
        assert f"\n  {fmt}: " in msg
    assert "blkparse: line 2: 'read 4096 at 0' is not a blkparse event" in msg
    assert "msr: line 2: field" in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_auto_on_a_zstd_file_larger_than_what_it_reads(tmp_path: Path) -> None:
    # Detection reads 64 KiB, which once left zstd blocked on a full pipe, waited for.
    need(shutil.which("zstd") is not None, "the zstd tool (Debian package zstd)")
    text = (TRACES / "disksim-websearch" / "wsrch-small.trace").read_bytes() + b"\n"
    src = tmp_path / "big.trace"
    src.write_bytes(text * 4)
    subprocess.run(["zstd", "-q", "--rm", str(src)], check=True)
    out = tmp_path / "o.iot"
    res = subprocess.run(
        [sys.executable, "-m", "iotape", "import", "auto", f"{src}.zst", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    with open_trace(out) as t:
        assert t.footer["events"] == 4 * text.count(b"\n")
        assert t.header["metadata"]["format"] == "disksim"


def test_cli_auto_failure_is_a_clear_error(tmp_path: Path) -> None:
    src = tmp_path / "x.bin"
    src.write_bytes(bytes(range(256)) * 4)
    res = subprocess.run(
        [sys.executable, "-m", "iotape", "import", "auto", str(src), "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith(f"iotape: error: {src}: cannot tell the format")
    assert "vscsi: not a vscsi record" in res.stderr
    assert not (tmp_path / "o").exists()
