"""The SSD read cache as the emulated array runs it: LRU of units whose fills take time.

workload/src/cachepolicy.c as analyzer/lab/src/arraytier.c drives it: a read looks
each unit it touches up once; a unit whose copy is in the cache is a hit (and the
most recently read); a miss is queued for a fill once (reads of a queued unit miss
too); one mover fills the queued units in order, one at a time, each taking
`fill_s`; the victim (the least recently read unit) leaves when its fill starts,
and the unit is a hit once its fill is done. With `fill_s` 0 every miss is
admitted before the next look-up: the simulator's `lru` (admit on a read miss,
`native.lru`). tests/analyzer/test_lab_array_decisions.py holds both to the
array's own decisions on a recorded trace.

Why it matters for a prediction: under load the mover, not the misses, sets how
often the cache's contents change (the array filled 25 units a second in
`twoctl/c1` where instant admission on the baseline's trace fills on 19 % of its
reads, docs/hybrid.md "The read cache with six databases").
"""

from __future__ import annotations

from collections import OrderedDict, deque


class FillQueueLRU:
    """`k` units of cache; `read(unit, now)` in time order (seconds)."""

    def __init__(self, k: int, fill_s: float) -> None:
        self.k = k
        self.fill_s = fill_s
        self.lru: OrderedDict[int, None] = OrderedDict()  # least recently read first
        self.queue: deque[int] = deque()
        self.queued: set[int] = set()
        self.size = 0  # cached units and the one being filled (its slot is taken)
        self.moving = -1  # the unit being filled, -1: the mover is free
        self.done_at = 0.0
        self.fills = 0
        self.evictions = 0

    def _start(self, at: float) -> None:
        """The mover takes the queue's next unit at `at`; its victim leaves now."""
        u = self.queue.popleft()
        if self.size >= self.k and self.lru:
            self.lru.popitem(last=False)
            self.evictions += 1
            self.size -= 1
        self.size += 1
        self.moving, self.done_at = u, at + self.fill_s

    def advance(self, now: float) -> None:
        """Every fill done by `now` admitted, the next started at its predecessor's end."""
        while self.moving >= 0 and self.done_at <= now:
            u, at = self.moving, self.done_at
            self.lru[u] = None
            self.queued.discard(u)
            self.fills += 1
            self.moving = -1
            if self.queue:
                self._start(at)

    def read(self, unit: int, now: float) -> bool:
        """One look-up: a hit, or a miss queued (once) and started if the mover is free."""
        self.advance(now)
        if unit in self.lru:
            self.lru.move_to_end(unit)
            return True
        if unit not in self.queued and self.k > 0:
            self.queued.add(unit)
            self.queue.append(unit)
            if self.moving < 0:
                self._start(now)
                self.advance(now)  # fill_s 0: admitted before the next look-up
        return False
