"""A dependent plan's log lines (dependent.py's format), made column by column
with Arrow's compute kernels: a Python string per field and request made the
lines ~3 s of a 1 M-request plan's ~9 s, and held ~5 Python objects a request
at the peak (docs/benchmarks.md "Planning a dependent replay")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from base.arrow_probe import without_pandas

# Rows formatted at a time: an Arrow string array's offsets are 32-bit (2 GiB),
# and a block's strings are all that is held of them at once.
BLOCK = 1 << 18
# The system's allocator, not Arrow's default (mimalloc): that one keeps what a
# block freed for the next, ~65 MiB more at the peak of a 2 M-request plan.
POOL = pa.system_memory_pool()


@dataclass
class Waits:
    """What each of a slice's n requests waits for, as CSR: row i's ids are
    ids[at[i]:at[i + 1]], in the order the log gives them."""

    at: np.ndarray  # n + 1 offsets
    ids: np.ndarray

    @staticmethod
    def of(n: int, rows: list[np.ndarray], ids: list[np.ndarray]) -> Waits:
        """From (row, id) parts: a row's ids in the order of the parts, and
        within a part in its order."""
        row = np.concatenate(rows) if rows else np.empty(0, np.int64)
        val = np.concatenate(ids) if ids else np.empty(0, np.int64)
        o = np.argsort(row, kind="stable")
        at = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(row, minlength=n), out=at[1:])
        return Waits(at, val[o].astype(np.int64))

    def count(self) -> np.ndarray:
        return np.diff(self.at)

    def of_row(self, i: int) -> list[int]:
        return self.ids[self.at[i] : self.at[i + 1]].tolist()

    def take(self, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, ids) of rows `sel`, in that order."""
        cnt = self.at[sel + 1] - self.at[sel]
        at = np.zeros(len(sel) + 1, np.int64)
        np.cumsum(cnt, out=at[1:])
        idx = np.repeat(self.at[sel] - at[:-1], cnt) + np.arange(int(at[-1]))
        return at, self.ids[idx]


def _s(x: np.ndarray) -> pa.Array:
    """Decimal strings of integers (as Python's str)."""
    return pc.cast(pa.array(np.ascontiguousarray(x, np.int64)), pa.string(), memory_pool=POOL)


@dataclass
class Columns:
    """A slice's fields per request, row by row (the log line's parts)."""

    ids: np.ndarray
    waits: Waits
    think_us: np.ndarray  # relative THINK (where the request waits for something)
    at_us: np.ndarray  # @US (where it waits for nothing)
    afap: bool
    action: np.ndarray  # code into `actions`
    actions: list[str]
    offset: np.ndarray
    nbytes: np.ndarray
    extra: dict[int, str]  # row -> what follows the line's fields (`or ...`, `join ...`)


def lines(c: Columns, sel: np.ndarray, more: tuple[np.ndarray, list[str]] | None = None
          ) -> pa.StringArray:  # fmt: skip
    """The log lines (each ending in a newline) of rows `sel`, in that order;
    `more`: (positions in `sel`, what follows those lines' fields)."""
    at, ids = c.waits.take(sel)
    rel = pa.array(at[1:] > at[:-1])
    listed = pa.ListArray.from_arrays(pa.array(at.astype(np.int32)), _s(ids), pool=POOL)
    wait = pc.if_else(rel, pc.binary_join(listed, ",", memory_pool=POOL), "-", memory_pool=POOL)
    if c.afap:
        time = pc.if_else(rel, "0", "@0", memory_pool=POOL)
    else:
        at_s = pc.binary_join_element_wise("@", _s(c.at_us[sel]), "", memory_pool=POOL)
        time = pc.if_else(rel, _s(c.think_us[sel]), at_s, memory_pool=POOL)
    act = pc.take(pa.array(c.actions, pa.string()), pa.array(c.action[sel]), memory_pool=POOL)
    parts = [_s(c.ids[sel]), wait, time, act, _s(c.offset[sel]), _s(c.nbytes[sel])]
    line = pc.binary_join_element_wise(*parts, " ", memory_pool=POOL)
    if more is not None and len(more[0]):
        tail = np.full(len(sel), "", object)
        tail[more[0]] = more[1]
        more_s = pa.array(tail, pa.string(), memory_pool=POOL)
        line = pc.binary_join_element_wise(line, more_s, "", memory_pool=POOL)
    return pc.binary_join_element_wise(line, "\n", "", memory_pool=POOL)


def write_groups(c: Columns, order: np.ndarray, cuts: np.ndarray,
                 put: Callable[[int, int, memoryview], None]) -> None:  # fmt: skip
    """The lines of rows `order`, in groups (group g: order[cuts[g]:cuts[g + 1]]),
    to put(g, lines, their bytes), BLOCK rows formatted at a time. pyarrow's
    look for pandas answered without importing it (0.2 s: base.arrow_probe)."""
    with without_pandas():
        _write_groups(c, order, cuts, put)


def _write_groups(c: Columns, order: np.ndarray, cuts: np.ndarray,
                  put: Callable[[int, int, memoryview], None]) -> None:  # fmt: skip
    rows = np.fromiter(c.extra, np.int64, len(c.extra))
    where = np.empty(0, np.int64)
    if len(rows):
        inv = np.empty(len(c.ids), np.int64)
        inv[order] = np.arange(len(order))
        where = inv[rows]
        o = np.argsort(where)
        rows, where = rows[o], where[o]
    for b in range(0, len(order), BLOCK):
        e = min(b + BLOCK, len(order))
        lo_m, hi_m = np.searchsorted(where, [b, e])
        more = (where[lo_m:hi_m] - b, [c.extra[i] for i in rows[lo_m:hi_m].tolist()])
        arr = lines(c, order[b:e], more)
        off = np.frombuffer(arr.buffers()[1], np.int32, e - b + 1, arr.offset * 4)
        data = memoryview(arr.buffers()[2])
        g0 = max(int(np.searchsorted(cuts, b, side="right")) - 1, 0)
        for g in range(g0, len(cuts) - 1):
            lo, hi = max(int(cuts[g]), b), min(int(cuts[g + 1]), e)
            if lo >= e:
                break
            if hi > lo:
                put(g, hi - lo, data[off[lo - b] : off[hi - b]])
