"""Records held until the header is known, written on a thread of their own.

An import learns its header (devices, wall time, what it skipped) only from the
whole input, and the header goes first in the file. So records go behind a
header guessed from the first block; when the real one has the same length it
takes the guess's place. Otherwise (or with no guess) the chunks are copied
behind it, byte for byte and in the kernel. Either way memory stays constant
whatever the input's size.

Labelling, checksums and writes run on the spool's thread while the reader
makes the next records; crc32 and file writes release the GIL.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from recorder.tracefile import TraceWriter
from recorder.tracefile.streams import apply_streams

# Record arrays waiting for the thread: bounds the memory a slow disk can hold up.
DEPTH = 4


_NO_HEADER = {"mono_start_ns": 0, "wall_start_ns": 0, "recorder": {}}


class Spool:
    def __init__(self, out: Path, guess: Callable[[], Mapping[str, object]] | None = None) -> None:
        self.out = out
        self.guess = guess  # the header as far as it is known, asked at the first write
        self.writer: TraceWriter | None = None
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue(maxsize=DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="iotape-spool", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while (recs := self._queue.get()) is not None:
            if self._error is not None:
                continue  # the caller hears of it at its next call; keep its puts moving
            try:
                assert self.writer is not None  # write() makes it before the first put
                apply_streams(recs, [])
                self.writer.write(recs)
            except BaseException as e:
                self._error = e

    def write(self, recs: np.ndarray) -> None:
        """Queue records; the caller must not change them afterwards."""
        self._raise()
        if self.writer is None:
            self.writer = (
                TraceWriter(self.out, self.guess())
                if self.guess is not None
                else TraceWriter(self.out.with_name(f".{self.out.name}.spool"), _NO_HEADER)
            )
        self._queue.put(recs)

    def finish(self, header: Mapping[str, object], footer: Mapping[str, object]) -> None:
        try:
            self._stop()
            self._raise()
            held = self.writer
            if held is not None and held.path == self.out and held.rewrite_header(header):
                held.close(footer)
                return
            with TraceWriter(self.out, header) as w:
                if held is not None:
                    w.adopt(held)
                w.close(footer)
        finally:
            self.abort()

    def abort(self) -> None:
        self._stop()
        if self.writer is not None:
            self.writer.abort()

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
