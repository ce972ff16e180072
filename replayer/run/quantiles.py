"""Exact percentiles of more values than memory should hold.

An hour's replay at 8k IOPS pairs 29 M requests; their issue-time errors, and
those of each stream, would take 0.9 GB as float64 to sort in memory. `Spill`
appends them (integers, ns) to an unlinked temporary file instead and finds
each order statistic by selection: a histogram of the values over 65,536 bins,
then only the values of the bin that holds the rank, read again and sorted;
a bin with more than `KEEP` values is split the same way. The answer is
`np.percentile`'s (linear interpolation between the two neighbouring order
statistics, with numpy's own arithmetic), not an estimate; up to `KEEP` values
it is `np.percentile` itself.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import IO

import numpy as np

KEEP = 1 << 18  # values held in memory before the rest goes to disk
BINS = 1 << 16
READ = 1 << 22  # values per read of the spill

Transform = Callable[[np.ndarray], np.ndarray]


class Spill:
    """An append-only column of int64 values; `transform` maps them when asked
    (e.g. the issue-time error once the clock offset is known)."""

    def __init__(self) -> None:
        self._mem: list[np.ndarray] = []
        self._held = 0
        self._file: IO[bytes] | None = None
        self.count = 0

    def add(self, v: np.ndarray) -> None:
        if not len(v):
            return
        v = np.ascontiguousarray(v, np.int64)
        self.count += len(v)
        if self._file is None and self._held + len(v) <= KEEP:
            self._mem.append(v)
            self._held += len(v)
            return
        if self._file is None:
            # Closed by close(); the file has no name, so nothing is left behind.
            self._file = tempfile.TemporaryFile(prefix="iotape-spill-")  # noqa: SIM115
            for m in self._mem:
                self._file.write(m.tobytes())
            self._mem, self._held = [], 0
        self._file.write(v.tobytes())

    def _chunks(self) -> Iterator[np.ndarray]:
        if self._file is None:
            yield from self._mem
            return
        self._file.flush()
        self._file.seek(0)
        while True:
            b = self._file.read(READ * 8)
            if not b:
                return
            yield np.frombuffer(b, np.int64)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file, self._mem = None, []

    def percentiles(self, qs: tuple[float, ...], f: Transform) -> tuple[list[float], float]:
        """([np.percentile(f(values), q) for q in qs], max(f(values))); values must exist."""
        if self._file is None:
            x = f(np.concatenate(self._mem)).astype(np.float64)
            return [float(np.percentile(x, q)) for q in qs], float(x.max())
        n = self.count
        out = []
        for q in qs:
            # np.percentile's arithmetic: virtual index, its floor and the lerp.
            v = (n - 1) * (np.float64(q) / 100)
            lo = int(np.floor(v))
            a = float(self._select(lo, f))
            b = float(self._select(min(lo + 1, n - 1), f))
            g = v - np.floor(v)
            d = b - a
            out.append(float(b - d * (1 - g)) if g >= 0.5 else float(a + d * g))
        top = max(int(f(c).max()) for c in self._chunks())
        return out, float(top)

    def median(self) -> float:
        """np.median of the values."""
        if self._file is None:
            return float(np.median(np.concatenate(self._mem)))
        n, same = self.count, lambda x: x
        if n % 2:
            return float(self._select(n // 2, same))
        mid = [self._select(n // 2 - 1, same), self._select(n // 2, same)]
        return float(np.median(np.array(mid, np.int64)))

    def _select(self, k: int, f: Transform) -> int:
        """The k-th smallest (from 0) of the transformed values."""
        lo = min(int(f(c).min()) for c in self._chunks())
        hi = max(int(f(c).max()) for c in self._chunks())
        while True:
            if lo == hi:
                return lo
            width = -(-(hi - lo + 1) // BINS)
            hist = np.zeros(BINS, np.int64)
            below = 0
            for c in self._chunks():
                x = f(c)
                below += int((x < lo).sum())
                x = x[(x >= lo) & (x <= hi)]
                hist += np.bincount((x - lo) // width, minlength=BINS)
            cum = np.cumsum(hist) + below
            b = int(np.searchsorted(cum, k, side="right"))
            lo, hi = lo + b * width, min(hi, lo + (b + 1) * width - 1)
            k_in = k - (int(cum[b - 1]) if b else below)
            if hist[b] <= KEEP:
                vals = [x[(x >= lo) & (x <= hi)] for x in map(f, self._chunks())]
                return int(np.sort(np.concatenate(vals))[k_in])
