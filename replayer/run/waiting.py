"""The pairs an ordered sink waits for (fidstream.drive_batches), in the original's
time order, in memory that does not grow with the trace.

A pair is handed on once no original still held unpaired can precede it. An
original the replay lost stays held for the whole horizon (60 s), and every pair
after it waits that long: at NVMe rates the whole trace. Joining what waited at
every step also copied all of it again each time. Here what waits is kept
narrowed to the columns the sink reads (`Waiting(keep=...)`), up to `budget`
rows in memory; past that, the earliest half goes to an unlinked temporary file
in order, and is read back a chunk at a time when its turn comes.

Pairs come in runs (one pairing step's), each in the original's order; a later
run may hold pairs that go before the end of an earlier one (originals held a
step or more), but never before what was already handed on (the caller's
`before` only moves forward). Such a pair that goes before the end of what is
on the file is kept apart in memory (`late`) and merged in as the file is read;
that takes a pair held more than about `budget / 2` pairs behind its run, which
a replay near its original's rate does not make.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import IO

import numpy as np

BUDGET = 1 << 17  # rows of waiting pairs held in memory before the earliest go to file
READ = 1 << 18  # rows read back from the file at a time
_END = np.iinfo(np.int64).max  # no time limit (the end of both traces)
Pairs = tuple[np.ndarray, np.ndarray]


def narrow(a: np.ndarray, dt: np.dtype | None) -> np.ndarray:
    """`a`'s columns of `dt` (all of `a` where None), in an array of its own: a view
    into a step's rows would keep the whole step alive."""
    if dt is None or a.dtype == dt:
        return a if a.base is None else a.copy()
    out = np.empty(len(a), dt)
    for name in dt.names or ():
        out[name] = a[name]
    return out


def in_order(t: np.ndarray, n: np.ndarray) -> bool:
    """Whether rows stand in the original's time order, ties in file order."""
    if len(t) < 2:
        return True
    dt = t[1:] - t[:-1]
    return bool((dt >= 0).all()) and bool((n[1:][dt == 0] > n[:-1][dt == 0]).all())


def _order(o: np.ndarray) -> np.ndarray:
    """The permutation that puts `o` in (t, n) order: a stable sort by time (fast on
    runs already in order), and by both keys only where equal times came in
    another order."""
    idx = np.argsort(o["t"], kind="stable")
    if in_order(o["t"][idx], o["n"][idx]):
        return idx
    return np.lexsort((o["n"], o["t"]))


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    """np.concatenate of structured arrays of one dtype, as opaque rows (numpy moves
    a structured array's rows field by field otherwise, several times slower)."""
    if len(parts) == 1:
        return parts[0]
    dt = parts[0].dtype
    rows = [np.ascontiguousarray(p).view(np.dtype((np.void, dt.itemsize))) for p in parts]
    return np.concatenate(rows).view(dt)


def _join(parts: list[Pairs], keep: tuple[np.dtype | None, np.dtype | None]) -> Pairs:
    """The runs `parts` joined; narrowed to `keep` where some already are."""
    if len({(p[0].dtype, p[1].dtype) for p in parts}) > 1:
        parts = [(narrow(o, keep[0]), narrow(r, keep[1])) for o, r in parts]
    return _cat([p[0] for p in parts]), _cat([p[1] for p in parts])


def _rows(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """a[idx], moved as rows of bytes: numpy moves a structured array's rows field by
    field (20x slower for 40-byte rows), and opaque void rows 8x."""
    b = np.ascontiguousarray(a).view(np.uint8).reshape(len(a), a.dtype.itemsize)
    return b.take(idx, axis=0).reshape(-1).view(a.dtype)


def _sorted(p: Pairs) -> Pairs:
    o, r = p
    if in_order(o["t"], o["n"]):
        return o, r
    idx = _order(o)
    return _rows(o, idx), _rows(r, idx)


def _before(o: np.ndarray, t: int, n: int) -> np.ndarray:
    """Mask of rows whose (t, n) is before (t, n)."""
    return (o["t"] < t) | ((o["t"] == t) & (o["n"] < n))


class Waiting:
    """Pairs (original rows, replay rows, aligned by place) waiting to be handed on
    in the original's (t, n) order; `keep`: the dtypes they are kept as once they
    go to the file (original's, replay's; None: the rows as given)."""

    def __init__(
        self,
        keep: tuple[np.dtype | None, np.dtype | None] = (None, None),
        budget: int | None = None,
    ) -> None:
        self.keep = keep
        self.budget = max(2, BUDGET if budget is None else budget)
        # Runs as given (the usual few rows a step leaves), every row at or after the
        # file's last; their earliest time.
        self._mem: list[Pairs] = []
        self._held = 0
        self._mem_t = _END
        self._late: Pairs | None = None  # rows before the file's last, in order
        self._files: tuple[IO[bytes], IO[bytes]] | None = None
        self._dt = (np.dtype(np.uint8), np.dtype(np.uint8))  # of the file's rows
        self._read = self._len = 0  # rows of the file read back, written
        self._next_t = _END  # the time of the file's first row not read back
        self._last: tuple[int, int] | None = None  # (t, n) of the file's last row
        self.spilled = 0  # rows ever written to the file

    @property
    def rows(self) -> int:
        late = len(self._late[0]) if self._late is not None else 0
        return self._held + late + self._len - self._read

    def settle(self, o: np.ndarray, r: np.ndarray, before: int | None) -> Iterator[Pairs]:
        """Add the pairs (o, r) of one step, then hand on, in order, every pair
        waiting whose original is before `before` (None: all)."""
        if not self.rows and in_order(o["t"], o["n"]):
            # The usual step: nothing waits, its pairs in order: the head goes on as
            # it is (no copies), the rest waits.
            cut = len(o) if before is None else int(np.searchsorted(o["t"], before, "left"))
            if cut:
                yield o[:cut], r[:cut]
            if cut < len(o):
                self._add(o[cut:], r[cut:])
        else:
            if len(o):
                self._add(o, r)
            yield from self._take(_END if before is None else before)
        # Past the budget only with what still waits (a step's pairs, mostly due at
        # once, would spill every step).
        if self._held > self.budget:
            self._spill()

    def _add(self, o: np.ndarray, r: np.ndarray) -> None:
        if self._last is not None:
            early = _before(o, *self._last)
            if early.any():
                late = (narrow(o[early], self.keep[0]), narrow(r[early], self.keep[1]))
                got = [late] + ([self._late] if self._late is not None else [])
                self._late = _sorted(_join(got, self.keep))
                o, r = o[~early], r[~early]
        if len(o):
            self._mem.append((o, r))
            self._held += len(o)
            self._mem_t = min(self._mem_t, int(o["t"].min()))

    def _spill(self) -> None:
        """The earliest half of what is held in memory, to the file, in order; the
        rest kept narrowed."""
        o, r = _sorted(_join(self._mem, self.keep))
        o, r = narrow(o, self.keep[0]), narrow(r, self.keep[1])
        half = len(o) // 2
        if self._files is None:
            # Closed by close(); the files have no name, so nothing is left behind.
            self._files = (
                tempfile.TemporaryFile(prefix="iotape-waiting-"),  # noqa: SIM115
                tempfile.TemporaryFile(prefix="iotape-waiting-"),  # noqa: SIM115
            )
        self._dt = (o.dtype, r.dtype)
        for f, a in zip(self._files, (o[:half], r[:half]), strict=True):
            os.pwrite(f.fileno(), np.ascontiguousarray(a).data, self._len * a.dtype.itemsize)
        if self._read == self._len:
            self._next_t = int(o["t"][0])
        self._len += half
        self.spilled += half
        self._last = (int(o["t"][half - 1]), int(o["n"][half - 1]))
        self._mem = [(o[half:].copy(), r[half:].copy())]  # (not views of what went)
        self._held, self._mem_t = len(o) - half, int(o["t"][half])

    def _chunk(self) -> Pairs:
        assert self._files is not None
        n = min(READ, self._len - self._read)
        got = []
        for f, dt in zip(self._files, self._dt, strict=True):
            want = n * dt.itemsize
            buf = os.pread(f.fileno(), want, self._read * dt.itemsize)
            if len(buf) != want:
                raise OSError(f"{f.name}: read {len(buf)} of {want} bytes of waiting pairs")
            got.append(np.frombuffer(buf, dt))
        return got[0], got[1]

    def _late_upto(self, t: int, n: int | None) -> Pairs | None:
        """The late rows before (t, n) (n None: before time t), taken out."""
        if self._late is None:
            return None
        lo = self._late[0]
        if n is None:
            cut = int(np.searchsorted(lo["t"], t, "left"))
        else:
            cut = int(_before(lo, t, n).sum())  # (late rows stand in order: a head)
        if not cut:
            return None
        head = (lo[:cut], self._late[1][:cut])
        self._late = (lo[cut:], self._late[1][cut:]) if cut < len(lo) else None
        return head

    def _take(self, end: int) -> Iterator[Pairs]:
        """Every pair waiting whose original is before time `end`, in order."""
        late_t = int(self._late[0]["t"][0]) if self._late is not None else _END
        if min(self._next_t, self._mem_t, late_t) >= end and end != _END:
            return  # (the usual step while a lost original holds everything back)
        while self._read < self._len and self._next_t < end:
            o, r = self._chunk()
            k = int(np.searchsorted(o["t"], end, "left")) if end != _END else len(o)
            if not k:
                self._next_t = int(o["t"][0])
                break
            rest = k < len(o)
            late = self._late_upto(end, None) if rest else self._late_upto(
                int(o["t"][k - 1]), int(o["n"][k - 1]) + 1
            )  # fmt: skip
            parts = [(o[:k], r[:k])] + ([late] if late is not None else [])
            yield _sorted(_join(parts, self.keep))
            self._read += k
            # (the time of the next row where known, else a bound below it)
            self._next_t = int(o["t"][k]) if rest else int(o["t"][-1])
            if rest:
                break
        if self._read < self._len:
            # The file's next rows are not due, so neither is anything in memory
            # (it goes after the file): only late rows before `end` are.
            late = self._late_upto(end, None)
            if late is not None:
                yield late
            return
        if self._files is not None:
            # All of the file handed on: what comes next goes after it.
            self._read = self._len = 0
            self._next_t, self._last = _END, None
            for f in self._files:
                f.truncate(0)
        parts = list(self._mem) + ([self._late] if self._late is not None else [])
        if not parts:
            return
        o, r = _sorted(_join(parts, self.keep))
        cut = int(np.searchsorted(o["t"], end, "left")) if end != _END else len(o)
        self._late = None
        self._mem = [(o[cut:], r[cut:])] if cut < len(o) else []
        self._held = len(o) - cut
        self._mem_t = int(o["t"][cut]) if cut < len(o) else _END
        if cut:
            yield o[:cut], r[:cut]

    def close(self) -> None:
        if self._files is not None:
            for f in self._files:
                f.close()
        self._files, self._mem, self._late = None, [], None
