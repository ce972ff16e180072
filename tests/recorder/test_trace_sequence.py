"""A rotated capture's files read as one trace (recorder/tracefile/sequence.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import iotape

from base.errors import IotapeError
from recorder.capture.rotation import Rotation, parse_size
from recorder.tracefile import (
    RECORD_DTYPE,
    RECORD_SIZE,
    TraceFormatError,
    open_trace,
    segment_path,
    segments_of,
    trace_bytes,
    trace_events,
    write_trace,
)
from recorder.tracefile.codec import decode_records
from recorder.tracefile.sequence import content_sha256

HEADER = {"host": "h", "mono_start_ns": 1000, "wall_start_ns": 2000, "recorder": {"backend": "bpf"}}


def _records(start: int, n: int) -> np.ndarray:
    r = np.zeros(n, dtype=RECORD_DTYPE)
    r["ts_complete_ns"] = np.arange(start, start + n) * 1000 + 1
    r["ts_issue_ns"] = r["ts_complete_ns"] - 1
    r["bytes"] = 4096
    r["offset"] = np.arange(start, start + n) * 4096
    r["op"] = 1
    return r


def _capture(out: Path, sizes: list[int], first: int = 0, **header) -> list[Path]:
    """Files `first`… of a capture as the loader writes them: one start, consecutive
    records, each footer with its own losses."""
    paths, at = [], 0
    for i, n in enumerate(sizes, start=first):
        h = {**HEADER, **header, "segment": {"index": i, "start_ns": at * 1000}}
        footer: dict[str, object] = {"lost": {"ringbuf_full": 1}, "pre_start": int(i == 0) * 2}
        footer["device_flushes"] = {"issued": 2 + i, "linked": 1 + i}
        footer |= {"stop_reason": "rotate", "end_mono_ns": 1000 + (at + n) * 1000}
        p = segment_path(out, i)
        write_trace(p, h, _records(at, n), footer=footer)
        paths.append(p)
        at += n
    return paths


def test_names_sort_in_time_and_resolve(tmp_path: Path) -> None:
    out = tmp_path / "run.iot"
    assert segment_path(out, 7).name == "run-000007.iot"
    assert segment_path(tmp_path / "run", 7).name == "run-000007.iot"
    _capture(out, [5, 3, 4])
    (tmp_path / "run-other.iot").write_bytes(b"not part of it")
    assert [p.name for p in segments_of(out)] == [f"run-00000{i}.iot" for i in range(3)]


def test_sequence_reads_as_one_trace(tmp_path: Path) -> None:
    out = tmp_path / "run.iot"
    _capture(out, [5, 3, 4])
    with open_trace(out) as t:
        recs = t.read_all()
        assert t.footer is not None
        assert t.footer["events"] == 12 and t.footer["lost"] == {"ringbuf_full": 3}
        assert t.footer["pre_start"] == 2 and t.footer["files"]["count"] == 3
        # Each file counts its own device flushes: the capture's are their sum.
        assert t.footer["device_flushes"] == {"issued": 2 + 3 + 4, "linked": 1 + 2 + 3}
        assert t.header["sequence"]["first_index"] == 0
    # Nothing doubled or missing at the seams, in time order.
    assert recs["offset"].tolist() == [i * 4096 for i in range(12)]
    with open_trace(out) as t:
        cols = list(t.iter_columns())
        assert t.footer is not None and t.footer["events"] == 12
    assert [int(x) for c in cols for x in c["offset"]] == [i * 4096 for i in range(12)]
    with open_trace(out) as t:  # each file's chunks as stored, in turn
        stored = [
            decode_records(c, len(c) // RECORD_SIZE) if c.dtype == np.uint8 else c
            for c in t.iter_stored()
        ]
        assert t.footer is not None and t.footer["events"] == 12
    assert [int(x) for c in stored for x in c["offset"]] == [i * 4096 for i in range(12)]
    with open_trace(str(tmp_path / "run-00000[12].iot")) as t:
        assert len(t.read_all()) == 7
    assert content_sha256(out) == content_sha256(str(tmp_path / "run-*.iot"))
    assert content_sha256(out) != content_sha256(segment_path(out, 0))


def test_ring_remainder_starts_later(tmp_path: Path) -> None:
    out = tmp_path / "run.iot"
    _capture(out, [5, 0, 4], first=4)  # an idle --rotate 10m interval: a file, no events
    with open_trace(out) as t:
        assert len(t.read_all()) == 9 and t.header["sequence"]["first_index"] == 4


def test_hole_or_other_capture_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run.iot"
    paths = _capture(out, [5, 3, 4])
    paths[1].unlink()
    with pytest.raises(IotapeError, match="file 1 of the capture is missing"):
        open_trace(out)
    _capture(tmp_path / "b.iot", [2], first=1, wall_start_ns=99)
    segment_path(tmp_path / "b.iot", 1).rename(paths[1])
    with pytest.raises(IotapeError, match="another capture"):
        open_trace(out)


def test_cli_info_and_convert_take_a_sequence(tmp_path: Path) -> None:
    out = tmp_path / "run.iot"
    _capture(out, [5, 3, 4])
    res = iotape("trace", "info", "--json", str(out))
    assert res.returncode == 0, res.stderr
    assert '"events": 12' in res.stdout
    res = iotape("trace", "convert", str(out), "-o", str(tmp_path / "all.csv"))
    assert res.returncode == 0, res.stderr
    assert len((tmp_path / "all.csv").read_text().splitlines()) == 13


@pytest.mark.parametrize(
    "args, needle",
    [
        (("1k", None, None, None), "at least 4096"),
        (("10x", None, None, None), "not a size"),
        ((None, 3, None, None), "need --rotate"),
        (("1MiB", None, "4k", None), "less than one --rotate file"),
        (("1m", 0, None, None), "at least 1"),
    ],
)
def test_rotation_options_refused(args: tuple, needle: str) -> None:
    with pytest.raises(IotapeError, match=needle):
        Rotation.parse(*args)


def test_sizes_and_durations() -> None:
    assert parse_size("x", "1GiB") == 1 << 30 and parse_size("x", "500MB") == 500_000_000
    r = Rotation.parse("10m", 4, "10GiB", "20GiB")
    assert r.every_s == 600 and r.keep == 4 and r.keep_bytes == 10 << 30
    assert r.loader_args()[:2] == ["--rotate-ms", "600000"]
    assert Rotation.parse("10M", None, None, None).every_bytes == 10_000_000


def test_replay_planner_and_ingest_source_take_a_sequence(tmp_path: Path) -> None:
    from analyzer.store.trace_source import TraceSource, source_sha256
    from replayer.plan import stream
    from replayer.plan.source import load

    out = tmp_path / "run.iot"
    _capture(out, [5, 3, 4], first=2)
    src = load(out)
    assert len(src.records) == 12 and src.t_ns[0] == 0
    # The chunked planner (big traces) scans and reads a sequence too, sized as a whole.
    assert stream.scan(out).requests == 12
    assert trace_bytes(out) == sum(p.stat().st_size for p in segments_of(out))
    assert trace_events(out) == 12  # the files' footers together
    ingest = TraceSource(out)
    try:
        assert ingest.total == 12 and sum(b.num_rows for b in ingest.batches()) == 12
    finally:
        ingest.close()
    assert source_sha256(out) == content_sha256(out)


def test_damaged_file_ends_the_sequence_with_its_name(tmp_path: Path) -> None:
    out = tmp_path / "run.iot"
    paths = _capture(out, [5, 3, 4])
    with open(paths[1], "r+b") as f:  # cut short, as by SIGKILL: no footer
        f.truncate(f.seek(0, 2) - 40)
    with open_trace(out) as t:
        assert t.footer is None
        with pytest.raises(TraceFormatError, match=r"run-000001\.iot"):
            t.read_all()
    res = iotape("trace", "info", "--json", str(out))
    assert '"needs_repair": true' in res.stdout and "run-000001.iot" in res.stdout
    res = iotape("trace", "check", str(out))
    assert res.returncode == 1 and res.stdout.count(": ok,") == 2, res.stdout
    assert iotape("trace", "check", "--repair", str(out)).returncode == 0
    with open_trace(out) as t:
        assert len(t.read_all()) == 12 and t.footer is not None  # only the footer was cut


def test_import_joins_a_sequence_into_one_file(tmp_path: Path) -> None:
    out, one = tmp_path / "run.iot", tmp_path / "one.iot"
    _capture(out, [5, 3, 4])
    res = iotape("import", "auto", str(out), "-o", str(one))
    assert res.returncode == 0, res.stderr
    assert iotape("trace", "check", str(one)).returncode == 0
    with open_trace(one) as j, open_trace(out) as s:
        assert j.read_all().tobytes() == s.read_all().tobytes()
        assert j.footer is not None and j.footer["lost"] == {"ringbuf_full": 3}
        assert "segment" not in j.header and len(j.header["joined"]["files"]) == 3
    res = iotape("import", "auto", str(one), "-o", str(tmp_path / "copy.iot"))
    assert res.returncode == 2 and "already an iotape trace" in res.stderr
    segment_path(out, 1).unlink()
    res = iotape("import", "iot", str(out), "-o", str(tmp_path / "two.iot"))
    assert res.returncode == 2 and "missing" in res.stderr
    assert not (tmp_path / "two.iot").exists()
