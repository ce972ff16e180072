"""blktrace (binary) and blkparse (text) imports: the public sample and every corner."""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import need
from import_helpers import CAT, SDA, TRACES, notify_comm, notify_time, trace

import schemas
from base.errors import IotapeError
from recorder.importers import blktrace as bt
from recorder.importers.core import import_trace
from recorder.tracefile import open_trace

OP = schemas.enum("op")
FLAG = {k: 1 << v for k, v in schemas.bits("flag").items()}
SAMPLE = TRACES / "blktrace-nvme" / "sample.blktrace.0"
DATA = Path(__file__).resolve().parents[1] / "data" / "import"


def _raw_actions(path: Path) -> Counter:
    """An independent count of the file's actions: walk the records by pdu_len."""
    data = path.read_bytes()
    out: Counter = Counter()
    off = 0
    while off < len(data):
        action, pdu_len = struct.unpack_from("<I", data, off + 28)[0], data[off + 46]
        pdu_len = struct.unpack_from("<H", data, off + 46)[0]
        if not (action >> 16) & bt.TC_NOTIFY:
            out[bt.ACTIONS[action & 0xFF]] += 1
        off += 48 + pdu_len
    return out


def _import(tmp_path: Path, fmt: str, *paths: Path, **kw) -> tuple[np.ndarray, dict]:
    out = tmp_path / "t.iot"
    import_trace(fmt, list(paths), out, argv=["test"], **kw)
    with open_trace(out) as t:
        return t.read_all(), t.header


def test_public_sample_pairs_every_request(tmp_path: Path) -> None:
    raw = _raw_actions(SAMPLE)
    assert raw["Q"] == raw["D"] == raw["C"] > 0
    recs, header = _import(tmp_path, "blktrace", SAMPLE)
    assert len(recs) == raw["C"]
    meta = header["metadata"]
    assert meta["unpaired"] == {}
    assert meta["remaps"] == raw["A"]
    assert (recs["ts_queue_ns"] <= recs["ts_issue_ns"]).all()
    assert (recs["ts_issue_ns"] < recs["ts_complete_ns"]).all()
    assert set(recs["dev"].tolist()) == {(259 << 20) | 0}
    assert set(recs["op"].tolist()) == {OP["read"]}
    assert (recs["flags"] & FLAG["readahead"]).all()
    assert (recs["offset"] % 512 == 0).all() and set(recs["bytes"].tolist()) == {4096}
    assert header["recorder"]["backend"] == "import:blktrace"
    assert header["devices"][0]["name"] == "blktrace:259:0"
    # The trace starts at its first event (a remap), 184 ns before the first queue.
    assert header["mono_start_ns"] == 0 and recs["ts_queue_ns"].min() == 184


def test_blkparse_text_of_the_sample_matches_the_binary_import(tmp_path: Path) -> None:
    need(shutil.which("blkparse") is not None, "blkparse (Debian package blktrace)")
    text = tmp_path / "sample.txt"
    with SAMPLE.open("rb") as f, text.open("wb") as out:
        subprocess.run(["blkparse", "-i", "-"], stdin=f, stdout=out, check=True)
    from_text, header = _import(tmp_path, "auto", text)
    assert header["metadata"]["self_check"]["ok"] is True
    (tmp_path / "t.iot").unlink()
    from_binary, _ = _import(tmp_path, "blktrace", SAMPLE)
    for col in ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns", "offset", "bytes", "op", "pid"):
        assert (from_text[col] == from_binary[col]).all(), col


def test_blkparse_corners(tmp_path: Path) -> None:
    recs, header = _import(tmp_path, "blkparse", DATA / "blkparse-corners.txt")
    meta = header["metadata"]
    assert meta["unpaired"] == {}
    assert meta["self_check"] == {"present": True, "ok": True, "mismatches": []}
    got = {(int(r["offset"]) // 512, int(r["bytes"]), int(r["op"]), int(r["pid"])): r for r in recs}
    assert len(recs) == 5
    # Back and front merges, then a requeue: one request, issued at the second D.
    w = got[(992, 24 * 512, OP["write"], 100)]
    assert (w["ts_queue_ns"], w["ts_issue_ns"], w["ts_complete_ns"]) == (0, 3000, 10000)
    assert w["comm"] == b"writer"
    # The empty PREFLUSH write: the submitter's one flush record, its issue time
    # the dispatch of the device flush that served it (D FN at 12000).
    f = got[(0, 0, OP["flush"], 200)]
    assert f["flags"] & FLAG["preflush"] and not f["flags"] & FLAG["device_flush"]
    assert (f["ts_queue_ns"], f["ts_issue_ns"], f["ts_complete_ns"]) == (11000, 12000, 13500)
    # The device flushes: one served the fsync, one the FUA write's sequence; no
    # record of their own.
    assert int((recs["op"] == OP["flush"]).sum()) == 1
    assert meta["device_flushes"] == {"issued": 2, "linked": 2}
    # A split bio: two requests with the bio's queue time; an error code kept.
    a, b = got[(5000, 2048, OP["read"], 300)], got[(5004, 2048, OP["read"], 300)]
    assert a["ts_queue_ns"] == b["ts_queue_ns"] == 20100
    assert a["error"] == -5 and b["error"] == 0
    # FUA write: its flush-sequence end is consumed, not unpaired.
    fua = got[(64, 4096, OP["write"], 400)]
    assert fua["flags"] & FLAG["fua"] and fua["flags"] & FLAG["sync"]
    assert meta["actions"]["flush_sequence_end"] == 1


def test_blkparse_self_check_reports_a_mismatch(tmp_path: Path) -> None:
    text = (DATA / "blkparse-corners.txt").read_text().replace("28 entries", "29 entries")
    src = tmp_path / "bad.txt"
    src.write_text(text)
    _, header = _import(tmp_path, "blkparse", src)
    check = header["metadata"]["self_check"]
    assert check["ok"] is False and "29" in check["mismatches"][0]


def _binary_corners(tmp_path: Path) -> list[Path]:
    """Two per-CPU files whose events interleave in time."""
    w, r = CAT["W"], CAT["R"]
    remap = struct.pack(">IIQ", (8 << 20) | 1, SDA, 952)
    cpu0 = b"".join(
        [
            notify_time(5, 1_700_000_000, 500),
            notify_comm(6, 100, b"writer"),
            trace(1, 10, "A", w, 1000, 0, 100, pdu=remap),
            trace(2, 10, "Q", w, 1000, 4096, 100),
            trace(3, 30, "Q", w, 1008, 4096, 100),
            trace(4, 31, "M", w, 1008, 4096, 100),
            trace(5, 40, "D", w, 1000, 8192, 100),
            trace(6, 45, "R", w, 1000, 8192, 100),
            trace(7, 50, "D", w, 1000, 8192, 100),
            trace(8, 90, "C", w, 1000, 8192, 0),
        ]
    )
    cg = struct.pack("<Q", 77)
    cpu1 = b"".join(
        [
            notify_comm(7, 200, b"syncer", cpu=1),
            trace(1, 20, "Q", CAT["FW"] | bt.TC_SYNC, 0, 0, 200, cpu=1),
            trace(2, 60, "D", CAT["FN"], 0, 0, 44, cpu=1),
            trace(3, 70, "C", CAT["FN"], 0, 0, 0, cpu=1),
            trace(4, 71, "C", CAT["FW"] | bt.TC_SYNC, 0, 0, 0, cpu=1),
            trace(5, 80, "Q", r, 9000, 4096, 300, cpu=1, pdu=cg, low=1 | bt.TA_CGROUP),
            trace(6, 81, "D", r, 9000, 4096, 300, cpu=1),
            trace(7, 95, "D", r, 7000, 4096, 300, cpu=1),
        ]
    )
    paths = [tmp_path / "sda.blktrace.0", tmp_path / "sda.blktrace.1"]
    paths[0].write_bytes(cpu0)
    paths[1].write_bytes(cpu1)
    return paths


def test_binary_corners_and_cpu_merge(tmp_path: Path) -> None:
    recs, header = _import(tmp_path, "blktrace", *_binary_corners(tmp_path))
    meta = header["metadata"]
    # Q at 9000 was issued but never completed; D at 7000 had no Q.
    assert meta["unpaired"] == {"issue_without_queue": 1, "issued_never_completed": 2}
    assert meta["remaps"] == 1
    # The binary importer's flush model is the text one's: the device flush (D FN at
    # 60) is the fsync's issue time, not a second record.
    assert len(recs) == 2
    assert meta["device_flushes"] == {"issued": 1, "linked": 1}
    by_op = {int(r["op"]): r for r in recs if r["pid"]}
    w = by_op[OP["write"]]
    # Times relative to the first event of a request (the remap at 10).
    assert (w["ts_queue_ns"], w["ts_issue_ns"], w["ts_complete_ns"]) == (0, 40, 80)
    assert w["bytes"] == 8192 and w["offset"] == 1000 * 512 and w["comm"] == b"writer"
    f = by_op[OP["flush"]]
    assert f["comm"] == b"syncer" and f["flags"] & FLAG["preflush"] and f["flags"] & FLAG["sync"]
    assert (f["ts_queue_ns"], f["ts_issue_ns"], f["ts_complete_ns"]) == (10, 50, 61)
    assert header["wall_start_ns"] == 1_700_000_000_000_000_505
    assert meta["actions"]["requeued"] == 1


def test_binary_errors_name_file_offset_and_field(tmp_path: Path) -> None:
    p = tmp_path / "x.blktrace.0"
    good = trace(1, 10, "Q", CAT["R"], 8, 4096)
    p.write_bytes(good + b"\x00" * 48)
    with pytest.raises(IotapeError, match=r"x\.blktrace\.0: byte 48: field magic"):
        import_trace("blktrace", [p], tmp_path / "o.iot")
    p.write_bytes(good + good[:30])
    with pytest.raises(IotapeError, match=r"byte 48: field pdu_len: file ends inside a record"):
        import_trace("blktrace", [p], tmp_path / "o.iot")
    assert not (tmp_path / "o.iot").exists()
    assert [x.name for x in tmp_path.iterdir()] == ["x.blktrace.0"]


def test_rwbs_to_categories() -> None:
    assert bt.op_flags(bt.rwbs_cat("FWS"), 0) == (OP["flush"], FLAG["preflush"] | FLAG["sync"])
    assert bt.op_flags(bt.rwbs_cat("FN"), 0)[0] == OP["flush"]
    assert bt.op_flags(bt.rwbs_cat("WFS"), 4096) == (OP["write"], FLAG["fua"] | FLAG["sync"])
    assert bt.op_flags(bt.rwbs_cat("RAM"), 4096) == (
        OP["read"],
        FLAG["readahead"] | FLAG["meta"],
    )
    assert bt.op_flags(bt.rwbs_cat("DS"), 4096)[0] == OP["discard"]
    with pytest.raises(ValueError):
        bt.rwbs_cat("Z")


def test_blkparse_fsync_is_one_flush_per_preflush_bio(tmp_path: Path) -> None:
    """`A FWFS s + 0`, `Q FWFS`, `D FN`, `C FN 0 [0]`, `C WFS s [0]`: one fsync, one
    flush record (the bio's), issued when its device flush was; not two."""
    recs, header = _import(tmp_path, "blkparse", DATA / "blkparse-fsync.txt")
    meta = header["metadata"]
    assert meta["unpaired"] == {}
    writes = recs[recs["op"] == OP["write"]]
    flushes = recs[recs["op"] == OP["flush"]]
    assert len(writes) == 6 and set(writes["bytes"].tolist()) == {4096}
    # Five fsyncs (two of them served by one device flush) and one device flush
    # whose fsync was queued before the trace: six flush records, five device flushes.
    assert len(flushes) == 6
    assert meta["device_flushes"] == {"issued": 5, "linked": 4}
    app = flushes[flushes["pid"] != 0]
    assert sorted(app["pid"].tolist()) == [4321, 4321, 4321, 4321, 4322]
    assert (app["flags"] & FLAG["preflush"]).all() and (app["flags"] & FLAG["fua"]).all()
    assert not (app["flags"] & FLAG["device_flush"]).any() and (app["bytes"] == 0).all()
    # Each issue time is its device flush's dispatch (D FN, 5 us after its G).
    assert (app["ts_issue_ns"] > app["ts_queue_ns"]).all()
    assert (app["ts_complete_ns"] > app["ts_issue_ns"]).all()
    shared = app[app["offset"] >= (2_000_800 * 512)]
    assert len(shared) == 2 and shared["ts_issue_ns"][0] == shared["ts_issue_ns"][1]
    # The orphan: the device's request, kept, flagged, no submitter.
    (dev,) = flushes[flushes["pid"] == 0]
    assert dev["flags"] & FLAG["device_flush"] and not dev["flags"] & FLAG["preflush"]
    assert (dev["ts_issue_ns"], dev["ts_complete_ns"]) == (0, 29_000)
