"""Write a `.iot` trace whole: beside the target, then renamed into place.

For producers that can afford to write a whole file before it is seen (importers,
the bpftrace and ftrace backends). The C loader writes in place instead, because a
chunk is its unit of crash safety; `scan()` and `iotape trace check --repair` deal
with what it leaves.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np

from recorder.tracefile import codec
from recorder.tracefile.format import (
    CHUNK_HEADER_SIZE,
    DEFAULT_CHUNK_RECORDS,
    MAX_CHUNK_RECORDS,
    PAD_COLUMNS,
    PLAIN_VERSION,
    RECORD_DTYPE,
    RECORD_SIZE,
    SCHED_OP,
    SCHED_VERSION,
    VERSION,
    WAKE_OP,
    WAKE_VERSION,
    ZCHUNK_HEADER_SIZE,
    TraceHeader,
    default_streams,
    encode_chunk_head,
    encode_footer,
    encode_header,
    encode_zchunk_head,
    pad8,
)


class TraceWriter:
    """Write a trace to a temporary file beside `path`; `close()` renames it into place.

    Example:
        with TraceWriter("t.iot", {"mono_start_ns": 0, "wall_start_ns": now, ...}) as w:
            w.write(records)
            w.close({"stop_reason": "command-exit"})

    Leaving the `with` block by an exception removes the temporary file. Leaving it
    normally without `close()` closes with an empty footer.

    `compression` is "zstd" (the default), "lz4" or "none"; "none" writes a format
    version 1 file, which iotape before compression reads too. `wakes`: the records
    may include wake records (op WAKE_OP), a format version 3 file
    (docs/trace-format.md, "Wake records"); without it, a file of version 1 or 2,
    where no op value is special (a record is written and read back as it is).
    `sched` (with `wakes`): sched records too (op SCHED_OP), a format version 4
    file ("Sched records").
    """

    def __init__(
        self,
        path: str | os.PathLike,
        header: Mapping[str, object],
        chunk_records: int = DEFAULT_CHUNK_RECORDS,
        compression: str = codec.DEFAULT,
        wakes: bool = False,
        sched: bool = False,
    ) -> None:
        if sched and not wakes:
            raise ValueError("sched records are written only with wake records (wakes=True)")
        if not 1 <= chunk_records <= MAX_CHUNK_RECORDS:
            raise ValueError(f"chunk_records must be 1..{MAX_CHUNK_RECORDS}, not {chunk_records}")
        if compression not in codec.CHOICES:
            raise ValueError(f"compression must be one of {', '.join(codec.CHOICES)}")
        self.compression = compression
        self._codec = codec.CODEC_IDS.get(compression, 0)
        self.version = (
            SCHED_VERSION if sched else WAKE_VERSION if wakes
            else VERSION if self._codec else PLAIN_VERSION
        )  # fmt: skip
        self.wakes: int | None = 0 if wakes else None  # wake records written
        self.sched: int | None = 0 if sched else None  # sched records written
        self.path = Path(path)
        self.header = _with_defaults(header)
        self.events = 0
        self.chunks = 0
        self._buf = np.zeros(chunk_records, dtype=RECORD_DTYPE)
        self._fill = 0
        head = encode_header(self.header, self.version)
        fd, tmp = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp"
        )
        self._tmp = Path(tmp)
        self._file: BinaryIO | None = os.fdopen(fd, "wb")
        try:
            self._file.write(head)
        except BaseException:
            self.abort()
            raise
        self._offset = self._data_start = len(head)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif self._file is not None:
            self.close()

    def _open_file(self) -> BinaryIO:
        if self._file is None:
            raise ValueError(f"{self.path}: writer is closed")
        return self._file

    def write(self, records: np.ndarray) -> None:
        """Append records (dtype `schemas.record_dtype()`); full chunks go to disk at once."""
        self._open_file()
        if records.dtype != RECORD_DTYPE:
            raise TypeError(f"records must have dtype schemas.record_dtype(), not {records.dtype}")
        if self.wakes is not None:
            self.wakes += int(np.count_nonzero(records["op"] == WAKE_OP))
        if self.sched is not None:
            self.sched += int(np.count_nonzero(records["op"] == SCHED_OP))
        # Copied as bytes: numpy copies a structured array field by field, 30x slower.
        src = _raw(np.ascontiguousarray(records.reshape(-1)))
        buf = _raw(self._buf)
        cap = len(self._buf)
        i, n = 0, len(src)
        while i < n:
            take = min(cap - self._fill, n - i)
            buf[self._fill : self._fill + take] = src[i : i + take]
            self._fill += take
            i += take
            if self._fill == cap:
                self._flush_chunk()

    def _flush_chunk(self) -> None:
        if not self._fill:
            return
        raw = _raw(self._buf)[: self._fill]
        # Records built by callers may carry stray bytes in the padding; the format says zero.
        for pad in _PAD_SLICES:
            raw[:, pad] = 0
        payload = raw.reshape(-1).data
        f = self._open_file()
        stored = b""
        if self._codec:
            records = self._buf[: self._fill]
            stored = codec.compress(self._codec, codec.encode_records(records))
        if stored and len(stored) < len(payload):
            zero = bytes(pad8(len(stored)))
            f.write(
                encode_zchunk_head(stored, self._fill, self.chunks, self._codec, codec.DELTA_SPLIT)
            )
            f.write(stored + zero)
            self._offset += ZCHUNK_HEADER_SIZE + len(stored) + len(zero)
        else:
            # Plain where compression does not pay (a few records); a reader takes both.
            f.write(encode_chunk_head(payload, self._fill, self.chunks))
            f.write(payload)
            self._offset += CHUNK_HEADER_SIZE + len(payload)
        self.events += self._fill
        self.chunks += 1
        self._fill = 0

    def rewrite_header(self, header: Mapping[str, object]) -> bool:
        """Put `header` in place of the one written, if it encodes to the same length
        (the records stay where they are); False, and nothing changed, if not.

        For producers that learn the header only at the end and can guess it at the
        start (importers); otherwise they copy the chunks behind it (`adopt`).
        """
        full = _with_defaults(header)
        head = encode_header(full, self.version)
        if len(head) != self._data_start:
            return False
        f = self._open_file()
        f.flush()
        os.pwrite(f.fileno(), head, 0)
        self.header = full
        return True

    def adopt(self, spool: TraceWriter) -> None:
        """Append the chunks `spool` has written, byte for byte, and drop `spool`.

        For producers that learn the header only after the records (importers): they
        write to a spool, then here behind the real header. This writer must have no
        chunk yet, so the chunks' sequence numbers stay right; the copy stays in the
        kernel (copy_file_range) and nothing is checksummed again.
        """
        if self.chunks or self._fill:
            raise ValueError(f"{self.path}: adopt() needs a writer with no records yet")
        if spool.version != self.version:
            raise ValueError(f"{self.path}: adopt() needs a spool of the same format version")
        spool._flush_chunk()
        src = spool._open_file()
        src.flush()
        f = self._open_file()
        f.flush()
        _copy_range(src.fileno(), f.fileno(), spool._data_start, spool._offset)
        f.seek(0, os.SEEK_END)  # the buffered file's idea of its position, after the copy
        self._offset += spool._offset - spool._data_start
        self.events += spool.events
        self.chunks += spool.chunks
        spool.abort()

    def close(self, footer: Mapping[str, object] | None = None) -> Path:
        """Write the last chunk, the footer (events and chunks filled in) and the trailer,
        then rename the file into place. Returns the final path."""
        f = self._open_file()
        try:
            self._flush_chunk()
            full: dict[str, object] = dict(footer or {})
            full["events"] = self.events
            full["chunks"] = self.chunks
            if self.wakes is not None:
                full["wakes"] = self.wakes
            if self.sched is not None:
                full["sched"] = self.sched
            f.write(encode_footer(full, self._offset))
            f.flush()
            os.fsync(f.fileno())
            f.close()
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


def _raw(records: np.ndarray) -> np.ndarray:
    """Records (contiguous) as rows of bytes."""
    return records.view(np.uint8).reshape(len(records), RECORD_SIZE)


def _pad_slices(columns: np.ndarray) -> list[slice]:
    """The padding byte positions as runs: a slice assignment is a strided memset."""
    runs: list[slice] = []
    for c in columns.tolist():
        if runs and runs[-1].stop == c:
            runs[-1] = slice(runs[-1].start, c + 1)
        else:
            runs.append(slice(c, c + 1))
    return runs


_PAD_SLICES = _pad_slices(PAD_COLUMNS)


def _copy_range(src: int, dst: int, start: int, end: int) -> None:
    """Bytes [start, end) of file `src` appended at `dst`'s position."""
    pos = start
    try:
        while pos < end:
            n = os.copy_file_range(src, dst, end - pos, pos)
            if n == 0:
                raise OSError(f"copy_file_range: source ends at byte {pos}, expected {end}")
            pos += n
        return
    except OSError as e:
        if pos != start or e.errno not in _NO_COPY_RANGE:
            raise
    while pos < end:  # a file system or kernel without copy_file_range
        data = memoryview(os.pread(src, min(end - pos, 1 << 24), pos))
        if not data:
            raise OSError(f"pread: source ends at byte {pos}, expected {end}")
        pos += len(data)
        while data:
            data = data[os.write(dst, data) :]


_NO_COPY_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM}


def _with_defaults(header: Mapping[str, object]) -> TraceHeader:
    for key in ("mono_start_ns", "wall_start_ns", "recorder"):
        if key not in header:
            raise ValueError(f"trace header needs {key!r}")
    full: TraceHeader = {
        "host": None,
        "kernel": None,
        "command_line": [],
        "devices": [],
        "filters": {},
        "streams": default_streams(),
        "labels": [],
        "metadata": {},
    }
    # A producer may add keys of its own beside the documented ones.
    full.update(cast(TraceHeader, header))
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
    path: str | os.PathLike,
    header: Mapping[str, object],
    records: np.ndarray,
    footer: Mapping[str, object] | None = None,
    compression: str = codec.DEFAULT,
    wakes: bool = False,
    sched: bool = False,
) -> Path:
    """Write a whole trace in one call (`wakes`, `sched`: see TraceWriter)."""
    with TraceWriter(path, header, compression=compression, wakes=wakes, sched=sched) as w:
        w.write(records)
        return w.close(footer)
