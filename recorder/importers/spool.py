"""Records held until the header is known, written on a thread of their own.

An import learns its header (devices, wall time, what it skipped) only from the
whole input, and the header goes first in the file. So records go to a temporary
trace, and their chunks are copied behind the real header at the end, byte for
byte and in the kernel: memory stays constant whatever the input's size.

Labelling, checksums and writes run on the spool's thread while the reader
makes the next records; crc32 and file writes release the GIL.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from recorder.tracefile import TraceWriter
from recorder.tracefile.streams import apply_streams

# Record arrays waiting for the thread: bounds the memory a slow disk can hold up.
DEPTH = 4


class Spool:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.writer = TraceWriter(
            out.with_name(f".{out.name}.spool"),
            {"mono_start_ns": 0, "wall_start_ns": 0, "recorder": {}},
        )
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue(maxsize=DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="iotape-spool", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while (recs := self._queue.get()) is not None:
            if self._error is not None:
                continue  # the caller hears of it at its next call; keep its puts moving
            try:
                apply_streams(recs, [])
                self.writer.write(recs)
            except BaseException as e:
                self._error = e

    def write(self, recs: np.ndarray) -> None:
        """Queue records; the caller must not change them afterwards."""
        self._raise()
        self._queue.put(recs)

    def finish(self, header: Mapping[str, object], footer: Mapping[str, object]) -> None:
        try:
            self._stop()
            self._raise()
            with TraceWriter(self.out, header) as w:
                w.adopt(self.writer)
                w.close(footer)
        finally:
            self.abort()

    def abort(self) -> None:
        self._stop()
        self.writer.abort()

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
