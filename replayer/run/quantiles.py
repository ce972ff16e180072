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

import io
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, cast

import numpy as np

from replayer.run import native

KEEP = 1 << 18  # values held in memory before the rest goes to disk
BINS = 1 << 16
READ = 1 << 22  # values per read of the spill

# A transform may answer in a buffer of its own that it writes again at its next call
# (fidstream._Off): each answer here is done with before the next call.
Transform = Callable[[np.ndarray], np.ndarray]


class Spill:
    """An append-only column of int64 values; `transform` maps them when asked
    (e.g. the issue-time error once the clock offset is known)."""

    def __init__(self) -> None:
        self._mem: list[np.ndarray] = []
        self._held = 0
        self._file: IO[bytes] | None = None
        self.count = 0
        # Answers a caller keeps here (fidstream._pct), dropped as values come.
        self.answers: dict[tuple, tuple[list[float], float]] = {}

    def add(self, v: np.ndarray) -> None:
        if not len(v):
            return
        v = np.ascontiguousarray(v, np.int64)
        self.count += len(v)
        self.answers.clear()
        if self._file is None and self._held + len(v) <= KEEP:
            self._mem.append(v)
            self._held += len(v)
            return
        if self._file is None:
            # Closed by close(); the file has no name, so nothing is left behind.
            self._file = tempfile.TemporaryFile(prefix="iotape-spill-")  # noqa: SIM115
            for m in self._mem:
                self._file.write(m.data)
            self._mem, self._held = [], 0
        self._file.write(v.data)  # (its buffer, not a copy)

    def chunks(self) -> Iterator[np.ndarray]:
        """The values in the order added, a read at a time (each chunk is valid until
        the next is asked for)."""
        if self._file is None:
            yield from self._mem
            return
        self._file.flush()
        self._file.seek(0)
        # One buffer for every read (a fresh one each time faulted in its pages, as
        # long as reading them): each chunk is done with before the next is read.
        buf = np.empty(min(READ, self.count), np.int64)
        while True:
            got = cast(io.BufferedRandom, self._file).readinto(buf.data.cast("B"))
            if not got:
                return
            yield buf[: got // 8]

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
        spots = []
        for q in qs:
            # np.percentile's arithmetic: virtual index, its floor and the lerp.
            v = (n - 1) * (np.float64(q) / 100)
            lo = int(np.floor(v))
            spots.append((v, lo, min(lo + 1, n - 1)))
        got, top = self._select_all([k for _, a, b in spots for k in (a, b)], f)
        out = []
        for v, lo, hi in spots:
            a, b = float(got[lo]), float(got[hi])
            g = v - np.floor(v)
            d = b - a
            out.append(float(b - d * (1 - g)) if g >= 0.5 else float(a + d * g))
        return out, float(top)

    def median(self) -> float:
        """np.median of the values."""
        if self._file is None:
            return float(np.median(np.concatenate(self._mem)))
        n, same = self.count, lambda x: x
        if n % 2:
            return float(self._select_all([n // 2], same)[0][n // 2])
        got = self._select_all([n // 2 - 1, n // 2], same)[0]
        mid = [got[n // 2 - 1], got[n // 2]]
        return float(np.median(np.array(mid, np.int64)))

    def _select_all(self, ks: list[int], f: Transform) -> tuple[dict[int, int], int]:
        """({k: the k-th smallest (from 0) of the transformed values}, their max).

        Each rank narrows its own range of values (a histogram over BINS, then the
        bin that holds it, until a bin is small enough to sort), and each read
        of the spill serves every rank: one rank at a time, the 25 of `replay
        fidelity` took ~100 reads of it."""
        lo = hi = None
        for c in self.chunks():
            x = f(c)
            a, b = int(x.min()), int(x.max())
            lo, hi = (a, b) if lo is None or hi is None else (min(lo, a), max(hi, b))
        assert lo is not None and hi is not None
        top = hi
        todo = {k: (lo, hi) for k in ks}
        got: dict[int, int] = {}
        while todo:
            for k, (a, b) in list(todo.items()):
                if a == b:
                    got[k] = a
                    del todo[k]
            spans = sorted(set(todo.values()))
            if not spans:
                break
            widths = {sp: -(-(sp[1] - sp[0] + 1) // BINS) for sp in spans}
            hists = {sp: np.zeros(BINS, np.int64) for sp in spans}
            below = dict.fromkeys(spans, 0)
            for c in self.chunks():
                x = f(c)
                for sp in spans:
                    below[sp] += _count(x, sp[0], sp[1], widths[sp], hists[sp])
            gather: dict[int, tuple[int, int, int]] = {}  # k: (lo, hi, rank within)
            for k, sp in list(todo.items()):
                a, b = sp
                hist, width = hists[sp], widths[sp]
                cum = np.cumsum(hist) + below[sp]
                i = int(np.searchsorted(cum, k, side="right"))
                na, nb = a + i * width, min(b, a + (i + 1) * width - 1)
                k_in = k - (int(cum[i - 1]) if i else below[sp])
                if hist[i] <= KEEP:
                    gather[k] = (na, nb, k_in)
                    del todo[k]
                else:
                    todo[k] = (na, nb)
            if gather:
                bins = sorted({(a, b) for a, b, _ in gather.values()})
                vals: dict[tuple[int, int], list[np.ndarray]] = {sp: [] for sp in bins}
                for c in self.chunks():
                    x = f(c)
                    for a, b in bins:
                        vals[(a, b)].append(_within(x, a, b))
                ordered = {sp: np.sort(np.concatenate(v)) for sp, v in vals.items()}
                for k, (a, b, k_in) in gather.items():
                    got[k] = int(ordered[(a, b)][k_in])
        return got, top


# Ranges the C passes take: their bins' arithmetic stays within int64.
_SAFE = 1 << 62


def _count(x: np.ndarray, a: int, b: int, width: int, hist: np.ndarray) -> int:
    """Add the values of `x` in [a, b] to `hist` (BINS bins of `width` from a); return
    how many are below a. src/select.c where built (one pass), else numpy."""
    lib = native.lib()
    if lib is not None and -_SAFE < a <= b < _SAFE:
        x = np.ascontiguousarray(x, np.int64)
        return int(lib.range_hist(x.ctypes.data, len(x), a, b, width, hist.ctypes.data))
    y = x[(x >= a) & (x <= b)]
    hist += np.bincount((y - a) // width, minlength=BINS)
    return int((x < a).sum())


def _within(x: np.ndarray, a: int, b: int) -> np.ndarray:
    """The values of `x` in [a, b], in their order."""
    lib = native.lib()
    if lib is not None and -_SAFE < a <= b < _SAFE:
        x = np.ascontiguousarray(x, np.int64)
        out = np.empty(len(x), np.int64)
        k = lib.range_take(x.ctypes.data, len(x), a, b, out.ctypes.data)
        return out[:k].copy() if k < len(x) // 2 else out[:k]
    return x[(x >= a) & (x <= b)]
