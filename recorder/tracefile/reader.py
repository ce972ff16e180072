"""Read a `.iot` trace: `open_trace()` and the trace's identity hashes.

The reader memory-maps the file and hands out chunks as read-only numpy views,
so iterating a multi-GB trace costs one chunk of address space at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from base.errors import IotapeError
from recorder.tracefile.blocks import (
    ChunkInfo,
    Unsupported,
    check_chunk,
    check_trailer,
    chunk_columns,
    chunk_records,
    declared_gaps,
    footer_from_trailer,
    parse_footer,
    parse_header,
)
from recorder.tracefile.format import (
    CHUNK_HEADER_SIZE,
    CHUNK_MAGIC,
    FOOTER_MAGIC,
    HEADER_FIXED,
    MAX_CHUNK_RECORDS,
    RECORD_DTYPE,
    RECORD_SIZE,
    SCHED_OP,
    SCHED_VERSION,
    TRAILER_MAGIC,
    VERSION,
    WAKE_OP,
    WAKE_VERSION,
    ZCHUNK_HEAD,
    ZCHUNK_HEADER_SIZE,
    ZCHUNK_MAGIC,
    Defect,
    TraceFooter,
    TraceFormatError,
    pad8,
)

if TYPE_CHECKING:  # pyarrow only where Arrow batches are asked for (~0.1 s)
    import pyarrow as pa


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
            if self.file_size >= HEADER_FIXED.size:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        # Plain dicts: a file holds any producer's keys, and the other components index
        # them freely; TraceHeader and TraceFooter name the documented ones.
        self.header: dict[str, Any]
        try:
            header, self.data_offset = parse_header(self._mm, self.file_size)
            self.header = dict(header)
        except Defect as d:
            self.close()
            raise self._error(d) from None
        except BaseException:
            self.close()
            raise
        # parse_header raised for a file too short to map.
        mm = cast(mmap.mmap, self._mm)
        if hasattr(mmap, "MADV_SEQUENTIAL"):
            with contextlib.suppress(OSError):
                mm.madvise(mmap.MADV_SEQUENTIAL)
        hint = footer_from_trailer(mm, self.data_offset, self.file_size)
        self.footer: dict[str, Any] | None = dict(hint[0]) if hint else None
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

    @property
    def mapped(self) -> mmap.mmap:
        """The file's map, for the damage scan that reads past what iteration accepts."""
        if self._mm is None:
            raise ValueError(f"{self.path}: trace is closed")
        return self._mm

    def _error(self, d: Defect) -> TraceFormatError:
        return TraceFormatError(self.path, d.offset, d.reason)

    def _walk(self) -> Iterator[tuple[ChunkInfo, np.ndarray]]:
        """Valid chunks in order with their records; on a fault, raise or record it
        per `strict`."""
        mm = self.mapped
        for info in self._infos():
            yield info, chunk_records(mm, info)

    def _infos(self, decode: bool = True) -> Iterator[ChunkInfo]:
        """`_walk`'s chunks; `decode` False leaves delta-split chunks as planes
        (ChunkInfo.planes)."""
        if self._mm is None:
            raise ValueError(f"{self.path}: trace is closed")
        self.problem = None
        try:
            yield from _walk_chunks(
                self._mm,
                self.data_offset,
                self.file_size,
                self._set_footer,
                self.gaps,
                self.header.get("version") in (VERSION, WAKE_VERSION, SCHED_VERSION),
                decode,
            )
        except Unsupported as d:
            # Not damage: the file is intact, and repair would not help.
            self.problem = self._error(d)
            raise self.problem from None
        except Defect as d:
            self.problem = self._error(d)
            if self.strict:
                raise TraceFormatError(
                    self.path, d.offset, f"{d.reason}; {self.repair_hint}"
                ) from None

    @property
    def repair_hint(self) -> str:
        return f"run `iotape trace check --repair {self.path}` to keep every intact chunk"

    def _set_footer(self, footer: TraceFooter) -> None:
        self.footer = dict(footer)

    @property
    def has_wakes(self) -> bool:
        """Whether the file may hold wake records (format version 3 or 4: `iotape
        record --wakes`; docs/trace-format.md, "Wake records")."""
        return self.header.get("version") in (WAKE_VERSION, SCHED_VERSION)

    @property
    def has_sched(self) -> bool:
        """Whether the file may hold sched records (format version 4;
        docs/trace-format.md, "Sched records")."""
        return self.header.get("version") == SCHED_VERSION

    def iter_chunks(self) -> Iterator[np.ndarray]:
        """Each chunk's requests as a read-only numpy view of the mapped file (a
        copy, without them, of a chunk that holds wake or sched records:
        iter_wakes(), iter_sched())."""
        for _, records in self._walk():
            records = self.requests_of(records)
            if len(records):
                yield records

    def requests_of(self, records: np.ndarray) -> np.ndarray:
        """A chunk's records (`_walk`) less its wake and sched records, which only
        a version 3 or 4 file has: the records themselves where it has none."""
        if not self.has_wakes:
            return records
        other = records["op"] == WAKE_OP
        if self.has_sched:
            other |= records["op"] == SCHED_OP
        return records[~other] if other.any() else records

    def iter_stored(self) -> Iterator[np.ndarray]:
        """Each chunk as it is stored once decompressed, for a reader that needs a few
        fields of each record: a `delta-split` chunk's planes (uint8, RECORD_SIZE
        bytes a record, codec.encode_records' transform not yet undone:
        codec.decode_records gives its records), another chunk's records (as
        `iter_chunks` gives them). A file with wake records gives `iter_chunks`'
        records (the requests are picked out of decoded records)."""
        if self.has_wakes:
            yield from self.iter_chunks()
            return
        mm = self.mapped
        for info in self._infos(decode=False):
            yield info.planes if info.planes is not None else chunk_records(mm, info)

    def iter_wakes(self) -> Iterator[np.ndarray]:
        """Each chunk's wake records (none but in a version 3 or 4 file), in file
        order: a second walk over the chunks."""
        return self._iter_op(WAKE_OP) if self.has_wakes else iter(())

    def iter_sched(self) -> Iterator[np.ndarray]:
        """Each chunk's sched records (none but in a version 4 file), in file
        order: a walk over the chunks of its own."""
        return self._iter_op(SCHED_OP) if self.has_sched else iter(())

    def _iter_op(self, op: int) -> Iterator[np.ndarray]:
        for _, records in self._walk():
            hit = records["op"] == op
            if hit.any():
                yield records[hit]

    def iter_columns(self, rows: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """The records as one contiguous array per field (name: array), the values
        `iter_chunks` gives, about `rows` records at a time (whole chunks; 0: each
        chunk on its own). Compressed chunks are decoded a column at a time from
        their planes straight into the arrays handed out (codec.decode_columns),
        with no record array and no copy between."""
        if self.has_wakes:
            # Wake records share the chunks: the requests are picked out of
            # decoded records (iter_chunks) instead of decoded per column.
            yield from _columns_of(self.iter_chunks(), rows)
            return
        mm = self.mapped
        held: list[ChunkInfo] = []
        n = 0
        for info in self._infos(decode=False):
            held.append(info)
            n += info.count
            if n >= rows:
                yield chunk_columns(mm, held, n)
                held, n = [], 0
        if held:
            yield chunk_columns(mm, held, n)

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
        # Imported here: a reader of records need not load pyarrow (~0.1 s).
        from recorder.tracefile.arrow import records_to_arrow

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
        if size < HEADER_FIXED.size:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                _, data_offset = parse_header(mm, size)
            except Defect:
                return None
            h.update(mm[:data_offset])
            pos = data_offset
            # Chunk headers by pread, not through the map: touching one page per
            # chunk would map its neighbours too (fault-around), and the resident
            # size would grow with the file (190 MiB for 20 M events).
            while size - pos >= CHUNK_HEADER_SIZE:
                head = os.pread(f.fileno(), ZCHUNK_HEADER_SIZE, pos)
                (magic, count) = struct.unpack_from("<II", head)
                if magic == ZCHUNK_MAGIC and len(head) == ZCHUNK_HEADER_SIZE:
                    # Its payload CRC covers the stored bytes, so it names them too.
                    stored = ZCHUNK_HEAD.unpack(head)[3]
                    h.update(head)
                    pos += ZCHUNK_HEADER_SIZE + stored + pad8(stored)
                    continue
                head = head[:CHUNK_HEADER_SIZE]
                if magic == FOOTER_MAGIC:
                    if mm[size - len(TRAILER_MAGIC) : size] != TRAILER_MAGIC:
                        return None
                    h.update(mm[pos:size])
                    return h.hexdigest()
                if magic != CHUNK_MAGIC or not 1 <= count <= MAX_CHUNK_RECORDS:
                    return None
                h.update(head)
                pos += CHUNK_HEADER_SIZE + count * RECORD_SIZE
    return None


_RELEASE_BYTES = 16 << 20
# Pages are dropped this far behind the walk: a consumer gathers a few chunks' views
# before it copies them (ingest: 65,536 records, 5 MiB). Dropping those too made the
# copy fault them back in, past the point already released, where they stayed: the
# resident size grew with the file (190 MiB of a 20 M-event trace).
_RELEASE_LAG = 32 << 20


def _release(mm: mmap.mmap, released: int, pos: int) -> int:
    """Drop the pages read more than _RELEASE_LAG ago from this process, so a long file
    does not pile up in its resident memory. They stay in the page cache, and an array
    that still views them faults them back in from the file, unchanged."""
    pos -= _RELEASE_LAG
    end = pos - pos % mmap.PAGESIZE
    if end - released < _RELEASE_BYTES or not hasattr(mmap, "MADV_DONTNEED"):
        return released
    with contextlib.suppress(OSError):
        mm.madvise(mmap.MADV_DONTNEED, released, end - released)
    return end


def _walk_chunks(
    mm: mmap.mmap,
    pos: int,
    size: int,
    on_footer: Callable[[TraceFooter], None],
    gaps: dict[int, int],
    compressed: bool,
    decode: bool = True,
) -> Iterator[ChunkInfo]:
    """Chunks from `pos` to the footer; `compressed` when the file's version allows
    compressed chunks; `decode` as check_chunk's."""
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
            if magic == CHUNK_MAGIC or (magic == ZCHUNK_MAGIC and compressed):
                info = check_chunk(mv, pos, size, seq, gaps.get(seq, 0), decode)
                yield info
                events += info.count
                chunks += 1
                seq = info.seq + 1
                pos = info.end
                released = _release(mm, released, pos)
            elif magic == FOOTER_MAGIC:
                footer, end = parse_footer(mm, pos, size)
                check_trailer(mm, end, size, pos)
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


def _columns_of(chunks: Iterator[np.ndarray], rows: int) -> Iterator[dict[str, np.ndarray]]:
    """Record arrays regrouped as one array per field, about `rows` at a time."""
    held: list[np.ndarray] = []
    n = 0
    for records in chunks:
        held.append(records)
        n += len(records)
        if n >= rows:
            whole = np.concatenate(held)
            yield {name: np.ascontiguousarray(whole[name]) for name in whole.dtype.names or ()}
            held, n = [], 0
    if held:
        whole = np.concatenate(held)
        yield {name: np.ascontiguousarray(whole[name]) for name in whole.dtype.names or ()}
