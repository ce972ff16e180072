"""Write a `.iot` trace whole: beside the target, then renamed into place.

For producers that can afford to write a whole file before it is seen (importers,
the bpftrace and ftrace backends). The C loader writes in place instead, because a
chunk is its unit of crash safety; `scan()` and `iotape trace check --repair` deal
with what it leaves.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np

from recorder.tracefile.format import (
    CHUNK_HEADER_SIZE,
    DEFAULT_CHUNK_RECORDS,
    MAX_CHUNK_RECORDS,
    PAD_COLUMNS,
    RECORD_DTYPE,
    RECORD_SIZE,
    TraceHeader,
    default_streams,
    encode_chunk_head,
    encode_footer,
    encode_header,
)


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
        header: Mapping[str, object],
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
        self._file: BinaryIO | None = os.fdopen(fd, "wb")
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

    def _open_file(self) -> BinaryIO:
        if self._file is None:
            raise ValueError(f"{self.path}: writer is closed")
        return self._file

    def write(self, records: np.ndarray) -> None:
        """Append records (dtype `schemas.record_dtype()`); full chunks go to disk at once."""
        self._open_file()
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
        raw[:, PAD_COLUMNS] = 0
        payload = raw.reshape(-1).data
        f = self._open_file()
        f.write(encode_chunk_head(payload, self._fill, self.chunks))
        f.write(payload)
        self._offset += CHUNK_HEADER_SIZE + len(payload)
        self.events += self._fill
        self.chunks += 1
        self._fill = 0

    def close(self, footer: Mapping[str, object] | None = None) -> Path:
        """Write the last chunk, the footer (events and chunks filled in) and the trailer,
        then rename the file into place. Returns the final path."""
        f = self._open_file()
        try:
            self._flush_chunk()
            full: dict[str, object] = dict(footer or {})
            full["events"] = self.events
            full["chunks"] = self.chunks
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
) -> Path:
    """Write a whole trace in one call."""
    with TraceWriter(path, header) as w:
        w.write(records)
        return w.close(footer)
