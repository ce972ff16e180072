"""The `.iot` file layout (docs/trace-format.md, format versions 1 to 3): its constants, the
header and footer JSON as types, and the encoding of header, chunk head and footer.

Everything here is shared by the reader (`reader`), the writer (`writer`), the damage
scan (`scan`) and repair (`check`); the constants come from schemas/trace_record.toml.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

import schemas
from base.errors import IotapeError

_FILE = schemas.file_constants()
# The newest version (compressed chunks); a file of plain chunks is PLAIN_VERSION.
VERSION: int = int(_FILE["version"])
PLAIN_VERSION: int = int(_FILE["plain_version"])
# A file that may hold wake records (and compressed chunks): WAKE_OP in `op`.
WAKE_VERSION: int = int(_FILE["wake_version"])
# A file that may also hold sched records (SCHED_OP): a capture with wake records.
SCHED_VERSION: int = int(_FILE["sched_version"])
VERSIONS: tuple[int, ...] = (PLAIN_VERSION, VERSION, WAKE_VERSION, SCHED_VERSION)
WAKE_OP: int = int(schemas.raw()["wake"]["op"])
SCHED_OP: int = int(schemas.raw()["sched"]["op"])
# sched record counter -> the record column that holds it
SCHED_FIELDS: dict[str, str] = dict(schemas.raw()["sched"]["fields"])
HEADER_MAGIC: bytes = _FILE["header_magic"].encode("ascii")
TRAILER_MAGIC: bytes = _FILE["trailer_magic"].encode("ascii")
CHUNK_MAGIC: int = int(_FILE["chunk_magic"])
FOOTER_MAGIC: int = int(_FILE["footer_magic"])
CHUNK_HEADER_SIZE: int = int(_FILE["chunk_header_size"])
ZCHUNK_MAGIC: int = int(_FILE["zchunk_magic"])
ZCHUNK_HEADER_SIZE: int = int(_FILE["zchunk_header_size"])
FOOTER_HEADER_SIZE: int = int(_FILE["footer_header_size"])
MAX_CHUNK_RECORDS: int = int(_FILE["max_chunk_records"])
MAX_JSON_BYTES: int = int(_FILE["max_json_bytes"])
FORMAT_NAME = schemas.file_constants()["format"]
DEFAULT_CHUNK_RECORDS = 8192

RECORD_DTYPE: np.dtype = schemas.record_dtype()
RECORD_SIZE: int = RECORD_DTYPE.itemsize
LAYOUT_VERSION: int = schemas.layout_version()

# magic[8] version record_size json_len json_crc
HEADER_FIXED = struct.Struct("<8sIIII")
# magic count seq payload_crc head_crc; head_crc covers the first 20 bytes
CHUNK_HEAD = struct.Struct("<IIQII")
# magic count seq stored_len codec transform zero payload_crc head_crc; head_crc
# covers the first 28 bytes, payload_crc the stored (compressed) bytes
ZCHUNK_HEAD = struct.Struct("<IIQIBBHII")
# magic json_len json_crc zero
FOOTER_HEAD = struct.Struct("<IIII")
# footer_offset magic[8]
TRAILER = struct.Struct("<Q8s")
TRAILER_SIZE = TRAILER.size

assert HEADER_FIXED.size % 8 == 0
assert CHUNK_HEAD.size == CHUNK_HEADER_SIZE
assert ZCHUNK_HEAD.size == ZCHUNK_HEADER_SIZE
assert FOOTER_HEAD.size == FOOTER_HEADER_SIZE


class TraceHeader(TypedDict, total=False):
    """The header JSON (docs/trace-format.md, "Header JSON"); a producer may add keys."""

    format: str
    version: int
    record: dict[str, int]
    mono_start_ns: int
    wall_start_ns: int
    host: str | None
    kernel: str | None
    command_line: list[str]
    recorder: dict[str, Any]
    devices: list[dict[str, Any]]
    filters: dict[str, Any]
    streams: dict[str, str]
    labels: list[Any]
    metadata: dict[str, Any]


class TraceFooter(TypedDict, total=False):
    """The footer JSON (docs/trace-format.md, "Footer JSON"); repair adds its keys."""

    events: int
    chunks: int
    lost: dict[str, int]
    pre_start: int
    completion_unseen: int
    in_flight_at_stop: int
    unattributed: int
    device_flushes: dict[str, int]
    unpaired: dict[str, int]
    skipped: Any
    end_mono_ns: int
    end_wall_ns: int
    duration_ns: int
    stop_reason: str
    cpu: dict[str, Any]
    wakes: int  # a version 3 file's wake records (within events)
    wakes_lost: int  # wake records the ring buffer had no room for
    repaired: bool
    original_stop_reason: str | None
    dropped_events: int
    dropped_chunks: int
    damaged_bytes: int
    damaged_file: str | None
    gaps: list[dict[str, Any]]
    repair_reason: str
    end_estimated: bool


class TraceFormatError(IotapeError):
    """A trace file that is not valid: one line naming the file, the byte offset and the fault."""

    def __init__(self, path: str | os.PathLike, offset: int, reason: str) -> None:
        self.path = str(path)
        self.offset = offset
        self.reason = reason
        super().__init__(f"{self.path}: byte {offset}: {reason}")


class Defect(Exception):
    """Internal: a fault at a byte offset, before the file name is attached."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


def pad8(n: int) -> int:
    return (-n) % 8


def _padding_columns(dtype: np.dtype) -> np.ndarray:
    """Byte positions in a record that no field covers; the format wants them zero."""
    covered = np.zeros(dtype.itemsize, dtype=bool)
    for sub, off, *_ in (dtype.fields or {}).values():
        covered[off : off + sub.itemsize] = True
    return np.flatnonzero(~covered)


PAD_COLUMNS = _padding_columns(RECORD_DTYPE)


def _json_bytes(obj: Mapping[str, object]) -> bytes:
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_JSON_BYTES:
        raise IotapeError(f"trace JSON is {len(data)} bytes, over the {MAX_JSON_BYTES} limit")
    return data


def encode_header(header: Mapping[str, object], version: int = PLAIN_VERSION) -> bytes:
    """The header block for `header`, with the format keys filled in; `version` 2 for a
    file that may hold compressed chunks."""
    full: dict[str, object] = {
        "format": FORMAT_NAME,
        "version": version,
        "record": {"size": RECORD_SIZE, "layout_version": LAYOUT_VERSION},
    }
    full.update((k, v) for k, v in header.items() if k not in full)
    data = _json_bytes(full)
    fixed = HEADER_FIXED.pack(HEADER_MAGIC, version, RECORD_SIZE, len(data), zlib.crc32(data))
    return fixed + data + bytes(pad8(len(fixed) + len(data)))


def encode_chunk_head(payload: memoryview | bytes, count: int, seq: int) -> bytes:
    first = struct.pack("<IIQI", CHUNK_MAGIC, count, seq, zlib.crc32(payload))
    return first + struct.pack("<I", zlib.crc32(first))


def encode_zchunk_head(stored: bytes, count: int, seq: int, codec: int, transform: int) -> bytes:
    """The header of a compressed chunk; the stored bytes follow, zero-padded to 8."""
    first = ZCHUNK_HEAD.pack(
        ZCHUNK_MAGIC, count, seq, len(stored), codec, transform, 0, zlib.crc32(stored), 0
    )[:-4]
    return first + struct.pack("<I", zlib.crc32(first))


def encode_footer(footer: Mapping[str, object], offset: int) -> bytes:
    """Footer block plus trailer, for a footer that starts at byte `offset`."""
    data = _json_bytes(footer)
    head = FOOTER_HEAD.pack(FOOTER_MAGIC, len(data), zlib.crc32(data), 0)
    body = head + data + bytes(pad8(len(head) + len(data)))
    return body + TRAILER.pack(offset, TRAILER_MAGIC)


def default_streams() -> dict[str, str]:
    return {str(k): v for k, v in sorted(schemas.stream_names().items())}
