"""Read and write `.iot` trace files (docs/trace-format.md, format version 1).

The writer is for producers that can afford to write a whole file before it is
seen (importers, the bpftrace backend): it writes beside the target and renames
into place. The C loader writes in place instead, because a chunk is its unit of
crash safety; `scan()` and `iotape trace check --repair` deal with what it leaves.

The reader memory-maps the file and hands out chunks as read-only numpy views,
so iterating a multi-GB trace costs one chunk of address space at a time, and
every length read from the file is bounded by the file's size before it is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import struct
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

import schemas
from iotape.errors import IotapeError

_FILE = schemas.file_constants()
VERSION: int = int(_FILE["version"])
HEADER_MAGIC: bytes = _FILE["header_magic"].encode("ascii")
TRAILER_MAGIC: bytes = _FILE["trailer_magic"].encode("ascii")
CHUNK_MAGIC: int = int(_FILE["chunk_magic"])
FOOTER_MAGIC: int = int(_FILE["footer_magic"])
CHUNK_HEADER_SIZE: int = int(_FILE["chunk_header_size"])
FOOTER_HEADER_SIZE: int = int(_FILE["footer_header_size"])
MAX_CHUNK_RECORDS: int = int(_FILE["max_chunk_records"])
MAX_JSON_BYTES: int = int(_FILE["max_json_bytes"])
FORMAT_NAME = schemas.file_constants()["format"]
DEFAULT_CHUNK_RECORDS = 8192

RECORD_DTYPE: np.dtype = schemas.record_dtype()
RECORD_SIZE: int = RECORD_DTYPE.itemsize
LAYOUT_VERSION: int = schemas.layout_version()

# magic[8] version record_size json_len json_crc
_HEADER_FIXED = struct.Struct("<8sIIII")
# magic count seq payload_crc head_crc; head_crc covers the first 20 bytes
_CHUNK_HEAD = struct.Struct("<IIQII")
# magic json_len json_crc zero
_FOOTER_HEAD = struct.Struct("<IIII")
# footer_offset magic[8]
_TRAILER = struct.Struct("<Q8s")
TRAILER_SIZE = _TRAILER.size

assert _HEADER_FIXED.size % 8 == 0
assert _CHUNK_HEAD.size == CHUNK_HEADER_SIZE
assert _FOOTER_HEAD.size == FOOTER_HEADER_SIZE


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


def _pad8(n: int) -> int:
    return (-n) % 8


def _padding_columns(dtype: np.dtype) -> np.ndarray:
    """Byte positions in a record that no field covers; the format wants them zero."""
    covered = np.zeros(dtype.itemsize, dtype=bool)
    for name in dtype.names:
        sub, off = dtype.fields[name][:2]
        covered[off : off + sub.itemsize] = True
    return np.flatnonzero(~covered)


_PAD_COLUMNS = _padding_columns(RECORD_DTYPE)


# --------------------------------------------------------------------------- encoding


def _json_bytes(obj: dict) -> bytes:
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_JSON_BYTES:
        raise IotapeError(f"trace JSON is {len(data)} bytes, over the {MAX_JSON_BYTES} limit")
    return data


def encode_header(header: dict) -> bytes:
    """The header block for `header`, with the format keys filled in."""
    full = {
        "format": FORMAT_NAME,
        "version": VERSION,
        "record": {"size": RECORD_SIZE, "layout_version": LAYOUT_VERSION},
    }
    full.update((k, v) for k, v in header.items() if k not in full)
    data = _json_bytes(full)
    fixed = _HEADER_FIXED.pack(HEADER_MAGIC, VERSION, RECORD_SIZE, len(data), zlib.crc32(data))
    return fixed + data + bytes(_pad8(len(fixed) + len(data)))


def encode_chunk_head(payload: memoryview | bytes, count: int, seq: int) -> bytes:
    first = struct.pack("<IIQI", CHUNK_MAGIC, count, seq, zlib.crc32(payload))
    return first + struct.pack("<I", zlib.crc32(first))


def encode_footer(footer: dict, offset: int) -> bytes:
    """Footer block plus trailer, for a footer that starts at byte `offset`."""
    data = _json_bytes(footer)
    head = _FOOTER_HEAD.pack(FOOTER_MAGIC, len(data), zlib.crc32(data), 0)
    body = head + data + bytes(_pad8(len(head) + len(data)))
    return body + _TRAILER.pack(offset, TRAILER_MAGIC)


def default_streams() -> dict[str, str]:
    return {str(k): v for k, v in sorted(schemas.stream_names().items())}


# --------------------------------------------------------------------------- writer


class TraceWriter:
    """Write a trace to a temporary file beside `path`; `close()` renames it into place.

    Example:
        with TraceWriter("t.iot", {"mono_start_ns": 0, "wall_start_ns": now, ...}) as w:
            w.write(records)
            w.close({"stop_reason": "command-exit"})

    Leaving the `with` block by an exception removes the temporary file. Leaving it
    normally without `close()` closes with an empty footer.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        header: dict,
        chunk_records: int = DEFAULT_CHUNK_RECORDS,
    ) -> None:
        if not 1 <= chunk_records <= MAX_CHUNK_RECORDS:
            raise ValueError(f"chunk_records must be 1..{MAX_CHUNK_RECORDS}, not {chunk_records}")
        self.path = Path(path)
        self.header = _with_defaults(header)
        self.events = 0
        self.chunks = 0
        self._buf = np.zeros(chunk_records, dtype=RECORD_DTYPE)
        self._fill = 0
        head = encode_header(self.header)
        fd, tmp = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
        )
        self._tmp = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        try:
            self._file.write(head)
        except BaseException:
            self.abort()
            raise
        self._offset = len(head)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif self._file is not None:
            self.close()

    def write(self, records: np.ndarray) -> None:
        """Append records (dtype `schemas.record_dtype()`); full chunks go to disk at once."""
        if self._file is None:
            raise ValueError(f"{self.path}: writer is closed")
        if records.dtype != RECORD_DTYPE:
            raise TypeError(f"records must have dtype schemas.record_dtype(), not {records.dtype}")
        records = records.reshape(-1)
        cap = len(self._buf)
        i, n = 0, len(records)
        while i < n:
            take = min(cap - self._fill, n - i)
            self._buf[self._fill : self._fill + take] = records[i : i + take]
            self._fill += take
            i += take
            if self._fill == cap:
                self._flush_chunk()

    def _flush_chunk(self) -> None:
        if not self._fill:
            return
        chunk = self._buf[: self._fill]
        raw = chunk.view(np.uint8).reshape(self._fill, RECORD_SIZE)
        # Records built by callers may carry stray bytes in the padding; the format says zero.
        raw[:, _PAD_COLUMNS] = 0
        payload = memoryview(raw.reshape(-1))
        self._file.write(encode_chunk_head(payload, self._fill, self.chunks))
        self._file.write(payload)
        self._offset += CHUNK_HEADER_SIZE + len(payload)
        self.events += self._fill
        self.chunks += 1
        self._fill = 0

    def close(self, footer: dict | None = None) -> Path:
        """Write the last chunk, the footer (events and chunks filled in) and the trailer,
        then rename the file into place. Returns the final path."""
        if self._file is None:
            raise ValueError(f"{self.path}: writer is closed")
        try:
            self._flush_chunk()
            full = dict(footer or {})
            full["events"] = self.events
            full["chunks"] = self.chunks
            self._file.write(encode_footer(full, self._offset))
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            # mkstemp makes the file 0600; a trace should get the usual permissions.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self._tmp, 0o666 & ~umask)
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        _fsync_dir(self.path.parent)
        return self.path

    def abort(self) -> None:
        """Drop everything written so far; the target path is left as it was."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        with contextlib.suppress(FileNotFoundError):
            self._tmp.unlink()


def _with_defaults(header: dict) -> dict:
    for key in ("mono_start_ns", "wall_start_ns", "recorder"):
        if key not in header:
            raise ValueError(f"trace header needs {key!r}")
    full = {
        "host": None,
        "kernel": None,
        "command_line": [],
        "devices": [],
        "filters": {},
        "streams": default_streams(),
        "labels": [],
        "metadata": {},
    }
    full.update(header)
    return full


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_trace(
    path: str | os.PathLike, header: dict, records: np.ndarray, footer: dict | None = None
) -> Path:
    """Write a whole trace in one call."""
    with TraceWriter(path, header) as w:
        w.write(records)
        return w.close(footer)


# --------------------------------------------------------------------------- reader


@dataclass
class ChunkInfo:
    offset: int
    seq: int
    count: int
    end: int


class Trace:
    """An open trace file. Use `open_trace()`.

    `header` is the header JSON. `footer` is the footer JSON when the file ends with
    a valid trailer and footer, else None; iterating checks it against the chunks.
    With `strict=True` (the default) iteration raises `TraceFormatError` at the first
    fault, a missing footer included; with `strict=False` it stops there and leaves
    the fault in `problem`.
    """

    def __init__(self, path: str | os.PathLike, strict: bool = True) -> None:
        self.path = str(path)
        self.strict = strict
        self.problem: TraceFormatError | None = None
        self._mm: mmap.mmap | None = None
        with open(path, "rb") as f:
            self.file_size = os.fstat(f.fileno()).st_size
            if self.file_size >= _HEADER_FIXED.size:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self.header, self.data_offset = _parse_header(self._mm, self.file_size)
        except Defect as d:
            self.close()
            raise self._error(d) from None
        except BaseException:
            self.close()
            raise
        if hasattr(mmap, "MADV_SEQUENTIAL"):
            with contextlib.suppress(OSError):
                self._mm.madvise(mmap.MADV_SEQUENTIAL)
        hint = footer_from_trailer(self._mm, self.data_offset, self.file_size)
        self.footer: dict | None = hint[0] if hint else None
        # Chunks a repair left out: the sequence numbers may jump over them, and only there.
        self.gaps: dict[int, int] = declared_gaps(self.footer)

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._mm is not None:
            # Arrays handed out still view the map; then the map lives until they go.
            with contextlib.suppress(BufferError):
                self._mm.close()
            self._mm = None

    def _error(self, d: Defect) -> TraceFormatError:
        return TraceFormatError(self.path, d.offset, d.reason)

    def _walk(self) -> Iterator[tuple[ChunkInfo, np.ndarray]]:
        """Valid chunks in order; on a fault, raise or record it per `strict`."""
        if self._mm is None:
            raise ValueError(f"{self.path}: trace is closed")
        self.problem = None
        try:
            yield from _walk_chunks(
                self._mm, self.data_offset, self.file_size, self._set_footer, self.gaps
            )
        except Defect as d:
            self.problem = self._error(d)
            if self.strict:
                raise TraceFormatError(
                    self.path, d.offset, f"{d.reason}; {self.repair_hint}"
                ) from None

    @property
    def repair_hint(self) -> str:
        return f"run `iotape trace check --repair {self.path}` to keep every intact chunk"

    def _set_footer(self, footer: dict) -> None:
        self.footer = footer

    def iter_chunks(self) -> Iterator[np.ndarray]:
        """Each chunk's records as a read-only numpy view of the mapped file."""
        for _, records in self._walk():
            yield records

    def read_all(self) -> np.ndarray:
        """All records in one (copied) array."""
        parts = list(self.iter_chunks())
        # Not np.concatenate: its dtype promotion packs the fields and loses the layout.
        # Bytes are copied whole, since a field-wise copy would leave the padding unset.
        out = np.empty(sum(len(p) for p in parts), dtype=RECORD_DTYPE)
        raw = out.view(np.uint8).reshape(len(out), RECORD_SIZE)
        at = 0
        for p in parts:
            raw[at : at + len(p)] = p.view(np.uint8).reshape(len(p), RECORD_SIZE)
            at += len(p)
        return out

    def to_arrow_batches(self) -> Iterator[pa.RecordBatch]:
        """One RecordBatch per chunk, with exactly `schemas.arrow_schema()`."""
        for records in self.iter_chunks():
            yield records_to_arrow(records)

    @property
    def complete(self) -> bool:
        """True when the file ends with a footer and trailer (checked fully by iteration)."""
        return self.footer is not None and self.problem is None


def open_trace(path: str | os.PathLike, strict: bool = True) -> Trace:
    """Open a trace and check its header. Raises `TraceFormatError` for a bad file.

    Example:
        with open_trace("t.iot") as t:
            for records in t.iter_chunks():
                ...
    """
    try:
        return Trace(path, strict=strict)
    except FileNotFoundError:
        raise IotapeError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IotapeError(f"{path}: is a directory, not a trace file") from None
    except PermissionError:
        raise IotapeError(f"{path}: permission denied") from None


def trace_sha256(path: str | os.PathLike) -> str:
    """A trace's identity, the store's run id for it: `content_sha256` where the
    file is a complete trace, else the SHA-256 of its bytes (a damaged trace)."""
    digest = content_sha256(path)
    if digest is not None:
        return digest
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def content_sha256(path: str | os.PathLike) -> str | None:
    """SHA-256 over what identifies a trace's content without reading its records:
    the header, every chunk header (record count, sequence number and the CRC-32 of
    its records) and the footer with the trailer. Two traces that differ anywhere in
    their records differ in a chunk's CRC. None when the file is not laid out as a
    complete trace (the caller then hashes the bytes, and reading it reports why)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < _HEADER_FIXED.size:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                _, data_offset = _parse_header(mm, size)
            except Defect:
                return None
            h.update(mm[:data_offset])
            pos = data_offset
            while size - pos >= CHUNK_HEADER_SIZE:
                (magic, count) = struct.unpack_from("<II", mm, pos)
                if magic == FOOTER_MAGIC:
                    if mm[size - len(TRAILER_MAGIC) : size] != TRAILER_MAGIC:
                        return None
                    h.update(mm[pos:size])
                    return h.hexdigest()
                if magic != CHUNK_MAGIC or not 1 <= count <= MAX_CHUNK_RECORDS:
                    return None
                h.update(mm[pos : pos + CHUNK_HEADER_SIZE])
                pos += CHUNK_HEADER_SIZE + count * RECORD_SIZE
    return None


def _parse_header(mm: mmap.mmap | None, size: int) -> tuple[dict, int]:
    if mm is None:
        raise Defect(0, f"file is {size} bytes, shorter than a trace header")
    magic, version, record_size, json_len, json_crc = _HEADER_FIXED.unpack_from(mm, 0)
    if magic != HEADER_MAGIC:
        hint = ""
        if magic[:6] == HEADER_MAGIC[:6]:
            hint = " (line endings changed? copy trace files in binary mode)"
        raise Defect(0, f"not an iotape trace: magic is {magic!r}, expected {HEADER_MAGIC!r}{hint}")
    if version != VERSION:
        raise Defect(
            8,
            f"trace format version {version} is not supported "
            f"(this iotape reads version {VERSION})",
        )
    if record_size != RECORD_SIZE:
        raise Defect(
            12, f"record size {record_size} does not match this iotape's {RECORD_SIZE}-byte record"
        )
    start = _HEADER_FIXED.size
    if json_len > MAX_JSON_BYTES:
        raise Defect(16, f"header JSON length {json_len} is over the {MAX_JSON_BYTES} limit")
    end = start + json_len
    data_offset = end + _pad8(end)
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
    layout = rec.get("layout_version") if isinstance(rec, dict) else None
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
    return header, data_offset


def _load_json(data: memoryview, offset: int, what: str) -> dict:
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise Defect(offset, f"{what} JSON does not parse: {type(e).__name__}") from None
    if not isinstance(obj, dict):
        raise Defect(offset, f"{what} JSON is a {type(obj).__name__}, not an object")
    return obj


def parse_footer(mm: mmap.mmap, pos: int, size: int) -> tuple[dict, int]:
    """The footer at `pos` and the offset just after it (where the trailer goes)."""
    if size - pos < FOOTER_HEADER_SIZE:
        raise Defect(pos, "footer: file ends inside the footer header")
    magic, json_len, json_crc, zero = _FOOTER_HEAD.unpack_from(mm, pos)
    if magic != FOOTER_MAGIC:
        raise Defect(pos, "footer: bad magic")
    if zero != 0:
        raise Defect(pos + 12, "footer: reserved field is not zero")
    start = pos + FOOTER_HEADER_SIZE
    if json_len > MAX_JSON_BYTES:
        raise Defect(pos + 4, f"footer: JSON length {json_len} is over the {MAX_JSON_BYTES} limit")
    end = start + json_len
    padded = end + _pad8(end)
    if padded > size:
        raise Defect(size, f"footer: file ends inside the footer ({json_len}-byte JSON)")
    with memoryview(mm) as mv:
        data = mv[start:end]
        try:
            if zlib.crc32(data) != json_crc:
                raise Defect(start, "footer: checksum mismatch")
            if any(mv[end:padded]):
                raise Defect(end, "footer: padding is not zero")
            return _load_json(data, start, "footer"), padded
        finally:
            data.release()


def footer_from_trailer(mm: mmap.mmap, data_offset: int, size: int) -> tuple[dict, int] | None:
    """The footer the trailer points at and its offset, or None; a hint only, iteration
    checks it."""
    if size - data_offset < FOOTER_HEADER_SIZE + TRAILER_SIZE:
        return None
    footer_offset, magic = _TRAILER.unpack_from(mm, size - TRAILER_SIZE)
    if magic != TRAILER_MAGIC or not data_offset <= footer_offset <= size - TRAILER_SIZE:
        return None
    try:
        footer, end = parse_footer(mm, footer_offset, size - TRAILER_SIZE)
    except Defect:
        return None
    return (footer, footer_offset) if end == size - TRAILER_SIZE else None


def declared_gaps(footer: dict | None) -> dict[int, int]:
    """{first missing chunk: chunks missing} for each gap a repair recorded in `footer`."""
    out: dict[int, int] = {}
    for g in (footer or {}).get("gaps") or []:
        first = g.get("first_chunk") if isinstance(g, dict) else None
        n = g.get("chunks") if isinstance(g, dict) else None
        if isinstance(first, int) and isinstance(n, int) and first >= 0 and n > 0:
            out[first] = n
    return out


_RELEASE_BYTES = 16 << 20


def _release(mm: mmap.mmap, released: int, pos: int) -> int:
    """Drop the pages already read from this process, so a long file does not pile up
    in its resident memory. They stay in the page cache, and an array that still views
    them faults them back in from the file, unchanged."""
    end = pos - pos % mmap.PAGESIZE
    if end - released < _RELEASE_BYTES or not hasattr(mmap, "MADV_DONTNEED"):
        return released
    with contextlib.suppress(OSError):
        mm.madvise(mmap.MADV_DONTNEED, released, end - released)
    return end


def _walk_chunks(
    mm: mmap.mmap, pos: int, size: int, on_footer, gaps: dict[int, int]
) -> Iterator[tuple[ChunkInfo, np.ndarray]]:
    seq = 0
    chunks = 0
    events = 0
    released = 0
    with memoryview(mm) as mv:
        while True:
            if pos == size:
                raise Defect(
                    pos,
                    f"file ends after chunk {seq - 1} without a footer (cut short?)"
                    if seq
                    else "file ends after the header, with no chunks and no footer (cut short?)",
                )
            if size - pos < 4:
                raise Defect(pos, f"{size - pos} stray bytes where a chunk or footer should start")
            (magic,) = struct.unpack_from("<I", mm, pos)
            if magic == CHUNK_MAGIC:
                info = check_chunk(mv, pos, size, seq, gaps.get(seq, 0))
                records = np.frombuffer(
                    mm, dtype=RECORD_DTYPE, count=info.count, offset=pos + CHUNK_HEADER_SIZE
                )
                yield info, records
                events += info.count
                chunks += 1
                seq = info.seq + 1
                pos = info.end
                released = _release(mm, released, pos)
            elif magic == FOOTER_MAGIC:
                footer, end = parse_footer(mm, pos, size)
                _check_trailer(mm, end, size, pos)
                if footer.get("events") != events or footer.get("chunks") != chunks:
                    raise Defect(
                        pos,
                        f"footer says {footer.get('events')!r} events in {footer.get('chunks')!r} "
                        f"chunks, the file holds {events} in {chunks}",
                    )
                on_footer(footer)
                return
            else:
                what = "zero fill (power loss?)" if magic == 0 else "garbage or corruption"
                raise Defect(
                    pos,
                    f"chunk {seq}: expected a chunk or footer, found bytes "
                    f"{bytes(mv[pos : pos + 4]).hex(' ')} ({what})",
                )


def check_chunk(mv: memoryview, pos: int, size: int, seq: int, jump: int | None = 0) -> ChunkInfo:
    """The chunk at `pos`, checked whole. Chunk `seq` is expected there; chunk
    `seq + jump` is accepted too (the chunks between are known to be missing), and
    with `jump=None` any later one (a scan that goes on past damage)."""
    if size - pos < CHUNK_HEADER_SIZE:
        raise Defect(pos, f"chunk {seq}: truncated: file ends inside the chunk header")
    _, count, file_seq, payload_crc, head_crc = _CHUNK_HEAD.unpack_from(mv, pos)
    if zlib.crc32(mv[pos : pos + CHUNK_HEADER_SIZE - 4]) != head_crc:
        raise Defect(pos, f"chunk {seq}: header checksum mismatch")
    if not 1 <= count <= MAX_CHUNK_RECORDS:
        raise Defect(
            pos + 4, f"chunk {seq}: record count {count} is outside 1..{MAX_CHUNK_RECORDS}"
        )
    later_ok = file_seq > seq if jump is None else file_seq == seq + jump
    if file_seq != seq and not later_ok:
        raise Defect(pos + 8, f"chunk {seq}: sequence number is {file_seq}, expected {seq}")
    start = pos + CHUNK_HEADER_SIZE
    end = start + count * RECORD_SIZE
    if end > size:
        raise Defect(
            pos,
            f"chunk {seq}: truncated: file ends {size - start} bytes into its "
            f"{count * RECORD_SIZE}-byte payload",
        )
    if zlib.crc32(mv[start:end]) != payload_crc:
        raise Defect(pos, f"chunk {seq}: payload checksum mismatch")
    return ChunkInfo(offset=pos, seq=file_seq, count=count, end=end)


def _check_trailer(mm: mmap.mmap, pos: int, size: int, footer_offset: int) -> None:
    if size - pos < TRAILER_SIZE:
        raise Defect(pos, "trailer: file ends inside the trailer")
    offset, magic = _TRAILER.unpack_from(mm, pos)
    if magic != TRAILER_MAGIC:
        raise Defect(pos + 8, "trailer: bad magic")
    if offset != footer_offset:
        raise Defect(pos, f"trailer: points at byte {offset}, the footer is at {footer_offset}")
    if pos + TRAILER_SIZE != size:
        raise Defect(
            pos + TRAILER_SIZE, f"{size - pos - TRAILER_SIZE} bytes of garbage after the trailer"
        )


# --------------------------------------------------------------------------- arrow


def decode_comm(comm: np.ndarray) -> pa.StringArray:
    """char[16] names to Arrow strings, cut at the first NUL, without a per-row loop."""
    n = len(comm)
    raw = np.ascontiguousarray(comm).view(np.uint8).reshape(n, 16)
    is_nul = raw == 0
    lengths = np.where(is_nul.any(axis=1), is_nul.argmax(axis=1), 16)
    keep = np.arange(16) < lengths[:, None]
    data = raw[keep]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    arr = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    if (data >= 0x80).any():
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:
            # Rare: a task name that is not UTF-8. Keep its bytes visible, escaped.
            return pa.array(
                [
                    bytes(r[:k]).decode("utf-8", "backslashreplace")
                    for r, k in zip(raw, lengths, strict=True)
                ],
                type=pa.string(),
            )
    return arr


def records_to_arrow(records: np.ndarray) -> pa.RecordBatch:
    """Records to a RecordBatch with exactly `schemas.arrow_schema()`."""
    schema = schemas.arrow_schema()
    arrays = [
        decode_comm(records["comm"])
        if f.name == "comm"
        else pa.array(np.ascontiguousarray(records[f.name]), type=f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
