"""The chunks' CRC-32 by libdeflate where it is installed (recorder/tracefile/blocks.py,
issue 36): the same value as zlib's for every length and alignment, and damage in a
long compressed payload still found, by either path."""

from __future__ import annotations

import ctypes.util
import mmap
import zlib
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import chunk_extents, make_trace, workload_records

from recorder.tracefile import TraceFormatError, blocks, open_trace

LENGTHS = [0, 1, 7, 8, 63, 64, 4095, 4096, 4097, 65536 + 13, 1 << 20]


def _paths() -> list[str]:
    """The CRC paths to hold to zlib here: zlib's own, and libdeflate's where it loads."""
    return ["zlib", "libdeflate"] if blocks._libdeflate_crc32() is not None else ["zlib"]


def test_libdeflate_is_used_where_it_is_installed() -> None:
    # A machine with libdeflate (this project's `make setup` installs libdeflate0)
    # takes the fast path; one without it keeps zlib's.
    installed = ctypes.util.find_library("deflate") is not None
    assert (blocks._fast_crc32 is not None) == installed


@pytest.mark.parametrize("path", _paths())
def test_crc32_equals_zlib_for_every_length_and_alignment(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    if path == "zlib":
        monkeypatch.setattr(blocks, "_fast_crc32", None)
    rng = np.random.default_rng(36)
    data = rng.integers(0, 256, (1 << 20) + 64, dtype=np.uint8).tobytes()
    for n in LENGTHS:
        for off in (0, 1, 3, 8, 13):
            piece = data[off : off + n]
            assert blocks.crc32(piece) == zlib.crc32(piece), (n, off)
            assert blocks.crc32(memoryview(data)[off : off + n]) == zlib.crc32(piece)


def test_crc32_of_a_read_only_map(tmp_path: Path) -> None:
    """As the reader calls it: slices of a read-only map, released after."""
    f = tmp_path / "b"
    f.write_bytes(np.random.default_rng(1).integers(0, 256, 300_000, dtype=np.uint8).tobytes())
    with (
        open(f, "rb") as fh,
        mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm,
        memoryview(mm) as mv,
    ):
        for start, end in ((0, 300_000), (5, 299_999), (4096, 8193)):
            view = mv[start:end]
            assert blocks.crc32(view) == zlib.crc32(mm[start:end])
            view.release()


@pytest.mark.parametrize("path", _paths())
def test_damage_in_a_long_compressed_payload_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    if path == "zlib":
        monkeypatch.setattr(blocks, "_fast_crc32", None)
    records = workload_records(40_000, seed=36)
    trace = make_trace(tmp_path / "t.iot", records, 8192, None, "zstd")
    extents = chunk_extents(trace)
    start, end = extents[2]
    # Long enough for the fast path: the check runs on the compressed bytes.
    assert end - start > 4 * blocks.FAST_CRC_MIN
    with open_trace(trace) as t:
        assert t.read_all().tobytes() == records.tobytes()
    data = bytearray(trace.read_bytes())
    data[(start + end) // 2] ^= 0x01
    trace.write_bytes(data)
    with (
        pytest.raises(TraceFormatError, match="chunk 2: payload checksum mismatch"),
        open_trace(trace) as t,
    ):
        t.read_all()
