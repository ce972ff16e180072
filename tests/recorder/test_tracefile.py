"""The .iot reader and writer: round trips, and every kind of bad file."""

from __future__ import annotations

import json
import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from trace_helpers import (
    DT,
    chunk_offsets,
    chunk_size,
    header,
    make_trace,
    random_records,
)

import schemas
from base.errors import IotapeError
from recorder.tracefile import TraceFormatError, TraceWriter, decode_comm, open_trace
from recorder.tracefile import format as tf
from recorder.tracefile.scan import scan


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return len(a) == len(b) and all(np.array_equal(a[n], b[n]) for n in DT.names)


def _header_bytes(
    obj: dict, version: int = tf.PLAIN_VERSION, record_size: int = tf.RECORD_SIZE
) -> bytes:
    data = json.dumps(obj).encode()
    fixed = struct.pack(
        "<8sIIII", tf.HEADER_MAGIC, version, record_size, len(data), zlib.crc32(data)
    )
    return fixed + data + bytes((-len(fixed) - len(data)) % 8)


# --------------------------------------------------------------------------- round trips


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=arrays(DT, st.integers(0, 300)),
    chunk=st.integers(1, 64),
    batches=st.integers(1, 5),
    compression=st.sampled_from(["none", "zstd", "lz4"]),
)
def test_round_trip_any_records(
    tmp_path: Path, records: np.ndarray, chunk: int, batches: int, compression: str
) -> None:
    path = tmp_path / "t.iot"
    with TraceWriter(path, header(), chunk_records=chunk, compression=compression) as w:
        for part in np.array_split(records, batches):
            w.write(part)
        w.close({"stop_reason": "duration"})
    with open_trace(path) as t:
        chunks = list(t.iter_chunks())
        got = t.read_all()
        assert t.footer["events"] == len(records)
        assert t.footer["chunks"] == len(chunks) == -(-len(records) // chunk)
        assert all(len(c) == chunk for c in chunks[:-1])
    # numpy compares S16 up to trailing NULs; compare the raw bytes of every field.
    assert got.tobytes() == _zero_padding(records).tobytes()


def _zero_padding(records: np.ndarray) -> np.ndarray:
    out = np.zeros(len(records), dtype=DT)
    for n in DT.names:
        out[n] = records[n]
    return out


def test_header_gets_format_keys_and_footer_gets_counts(tmp_path: Path) -> None:
    path = make_trace(
        tmp_path / "t.iot",
        random_records(250),
        chunk_records=100,
        footer={"events": 7, "chunks": 9},
    )
    with open_trace(path) as t:
        assert t.header["format"] == "iotape-trace"
        assert t.header["version"] == 1
        assert t.header["record"] == {"size": 80, "layout_version": schemas.layout_version()}
        assert t.header["host"] == "lab1"
        # The caller's wrong counts are replaced by what was written.
        assert t.footer["events"] == 250
        assert t.footer["chunks"] == 3
        assert t.complete


def test_padding_is_written_as_zero(tmp_path: Path) -> None:
    r = random_records(10)
    raw = r.view(np.uint8).reshape(10, 80)
    raw[:, 62:64] = 0xFF
    path = make_trace(tmp_path / "t.iot", r, chunk_records=10)
    data = path.read_bytes()
    start = chunk_offsets(path)[0] + tf.CHUNK_HEADER_SIZE
    payload = np.frombuffer(data, np.uint8, 800, start).reshape(10, 80)
    assert not payload[:, 62:64].any()


def test_writer_rejects_wrong_dtype_and_bad_chunk_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="chunk_records"):
        TraceWriter(tmp_path / "t.iot", header(), chunk_records=tf.MAX_CHUNK_RECORDS + 1)
    with TraceWriter(tmp_path / "t.iot", header()) as w, pytest.raises(TypeError):
        w.write(np.zeros(3, dtype=np.uint64))


def test_writer_needs_start_times(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mono_start_ns"):
        TraceWriter(tmp_path / "t.iot", {"recorder": {}})


def test_failed_writer_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "t.iot"
    with pytest.raises(RuntimeError), TraceWriter(target, header()) as w:
        w.write(random_records(20000))
        raise RuntimeError("importer failed")
    assert list(tmp_path.iterdir()) == []


def test_abort_keeps_the_old_file(tmp_path: Path) -> None:
    target = make_trace(tmp_path / "t.iot", random_records(5))
    before = target.read_bytes()
    w = TraceWriter(target, header())
    w.write(random_records(50))
    w.abort()
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.iot"]


def test_empty_trace_is_valid(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", np.zeros(0, DT))
    with open_trace(path) as t:
        assert len(t.read_all()) == 0
        assert t.footer["events"] == 0


def test_chunks_are_read_only_views(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300), chunk_records=100)
    with open_trace(path) as t:
        for c in t.iter_chunks():
            assert not c.flags.writeable
            assert not c.flags.owndata


def test_iterating_a_big_file_allocates_one_chunk_at_a_time(tmp_path: Path) -> None:
    n = 400_000  # 32 MB of records
    path = make_trace(tmp_path / "big.iot", random_records(n), chunk_records=8192)
    tracemalloc.start()
    try:
        total = 0
        with open_trace(path) as t:
            for c in t.iter_chunks():
                total += int(c["bytes"].astype(np.uint64).sum() > 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == -(-n // 8192)
    assert peak < 4 << 20, f"peak {peak} bytes for a {path.stat().st_size}-byte file"


# --------------------------------------------------------------------------- arrow


def test_arrow_batches_have_exactly_the_schema(tmp_path: Path) -> None:
    r = random_records(250, seed=3)
    path = make_trace(tmp_path / "t.iot", r)
    with open_trace(path) as t:
        batches = list(t.to_arrow_batches())
    assert all(b.schema.equals(schemas.arrow_schema(), check_metadata=True) for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.column_names == schemas.column_names()
    assert table["comm"].to_pylist() == [c.decode() for c in r["comm"]]
    for name in DT.names:
        if name != "comm":
            assert np.array_equal(table[name].to_numpy(), r[name]), name


def test_comm_decoding_edges() -> None:
    r = np.zeros(4, DT)
    r["comm"] = [b"", b"a" * 16, b"ab\0cd", b"\xffbad"]
    got = decode_comm(r["comm"]).to_pylist()
    assert got[:3] == ["", "a" * 16, "ab"]
    assert got[3] == "\\xffbad"


# --------------------------------------------------------------------------- bad files


def _fault(path: Path) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as e, open_trace(path) as t:
        t.read_all()
    return e.value


def test_truncated_mid_chunk(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300), chunk_records=100)
    offsets = chunk_offsets(path)
    data = path.read_bytes()
    path.write_bytes(data[: offsets[2] + 500])
    err = _fault(path)
    assert err.offset == offsets[2]
    assert str(err) == (
        f"{path}: byte {offsets[2]}: chunk 2: truncated: file ends 476 bytes into its "
        f"8000-byte payload; run `iotape trace check --repair {path}` to keep every intact chunk"
    )
    assert "\n" not in str(err)
    assert isinstance(err, IotapeError)


def test_cut_at_a_chunk_boundary_needs_a_footer(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300, seed=1), chunk_records=100)
    offsets = chunk_offsets(path)
    path.write_bytes(path.read_bytes()[: offsets[2]])
    err = _fault(path)
    assert "without a footer" in str(err)
    assert err.offset == offsets[2]
    with open_trace(path, strict=False) as t:
        got = t.read_all()
        assert t.problem is not None and not t.complete
    assert _same(got, random_records(300, seed=1)[:200])


def test_corrupted_payload_checksum(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300), chunk_records=100)
    offsets = chunk_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[1] + tf.CHUNK_HEADER_SIZE + 123] ^= 0x01
    path.write_bytes(data)
    assert str(_fault(path)).startswith(
        f"{path}: byte {offsets[1]}: chunk 1: payload checksum mismatch; run `iotape trace check"
    )


def test_corrupted_chunk_header(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300), chunk_records=100)
    offsets = chunk_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[1] + 4] = 0x7F  # the count
    path.write_bytes(data)
    assert f"byte {offsets[1]}: chunk 1: header checksum mismatch; run" in str(_fault(path))


def test_chunks_out_of_order(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300), chunk_records=100)
    o = chunk_offsets(path)
    data = path.read_bytes()
    size = chunk_size(100)
    swapped = (
        data[: o[1]] + data[o[2] : o[2] + size] + data[o[1] : o[1] + size] + data[o[2] + size :]
    )
    path.write_bytes(swapped)
    assert "chunk 1: sequence number is 2, expected 1" in str(_fault(path))


def test_garbage_after_the_trailer(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(30))
    with path.open("ab") as f:
        f.write(b"garbage!" * 3)
    err = _fault(path)
    assert "24 bytes of garbage after the trailer" in str(err)
    assert err.offset == path.stat().st_size - 24


def test_footer_that_disagrees_with_the_chunks(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(150), chunk_records=100)
    offsets = chunk_offsets(path)
    footer_at = offsets[-1] + chunk_size(50)
    data = path.read_bytes()[:footer_at]
    path.write_bytes(data + tf.encode_footer({"events": 151, "chunks": 2}, footer_at))
    assert "footer says 151 events in 2 chunks, the file holds 150 in 2" in str(_fault(path))


def test_zero_fill_after_the_last_chunk(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(100), chunk_records=100)
    end = chunk_offsets(path)[-1] + chunk_size(100)
    path.write_bytes(path.read_bytes()[:end] + bytes(4096))
    assert "zero fill" in str(_fault(path))


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b"", "shorter than a trace header"),
        (b"IOTAPE\r\n", "shorter than a trace header"),
        (b"PAR1" + bytes(100), "not an iotape trace"),
        (b"IOTAPE\n\x01\x00\x00\x00" + bytes(100), "line endings changed"),
    ],
)
def test_not_a_trace(tmp_path: Path, content: bytes, expect: str) -> None:
    path = tmp_path / "t.iot"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=expect) as e:
        open_trace(path)
    assert str(e.value).startswith(f"{path}: byte 0: ")


def test_unknown_format_version_is_named(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(3))
    data = bytearray(path.read_bytes())
    data[8:12] = struct.pack("<I", 7)
    path.write_bytes(data)
    with pytest.raises(TraceFormatError) as e:
        open_trace(path)
    assert str(e.value) == (
        f"{path}: byte 8: trace format version 7 is not supported "
        "(this iotape reads versions 1, 2, 3, 4)"
    )


def test_unknown_layout_version_is_named(tmp_path: Path) -> None:
    h = tf.encode_header(header())
    obj = json.loads(h[24 : 24 + struct.unpack_from("<I", h, 16)[0]])
    obj["record"]["layout_version"] = 99
    path = tmp_path / "t.iot"
    path.write_bytes(_header_bytes(obj))
    with pytest.raises(TraceFormatError, match="record layout_version 99 is not supported"):
        open_trace(path)


def test_other_record_size_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "t.iot"
    path.write_bytes(_header_bytes({"format": "iotape-trace"}, record_size=96))
    with pytest.raises(TraceFormatError, match="byte 12: record size 96"):
        open_trace(path)


def test_header_checksum(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(3))
    data = bytearray(path.read_bytes())
    data[30] ^= 0x20
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match="byte 24: header checksum mismatch"):
        open_trace(path)


def test_header_json_length_past_the_end(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(3))
    data = bytearray(path.read_bytes())
    data[16:20] = struct.pack("<I", tf.MAX_JSON_BYTES)
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match="file ends inside the header"):
        open_trace(path)


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(IotapeError, match="no such file"):
        open_trace(tmp_path / "nope.iot")


# --------------------------------------------------------------------------- scan


def test_scan_of_a_truncated_file(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300), chunk_records=100)
    offsets = chunk_offsets(path)
    path.write_bytes(path.read_bytes()[: offsets[2] + 100])
    rep = scan(path)
    assert (rep.chunks, rep.events, rep.valid_end) == (2, 200, offsets[2])
    assert not rep.complete
    assert rep.problem_offset == offsets[2]
    assert "truncated" in rep.problem
    assert not rep.footer_present and not rep.trailer_present
    # The torn chunk's header survived, so its 100 records are known to be dropped.
    assert (rep.dropped_chunks, rep.dropped_events) == (1, 100)


def test_scan_of_a_complete_file(tmp_path: Path) -> None:
    r = random_records(300)
    path = make_trace(tmp_path / "t.iot", r, chunk_records=100)
    rep = scan(path)
    assert rep.complete and rep.footer_present and rep.trailer_present and rep.footer_consistent
    assert (rep.chunks, rep.events) == (3, 300)
    assert rep.last_complete_ns == int(r["ts_complete_ns"].max())
    assert rep.valid_end == path.stat().st_size - len(tf.encode_footer(rep.footer, 0))


def test_scan_finds_chunks_past_a_bad_one(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(500), chunk_records=100)
    offsets = chunk_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[1] + 1000] ^= 0xFF
    path.write_bytes(data)
    rep = scan(path)
    # Only the damaged chunk is lost: the scan finds the next chunk and goes on.
    assert (rep.chunks, rep.events, rep.valid_events) == (4, 400, 100)
    assert (rep.dropped_chunks, rep.dropped_events) == (1, 100)
    assert rep.kept == [(o, o + chunk_size(100)) for i, o in enumerate(offsets) if i != 1]
    [d] = rep.damage
    assert (d.offset, d.length, d.first_chunk, d.chunks, d.intact_after) == (
        offsets[1],
        chunk_size(100),
        1,
        1,
        3,
    )
    assert rep.damaged_footer is not None and rep.damaged_footer["events"] == 500


# --------------------------------------------------------------------------- any damage


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, np.ndarray]:
    r = random_records(25, seed=7)
    path = make_trace(tmp_path_factory.mktemp("pristine") / "t.iot", r, chunk_records=10)
    return path.read_bytes(), r


damage = st.tuples(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
    st.one_of(st.none(), st.integers(0, 10**6)),
    st.binary(max_size=64),
)


def _damaged(data: bytes, spec) -> bytes:
    flips, cut, tail = spec
    out = bytearray(data)
    for pos, value in flips:
        out[pos % len(out)] = value
    if cut is not None:
        out = out[: cut % (len(out) + 1)]
    return bytes(out) + tail


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=damage)
def test_any_damage_gives_the_data_or_an_iotape_error(tmp_path: Path, pristine, spec) -> None:
    data, records = pristine
    bad = _damaged(data, spec)
    path = tmp_path / "t.iot"
    path.write_bytes(bad)
    tracemalloc.start()
    try:
        try:
            with open_trace(path) as t:
                got = t.read_all()
        except IotapeError:
            got = None
        # Strict reading succeeds only when every byte that matters is intact.
        if got is not None:
            assert bad == data
            assert _same(got, records)
        try:
            rep = scan(path)
        except TraceFormatError:
            rep = None
        if rep is not None:
            with open_trace(path, strict=False) as t:
                prefix = t.read_all()
            assert len(prefix) == rep.valid_events <= rep.events <= len(records)
            assert _same(prefix, records[: rep.valid_events])
            assert rep.complete == (bad == data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_resident_memory_stays_flat_on_a_long_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "long.iot"
    with TraceWriter(path, header()) as w:
        for seed in range(6):
            w.write(random_records(250_000, seed=seed))  # 120 MB in all
        w.close({})
    probe = (
        "import resource, sys\n"
        "from recorder.tracefile import open_trace\n"
        "rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
        "base = rss()\n"
        "with open_trace(sys.argv[1]) as t:\n"
        "    n = sum(int(c['bytes'][0] >= 0) for c in t.iter_chunks())\n"
        "print(rss() - base)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True
    )
    # Mapped pages already read are released as it goes: far below the file's size.
    assert int(res.stdout) < 48 << 20, f"grew by {int(res.stdout)} bytes reading 120 MB"
