"""Compressed chunks (format version 2): the same records as plain chunks, in a fifth of
the bytes; damage found and repaired around; a codec this iotape does not know refused."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from import_helpers import TRACES
from trace_helpers import chunk_extents, header, make_trace, workload_records
from typer.testing import CliRunner

from iotape.commands.trace import app
from recorder.importers.core import import_trace
from recorder.tracefile import RECORD_SIZE, TraceFormatError, content_sha256, open_trace
from recorder.tracefile import format as tf
from recorder.tracefile.check import check, repair
from recorder.tracefile.convert import convert

REFERENCE = TRACES / "workload" / "reference-20mbx-5s.iot"
IMPORTS = {
    "blktrace": TRACES / "blktrace-nvme" / "sample.blktrace.0",
    "disksim": TRACES / "disksim-websearch" / "wsrch-small.trace",
}


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": "300"})


def _records(path: Path) -> np.ndarray:
    with open_trace(path) as t:
        return t.read_all()


@pytest.fixture(scope="module")
def real_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    """The records of every real trace in traces/: the recorded workload and imports."""
    tmp = tmp_path_factory.mktemp("real")
    out = {"reference": _records(REFERENCE)}
    for fmt, src in IMPORTS.items():
        dst = tmp / f"{fmt}.iot"
        import_trace(fmt, [src], dst)
        out[fmt] = _records(dst)
    return out


@pytest.mark.parametrize("name", ["reference", "blktrace", "disksim"])
def test_real_traces_round_trip_compressed(tmp_path: Path, real_traces, name: str) -> None:
    records = real_traces[name]
    sizes = {}
    for compression in ("none", "zstd", "lz4"):
        path = make_trace(tmp_path / f"{compression}.iot", records, 8192, None, compression)
        with open_trace(path) as t:
            assert t.header["version"] == (1 if compression == "none" else 2)
        assert _records(path).tobytes() == records.tobytes(), compression
        # Ingest's reader: each chunk a column at a time (from the planes when
        # compressed) gives every field's values as the records do.
        with open_trace(path) as t:
            cols = list(t.iter_columns())
        assert sum(len(c["op"]) for c in cols) == len(records)
        for f in records.dtype.names:
            got = np.concatenate([c[f] for c in cols])
            assert got.dtype == records.dtype[f] and got.flags.c_contiguous, f
            assert got.tobytes() == np.ascontiguousarray(records[f]).tobytes(), (compression, f)
        assert check(path).complete
        sizes[compression] = path.stat().st_size
    assert sizes["zstd"] < sizes["none"] / 4 and sizes["lz4"] < sizes["none"] / 3, sizes
    if name == "reference":
        # The goal: at most 20 bytes a request on the reference workload, header included.
        assert sizes["zstd"] / len(records) <= 20, sizes


def test_every_reader_gives_the_same_answer(tmp_path: Path) -> None:
    records = workload_records(30_000, seed=5)
    plain = make_trace(tmp_path / "plain.iot", records, 4096, None, "none")
    packed = make_trace(tmp_path / "packed.iot", records, 4096, None, "zstd")
    a = json.loads(_invoke("info", str(plain), "--json").output)
    b = json.loads(_invoke("info", str(packed), "--json").output)
    assert b["compression"] == {"zstd": 8} and a["compression"] == {"none": 8}
    assert b["file_bytes_per_event"] < 20 < a["file_bytes_per_event"]
    differ = {"path", "file_bytes", "format_version", "compression", "file_bytes_per_event"}
    assert {k: v for k, v in a.items() if k not in differ} == {
        k: v for k, v in b.items() if k not in differ
    }
    convert(plain, tmp_path / "a.parquet")
    convert(packed, tmp_path / "b.parquet")
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))


def test_a_damaged_compressed_chunk_is_found_and_repaired_around(tmp_path: Path) -> None:
    records = workload_records(1000, seed=7)
    path = make_trace(tmp_path / "t.iot", records, 100, None, "zstd")
    extents = chunk_extents(path)
    data = bytearray(path.read_bytes())
    data[extents[4][0] + 40] ^= 0x10  # inside chunk 4's compressed bytes
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match="chunk 4: payload checksum mismatch; run `iotape"):
        _records(path)
    rep = check(path)
    [d] = rep.damage
    assert (d.first_chunk, d.chunks, d.events, d.events_exact) == (4, 1, 100, True)
    r = repair(path)
    assert (r.kept_events, r.dropped_events) == (900, 100)
    # Bytes, not np.concatenate: its dtype promotion would pack the record's fields.
    assert _records(path).tobytes() == records[:400].tobytes() + records[500:].tobytes()
    # Nothing is lost: the damaged chunk's bytes are kept beside the trace.
    saved = Path(r.damaged_file).read_bytes()
    assert saved == bytes(data[extents[4][0] : extents[4][1]])


def _with_codec(path: Path, chunk: int, codec: int) -> None:
    """Rewrite chunk `chunk`'s codec id, its header CRC made right: intact, but unknown."""
    data = bytearray(path.read_bytes())
    at = chunk_extents(path)[chunk][0]
    data[at + 20] = codec
    struct.pack_into("<I", data, at + 28, zlib.crc32(data[at : at + 28]))
    path.write_bytes(data)


def test_an_unknown_codec_is_refused_with_one_line(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", workload_records(500, seed=1), 100, None, "zstd")
    _with_codec(path, 2, 9)
    before = path.read_bytes()
    expected = "chunk 2: compression id 9 is unknown (this iotape reads 1 zstd, 2 lz4)"
    with pytest.raises(TraceFormatError) as e:
        _records(path)
    assert str(e.value).endswith(expected + "; a newer iotape wrote this file")
    assert "\n" not in str(e.value) and "--repair" not in str(e.value)
    # Not damage: check and repair refuse the file and leave every byte of it.
    for fn in (check, repair):
        with pytest.raises(TraceFormatError, match="compression id 9 is unknown"):
            fn(path)
    with pytest.raises(TraceFormatError, match="compression id 9 is unknown"):
        _invoke("info", str(path))
    assert path.read_bytes() == before


def test_a_file_of_version_1_may_not_hold_compressed_chunks(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", workload_records(300, seed=2), 100, None, "zstd")
    data = bytearray(path.read_bytes())
    data[8:12] = struct.pack("<I", tf.PLAIN_VERSION)
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match="header JSON says version 2, file says 1"):
        open_trace(path)


def test_unknown_version_is_refused_by_name(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", workload_records(10), 100, None, "zstd")
    data = bytearray(path.read_bytes())
    data[8:12] = struct.pack("<I", 5)
    path.write_bytes(data)
    with pytest.raises(TraceFormatError) as e:
        open_trace(path)
    assert str(e.value).endswith(
        "byte 8: trace format version 5 is not supported (this iotape reads versions 1, 2, 3, 4)"
    )


def test_chunks_that_do_not_shrink_stay_plain(tmp_path: Path) -> None:
    # A record of random bytes does not compress: written plain, in a version 2 file.
    rng = np.random.default_rng(4)
    records = np.frombuffer(rng.bytes(3 * tf.RECORD_SIZE), dtype=tf.RECORD_DTYPE).copy()
    raw = records.view(np.uint8).reshape(3, tf.RECORD_SIZE)
    raw[:, tf.PAD_COLUMNS] = 0
    path = make_trace(tmp_path / "t.iot", records, 1, None, "lz4")
    info = json.loads(_invoke("info", str(path), "--json").output)
    assert info["compression"] == {"none": 3} and info["format_version"] == 2
    assert _records(path).tobytes() == records.tobytes()


def test_writer_refuses_an_unknown_compression(tmp_path: Path) -> None:
    from recorder.tracefile import TraceWriter

    with pytest.raises(ValueError, match="compression must be one of none, zstd, lz4"):
        TraceWriter(tmp_path / "t.iot", header(), compression="gzip")


def test_a_compressed_trace_ingests_like_the_plain_one(tmp_path: Path, store) -> None:
    from analyzer.store import catalog
    from analyzer.store.ingest import ingest

    records = workload_records(20_000, seed=9)
    plain = make_trace(tmp_path / "plain.iot", records, 4096, None, "none")
    packed = make_trace(tmp_path / "packed.iot", records, 4096, None, "zstd")
    # Its identity hashes the chunk headers, whose CRCs cover the stored bytes.
    assert content_sha256(packed) not in (None, content_sha256(plain))
    a, b = ingest(store, plain), ingest(store, packed)
    assert a.events == b.events == len(records) and a.run_id != b.run_id
    assert {r["id"] for r in catalog.all_runs(store)} == {a.run_id, b.run_id}


@pytest.fixture(params=["c", "pyarrow"])
def codecs_of(request, monkeypatch: pytest.MonkeyPatch):
    """Chunks decompressed by planes.c (libzstd, liblz4) or by pyarrow's codecs (what
    a checkout without build/libplanes.so, or IOTAPE_PLANES_PURE=1, uses)."""
    import os

    from recorder.tracefile import planes

    if request.param == "pyarrow":
        monkeypatch.setenv("IOTAPE_PLANES_PURE", "1")
    elif planes.lib() is None:
        assert os.environ.get("CI") != "true", "build/libplanes.so missing: run `make native`"
        pytest.skip("build/libplanes.so not built (`make native`)")
    planes.lib.cache_clear()
    yield request.param
    monkeypatch.delenv("IOTAPE_PLANES_PURE", raising=False)
    planes.lib.cache_clear()


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_bytes_that_do_not_decompress_are_damage(
    tmp_path: Path, compression: str, codecs_of: str
) -> None:
    """A writer's fault, not a disk's: CRCs that hold over bytes that do not decode."""
    records = workload_records(500, seed=3)
    path = make_trace(tmp_path / "t.iot", records, 100, None, compression)
    data = bytearray(path.read_bytes())
    at = chunk_extents(path)[1][0]
    stored = struct.unpack_from("<I", data, at + 16)[0]
    body = slice(at + 32, at + 32 + stored)
    data[body] = bytes(np.random.default_rng(0).integers(0, 256, stored, dtype=np.uint8))
    struct.pack_into("<I", data, at + 24, zlib.crc32(data[body]))
    struct.pack_into("<I", data, at + 28, zlib.crc32(data[at : at + 28]))
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match=r"chunk 1: (does not decompress|decompresses)"):
        _records(path)
    r = repair(path)
    assert (r.kept_events, r.dropped_events) == (400, 100)
    assert _records(path).tobytes() == records[:100].tobytes() + records[200:].tobytes()


@pytest.mark.parametrize("n", [20_000, 20_003, 13])  # whole 8 x 8 blocks, and records left over
def test_planes_decode_in_c_as_in_numpy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, n: int
) -> None:
    import os

    from recorder.tracefile import codec, planes

    if planes.lib() is None:
        assert os.environ.get("CI") != "true", "build/libplanes.so missing: run `make native`"
        pytest.skip("build/libplanes.so not built (`make native`)")
    records = workload_records(n, seed=8)
    records["offset"][::9] = 0  # backwards: negative deltas
    records["ts_queue_ns"][::5] = records["ts_issue_ns"][::5] + 3  # queued after issue
    encoded = codec.encode_records(records)
    got = codec.decode_columns(encoded, len(records))
    got_records = codec.decode_records(encoded, len(records))
    monkeypatch.setenv("IOTAPE_PLANES_PURE", "1")
    planes.lib.cache_clear()
    try:
        want = codec.decode_columns(encoded, len(records))
        want_records = codec.decode_records(encoded, len(records))
    finally:
        monkeypatch.delenv("IOTAPE_PLANES_PURE")
        planes.lib.cache_clear()
    # Whole records, padding included, as numpy decodes them and as they were.
    assert got_records.tobytes() == want_records.tobytes() == records.tobytes()
    assert list(got) == list(want) == list(records.dtype.names)
    for f in records.dtype.names:
        assert got[f].tobytes() == want[f].tobytes() == np.ascontiguousarray(records[f]).tobytes()
    # Gathered across chunks of both kinds (a repaired file may mix them).
    path = make_trace(tmp_path / "z.iot", records, 3_000, None, "zstd")
    with open_trace(path) as t:
        parts = list(t.iter_columns(7_000))
    assert sum(len(p["op"]) for p in parts) == n
    assert n != 20_000 or [len(p["op"]) for p in parts] == [9_000, 9_000, 2_000]
    for f in records.dtype.names:
        col = np.concatenate([p[f] for p in parts])
        assert col.tobytes() == np.ascontiguousarray(records[f]).tobytes(), f


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_chunks_decompress_in_c_as_in_pyarrow(
    tmp_path: Path, compression: str, codecs_of: str
) -> None:
    """Every chunk's bytes back, whichever decompresses them (the C loader and the
    Python writer compress with the same codecs), and planes handed out by
    iter_stored that decode to the records."""
    from recorder.tracefile import codec, planes

    records = workload_records(20_003, seed=5)
    path = make_trace(tmp_path / "t.iot", records, 3_000, None, compression)
    assert (planes.lib() is not None) == (codecs_of == "c")
    assert _records(path).tobytes() == records.tobytes()
    with open_trace(path) as t:
        stored = list(t.iter_stored())
    assert all(c.dtype == np.uint8 and not c.flags.writeable for c in stored)
    got = b"".join(codec.decode_records(c, len(c) // RECORD_SIZE).tobytes() for c in stored)
    assert got == records.tobytes()


@pytest.mark.parametrize("n", [4_096, 4_111, 15])  # whole blocks of 16, records left over
def test_planes_decode_in_c_every_byte(n: int) -> None:
    """Random bytes in every byte of every field (padding included), so that a byte
    the C decoder's interleaves put in the wrong place of a column cannot match."""
    import os

    from recorder.tracefile import codec, planes

    if planes.lib() is None:
        assert os.environ.get("CI") != "true", "build/libplanes.so missing: run `make native`"
        pytest.skip("build/libplanes.so not built (`make native`)")
    rng = np.random.default_rng(n)
    records = np.frombuffer(rng.bytes(n * tf.RECORD_SIZE), dtype=tf.RECORD_DTYPE).copy()
    encoded = codec.encode_records(records)
    got = codec.decode_columns(encoded, n)
    assert codec.decode_records(encoded, n).tobytes() == records.tobytes()
    for f in records.dtype.names:
        assert got[f].tobytes() == np.ascontiguousarray(records[f]).tobytes(), f
