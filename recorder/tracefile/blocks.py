"""Decode and check the blocks of a `.iot` file: header, chunk, footer, trailer.

Each function checks one block whole and raises `Defect` (a byte offset and a
reason) at the first fault; every length read from the file is bounded by the file's
size before it is used. The reader (`reader`) and the damage scan (`scan`) build on these.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from recorder.tracefile import codec
from recorder.tracefile.format import (
    CHUNK_HEAD,
    CHUNK_HEADER_SIZE,
    CHUNK_MAGIC,
    FOOTER_HEAD,
    FOOTER_HEADER_SIZE,
    FOOTER_MAGIC,
    FORMAT_NAME,
    HEADER_FIXED,
    HEADER_MAGIC,
    LAYOUT_VERSION,
    MAX_CHUNK_RECORDS,
    MAX_JSON_BYTES,
    RECORD_DTYPE,
    RECORD_SIZE,
    TRAILER,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    VERSIONS,
    ZCHUNK_HEAD,
    ZCHUNK_HEADER_SIZE,
    ZCHUNK_MAGIC,
    Defect,
    TraceFooter,
    TraceHeader,
    pad8,
)

# Payloads at least this long go to libdeflate's CRC-32 where it is installed: its
# PCLMULQDQ folding checks a trace's chunks ~5x as fast as zlib 1.2's (a 29.8 MiB
# trace, warm, best of 5: 1.3 against 6.5 ms; ingest checks every chunk on its
# critical path, issue 36). The same CRC-32 (the gzip polynomial); shorter blocks (headers, JSON)
# stay with zlib, which costs less than the call through ctypes there.
FAST_CRC_MIN = 4096
_DEFLATE = ("libdeflate.so.0", "libdeflate.so")


def _libdeflate_crc32() -> Any:
    """libdeflate's `libdeflate_crc32(crc, buf, len)`, or None where it is missing."""
    for name in _DEFLATE:
        try:
            f = ctypes.CDLL(name).libdeflate_crc32
        except (OSError, AttributeError):
            continue
        f.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
        f.restype = ctypes.c_uint32
        return f
    return None


_fast_crc32 = _libdeflate_crc32()


def crc32(data: Any) -> int:
    """zlib.crc32(data), by libdeflate for long buffers where it is installed (a
    ctypes call lets go of the GIL, as zlib's does)."""
    n = len(data)
    if _fast_crc32 is None or n < FAST_CRC_MIN:
        return zlib.crc32(data)
    # A view of the bytes where they are (a read-only map has no ctypes pointer).
    buf = np.frombuffer(data, dtype=np.uint8)
    return int(_fast_crc32(0, buf.ctypes.data, buf.nbytes))


@dataclass
class ChunkInfo:
    offset: int
    seq: int
    count: int
    end: int
    # A compressed chunk's records, decoded when it was checked; None for a plain chunk.
    records: np.ndarray | None = None
    # Its codec's name ("none" for a plain chunk).
    codec: str = "none"
    # A delta-split chunk checked without decoding its records: its planes
    # (codec.decode_columns); then `records` is None.
    planes: np.ndarray | None = None


class Unsupported(Defect):
    """A chunk that is intact but written by a newer iotape (an unknown codec): not
    damage, so repair must not cut it; readers refuse the file with one line."""


def chunk_records(mm: Any, info: ChunkInfo) -> np.ndarray:
    """A checked chunk's records: a read-only view of the map for a plain chunk."""
    if info.records is not None:
        return info.records
    if info.planes is not None:
        records = codec.decode_records(info.planes, info.count)
        records.flags.writeable = False
        return records
    return np.frombuffer(
        mm, dtype=RECORD_DTYPE, count=info.count, offset=info.offset + CHUNK_HEADER_SIZE
    )


def chunk_columns(mm: Any, infos: list[ChunkInfo], count: int) -> dict[str, np.ndarray]:
    """Checked chunks' records (`count` in all) as one contiguous array per field."""
    fields = RECORD_DTYPE.fields
    assert fields is not None  # a record dtype
    out = {name: np.empty(count, f[0]) for name, f in fields.items()}
    at = 0
    for info in infos:
        if info.planes is not None:
            codec.decode_columns(info.planes, info.count, out, at)
        else:
            records = chunk_records(mm, info)
            for name in fields:
                out[name][at : at + info.count] = records[name]
        at += info.count
    return out


def parse_header(mm: mmap.mmap | None, size: int) -> tuple[TraceHeader, int]:
    if mm is None:
        raise Defect(0, f"file is {size} bytes, shorter than a trace header")
    magic, version, record_size, json_len, json_crc = HEADER_FIXED.unpack_from(mm, 0)
    if magic != HEADER_MAGIC:
        hint = ""
        if magic[:6] == HEADER_MAGIC[:6]:
            hint = " (line endings changed? copy trace files in binary mode)"
        raise Defect(0, f"not an iotape trace: magic is {magic!r}, expected {HEADER_MAGIC!r}{hint}")
    if version not in VERSIONS:
        raise Defect(
            8,
            f"trace format version {version} is not supported "
            f"(this iotape reads versions {', '.join(map(str, VERSIONS))})",
        )
    if record_size != RECORD_SIZE:
        raise Defect(
            12, f"record size {record_size} does not match this iotape's {RECORD_SIZE}-byte record"
        )
    start = HEADER_FIXED.size
    if json_len > MAX_JSON_BYTES:
        raise Defect(16, f"header JSON length {json_len} is over the {MAX_JSON_BYTES} limit")
    end = start + json_len
    data_offset = end + pad8(end)
    if data_offset > size:
        raise Defect(size, f"file ends inside the header ({json_len}-byte JSON at byte {start})")
    with memoryview(mm) as mv:
        data = mv[start:end]
        try:
            if zlib.crc32(data) != json_crc:
                raise Defect(start, "header checksum mismatch")
            if any(mv[end:data_offset]):
                raise Defect(end, "header padding is not zero")
            header = _load_json(data, start, "header")
        finally:
            data.release()
    if header.get("format") != FORMAT_NAME:
        raise Defect(start, f"header format is {header.get('format')!r}, expected {FORMAT_NAME!r}")
    if header.get("version") != version:
        raise Defect(
            start, f"header JSON says version {header.get('version')!r}, file says {version}"
        )
    rec = header.get("record")
    if not isinstance(rec, dict):
        rec = {}
    layout = rec.get("layout_version")
    if layout != LAYOUT_VERSION:
        raise Defect(
            start,
            f"record layout_version {layout!r} is not supported "
            f"(this iotape reads layout_version {LAYOUT_VERSION})",
        )
    if rec.get("size") != RECORD_SIZE:
        raise Defect(
            start, f"header JSON says record size {rec.get('size')!r}, expected {RECORD_SIZE}"
        )
    # Checked as far as reading records needs; the rest is the producers' JSON.
    return cast(TraceHeader, header), data_offset


def _load_json(data: memoryview, offset: int, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise Defect(offset, f"{what} JSON does not parse: {type(e).__name__}") from None
    if not isinstance(obj, dict):
        raise Defect(offset, f"{what} JSON is a {type(obj).__name__}, not an object")
    return obj


def parse_footer(mm: mmap.mmap, pos: int, size: int) -> tuple[TraceFooter, int]:
    """The footer at `pos` and the offset just after it (where the trailer goes)."""
    if size - pos < FOOTER_HEADER_SIZE:
        raise Defect(pos, "footer: file ends inside the footer header")
    magic, json_len, json_crc, zero = FOOTER_HEAD.unpack_from(mm, pos)
    if magic != FOOTER_MAGIC:
        raise Defect(pos, "footer: bad magic")
    if zero != 0:
        raise Defect(pos + 12, "footer: reserved field is not zero")
    start = pos + FOOTER_HEADER_SIZE
    if json_len > MAX_JSON_BYTES:
        raise Defect(pos + 4, f"footer: JSON length {json_len} is over the {MAX_JSON_BYTES} limit")
    end = start + json_len
    padded = end + pad8(end)
    if padded > size:
        raise Defect(size, f"footer: file ends inside the footer ({json_len}-byte JSON)")
    with memoryview(mm) as mv:
        data = mv[start:end]
        try:
            if zlib.crc32(data) != json_crc:
                raise Defect(start, "footer: checksum mismatch")
            if any(mv[end:padded]):
                raise Defect(end, "footer: padding is not zero")
            return cast(TraceFooter, _load_json(data, start, "footer")), padded
        finally:
            data.release()


def footer_from_trailer(
    mm: mmap.mmap, data_offset: int, size: int
) -> tuple[TraceFooter, int] | None:
    """The footer the trailer points at and its offset, or None; a hint only, iteration
    checks it."""
    if size - data_offset < FOOTER_HEADER_SIZE + TRAILER_SIZE:
        return None
    footer_offset, magic = TRAILER.unpack_from(mm, size - TRAILER_SIZE)
    if magic != TRAILER_MAGIC or not data_offset <= footer_offset <= size - TRAILER_SIZE:
        return None
    try:
        footer, end = parse_footer(mm, footer_offset, size - TRAILER_SIZE)
    except Defect:
        return None
    return (footer, footer_offset) if end == size - TRAILER_SIZE else None


def declared_gaps(footer: Mapping[str, Any] | None) -> dict[int, int]:
    """{first missing chunk: chunks missing} for each gap a repair recorded in `footer`."""
    out: dict[int, int] = {}
    for g in (footer or {}).get("gaps") or []:
        first = g.get("first_chunk") if isinstance(g, dict) else None
        n = g.get("chunks") if isinstance(g, dict) else None
        if isinstance(first, int) and isinstance(n, int) and first >= 0 and n > 0:
            out[first] = n
    return out


def _check_seq(pos: int, seq: int, file_seq: int, jump: int | None) -> None:
    later_ok = file_seq > seq if jump is None else file_seq == seq + jump
    if file_seq != seq and not later_ok:
        raise Defect(pos + 8, f"chunk {seq}: sequence number is {file_seq}, expected {seq}")


def peek_head(mv: memoryview, pos: int, stop: int) -> tuple[int, int] | None:
    """(seq, count) of the chunk header at `pos` if its header CRC and count hold."""
    (magic,) = struct.unpack_from("<I", mv, pos) if stop - pos >= 4 else (0,)
    if magic == ZCHUNK_MAGIC and stop - pos >= ZCHUNK_HEADER_SIZE:
        _, count, seq, *_, head_crc = ZCHUNK_HEAD.unpack_from(mv, pos)
        size = ZCHUNK_HEADER_SIZE
    elif magic == CHUNK_MAGIC and stop - pos >= CHUNK_HEADER_SIZE:
        _, count, seq, _, head_crc = CHUNK_HEAD.unpack_from(mv, pos)
        size = CHUNK_HEADER_SIZE
    else:
        return None
    if zlib.crc32(mv[pos : pos + size - 4]) != head_crc or not 1 <= count <= MAX_CHUNK_RECORDS:
        return None
    return seq, count


def check_chunk(
    mv: memoryview, pos: int, size: int, seq: int, jump: int | None = 0, decode: bool = True
) -> ChunkInfo:
    """The chunk at `pos` (plain or compressed), checked whole. Chunk `seq` is expected
    there; chunk `seq + jump` is accepted too (the chunks between are known to be
    missing), and with `jump=None` any later one (a scan that goes on past damage).
    `decode` False leaves a delta-split chunk's planes undecoded (ChunkInfo.planes)."""
    if size - pos >= 4 and struct.unpack_from("<I", mv, pos)[0] == ZCHUNK_MAGIC:
        return _check_zchunk(mv, pos, size, seq, jump, decode)
    if size - pos < CHUNK_HEADER_SIZE:
        raise Defect(pos, f"chunk {seq}: truncated: file ends inside the chunk header")
    _, count, file_seq, payload_crc, head_crc = CHUNK_HEAD.unpack_from(mv, pos)
    if zlib.crc32(mv[pos : pos + CHUNK_HEADER_SIZE - 4]) != head_crc:
        raise Defect(pos, f"chunk {seq}: header checksum mismatch")
    if not 1 <= count <= MAX_CHUNK_RECORDS:
        raise Defect(
            pos + 4, f"chunk {seq}: record count {count} is outside 1..{MAX_CHUNK_RECORDS}"
        )
    _check_seq(pos, seq, file_seq, jump)
    start = pos + CHUNK_HEADER_SIZE
    end = start + count * RECORD_SIZE
    if end > size:
        raise Defect(
            pos,
            f"chunk {seq}: truncated: file ends {size - start} bytes into its "
            f"{count * RECORD_SIZE}-byte payload",
        )
    if crc32(mv[start:end]) != payload_crc:
        raise Defect(pos, f"chunk {seq}: payload checksum mismatch")
    return ChunkInfo(offset=pos, seq=file_seq, count=count, end=end)


def _check_zchunk(
    mv: memoryview, pos: int, size: int, seq: int, jump: int | None, decode: bool = True
) -> ChunkInfo:
    if size - pos < ZCHUNK_HEADER_SIZE:
        raise Defect(pos, f"chunk {seq}: truncated: file ends inside the chunk header")
    _, count, file_seq, stored, cid, tid, zero, payload_crc, head_crc = ZCHUNK_HEAD.unpack_from(
        mv, pos
    )
    if zlib.crc32(mv[pos : pos + ZCHUNK_HEADER_SIZE - 4]) != head_crc:
        raise Defect(pos, f"chunk {seq}: header checksum mismatch")
    if not 1 <= count <= MAX_CHUNK_RECORDS:
        raise Defect(
            pos + 4, f"chunk {seq}: record count {count} is outside 1..{MAX_CHUNK_RECORDS}"
        )
    if zero or stored > count * RECORD_SIZE + (count >> 4) + 1024:
        raise Defect(pos + 20, f"chunk {seq}: stored length {stored} or reserved bytes invalid")
    _check_seq(pos, seq, file_seq, jump)
    start = pos + ZCHUNK_HEADER_SIZE
    end = start + stored
    # Padding by the stored length, not the offset: a chunk moved by damage stays whole.
    padded = end + pad8(stored)
    if padded > size:
        raise Defect(
            pos,
            f"chunk {seq}: truncated: file ends {size - start} bytes into its "
            f"{stored}-byte compressed payload",
        )
    if crc32(mv[start:end]) != payload_crc:
        raise Defect(pos, f"chunk {seq}: payload checksum mismatch")
    if any(mv[end:padded]):
        raise Defect(end, f"chunk {seq}: padding is not zero")
    why = codec.known(cid, tid)
    if why is not None:
        raise Unsupported(pos + 20, f"chunk {seq}: {why}; a newer iotape wrote this file")
    got = codec.decompress(cid, tid, mv[start:end], count, pos, seq, decode)
    planes = got if got.dtype == np.uint8 else None
    return ChunkInfo(
        offset=pos,
        seq=file_seq,
        count=count,
        end=padded,
        records=None if planes is not None else got,
        codec=codec.CODECS[cid],
        planes=planes,
    )


def check_trailer(mm: mmap.mmap, pos: int, size: int, footer_offset: int) -> None:
    if size - pos < TRAILER_SIZE:
        raise Defect(pos, "trailer: file ends inside the trailer")
    offset, magic = TRAILER.unpack_from(mm, pos)
    if magic != TRAILER_MAGIC:
        raise Defect(pos + 8, "trailer: bad magic")
    if offset != footer_offset:
        raise Defect(pos, f"trailer: points at byte {offset}, the footer is at {footer_offset}")
    if pos + TRAILER_SIZE != size:
        raise Defect(
            pos + TRAILER_SIZE, f"{size - pos - TRAILER_SIZE} bytes of garbage after the trailer"
        )
