"""The calls of `replay fidelity`'s figures that wait for the replay's clock offset
(fidstream.Figures): kept in order, made again once the offset is known.

The offset is the median gap over all pairs, known only when every pair is; the
replay's per-second counts, the drift and the windows depend on it. Reading and
pairing both traces a second time for it cost a quarter of the command, so the
rows those figures need are kept instead, each call's columns narrowed (REP,
PAIR): each replayed request once, when it pairs (31 bytes with its pair) or
stays unpaired (14 bytes; fidstream.Figures; every replayed row was kept once
more as it came, 45 bytes a request in all): in memory while they take less than `MEM_BYTES`,
then on an unlinked temporary file, so memory stays flat in a trace's length.
Up to 256 MiB were held in memory before (~6 M requests: 45 bytes a request of
peak RSS up to there, 100-200 MiB of a 2-5 M-request full-rate capture); on the
file, such a replay writes and reads back ~31 bytes a request through $TMPDIR,
which took the same CPU time within the machine's noise (docs/benchmarks.md).
Holding the rows as given (40 bytes a row, no narrowing copy) took ~175 MB more
and was no faster either (fresh pages faulted in).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import IO

import numpy as np

# What is kept of the replay's rows and of each pair: their times, sizes, ops and
# streams.
REP = np.dtype([("t", "<i8"), ("bytes", "<u4"), ("op", "u1"), ("stream", "u1")])
PAIR = np.dtype([("t_o", "<i8"), ("gap", "<i8"), ("stream", "u1")])
REP_ROWS, LOST_ROWS, PAIRED = 0, 1, 2
# Bytes of calls held in memory before the rest goes to the file (a short
# replay's never touch it).
MEM_BYTES = 16 << 20


def rep_rows(r: np.ndarray) -> np.ndarray:
    """Rows with REP's columns (t, bytes, op, stream) as REP."""
    out = np.empty(len(r), REP)
    for col in ("t", "bytes", "op", "stream"):
        out[col] = r[col]
    return out


class Later:
    """Calls (kind, then for PAIRED a PAIR array, then rows with REP's columns), in
    the order added; `calls` gives each back narrowed to REP, with the same
    values from memory or file (the figures summed in floating point, the drift,
    come out the same either way)."""

    def __init__(self, mem_bytes: int | None = None) -> None:
        self._mem: list[tuple[int, list[np.ndarray]]] = []
        self._room = MEM_BYTES if mem_bytes is None else mem_bytes
        self._file: IO[bytes] | None = None

    def add(self, kind: int, *parts: np.ndarray) -> None:
        *pair, rows = parts
        narrow = [*pair, rep_rows(rows) if rows.dtype != REP else rows]
        size = sum(p.nbytes for p in narrow)
        if self._file is None and size <= self._room:
            self._mem.append((kind, narrow))
            self._room -= size
            return
        if self._file is None:
            # Closed by close(); the file has no name, so nothing is left behind.
            self._file = tempfile.TemporaryFile(prefix="iotape-fidelity-")  # noqa: SIM115
        self._file.write(np.array([kind, *(len(p) for p in narrow)], np.int64).tobytes())
        for p in narrow:
            self._file.write(np.ascontiguousarray(p).data)  # (its buffer, not a copy)

    def calls(self) -> Iterator[tuple[int, list[np.ndarray]]]:
        """(kind, its arrays) of each call, in the order they were added."""
        yield from self._mem
        f = self._file
        if f is None:
            return
        f.flush()
        f.seek(0)
        while head := f.read(8):
            kind = int(np.frombuffer(head, np.int64)[0])
            dtypes = (PAIR, REP) if kind == PAIRED else (REP,)
            lens = np.frombuffer(f.read(8 * len(dtypes)), np.int64).tolist()
            yield (
                kind,
                [
                    np.frombuffer(f.read(n * dt.itemsize), dt)
                    for n, dt in zip(lens, dtypes, strict=True)
                ],
            )

    def close(self) -> None:
        self._mem = []
        if self._file is not None:
            self._file.close()
