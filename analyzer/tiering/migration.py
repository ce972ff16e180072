"""Array-style sub-LUN tiering: heat per unit counted each statistics interval
(decayed with a half-life, or summed over a sliding history), and at each migration
interval the hottest units moved up and the coldest down, within a migration budget.

`tiering` simulates one tier size; `tiering_distance` gives, for a budget-free
tier, the smallest size that serves each access, so that a sweep is one pass.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np

from analyzer.tiering import ranking
from analyzer.tiering.native import NEVER
from analyzer.tiering.params import Params


class Migration(NamedTuple):
    """One migration of array-style tiering: when, and how many units moved each way."""

    t_ns: int
    promoted: int
    demoted: int


class _Heat:
    """Heat per unit: decayed counts (kept scaled up so that a step costs only the units
    touched) or a sliding sum over the last `history` windows."""

    def __init__(self, n_units: int, decay: float, history: int | None) -> None:
        self.h = np.zeros(n_units, dtype=np.float64)
        self.inv_decay = 1.0 / decay
        self.scale = 1.0
        self.history = history
        self.past: deque[tuple[np.ndarray, np.ndarray]] = deque()

    def add(self, units: np.ndarray, counts: np.ndarray) -> None:
        if self.history is not None:
            self.h[units] += counts
            self.past.append((units, counts))
            if len(self.past) > self.history:
                u, c = self.past.popleft()
                self.h[u] -= c
            return
        self.scale *= self.inv_decay
        if self.scale > 1e150:  # renormalise before the scaled counts overflow
            self.h /= self.scale
            self.scale = 1.0
        self.h[units] += counts * self.scale


def _tiering_heat(p: Params, n_units: int, stats_per_migration: int) -> _Heat:
    decay = 0.5 ** (p.stats_interval_s / p.half_life_s) if p.half_life_s else 1.0
    # A half-life far below the interval forgets everything each interval; the
    # floor keeps 1 / decay finite (0.5 ** big underflows to 0).
    decay = max(decay, 1e-100)
    history = None
    if p.history_s is not None:
        history = max(1, round(p.history_s / p.stats_interval_s))
    return _Heat(n_units, decay, history)


def migration_steps(p: Params) -> tuple[int, int]:
    stats_ns = max(1, round(p.stats_interval_s * 1e9))
    return stats_ns, max(1, round(p.migrate_interval_s / p.stats_interval_s))


def tiering(
    p: Params, t_acc: np.ndarray, uid: np.ndarray, counted: np.ndarray, n_units: int, k: int,
    t0: int,
) -> tuple[np.ndarray, list[Migration]]:  # fmt: skip
    """Array-style tiering of k units: hit per access and (t_ns, promoted, demoted) per
    migration. The tier starts empty; placements change only at migration boundaries."""
    stats_ns, per = migration_steps(p)
    b = ranking.windows(t_acc, t0, stats_ns)
    heat = _tiering_heat(p, n_units, per)
    fast = np.zeros(n_units, dtype=bool)
    hit = np.zeros(len(uid), dtype=bool)
    moves: list[Migration] = []
    touched: list[np.ndarray] = []
    in_tier = np.zeros(0, dtype=np.int64)  # the units of `fast`, kept as a list too
    want = np.zeros(n_units, dtype=bool)  # scratch: the new target, cleared after use
    budget = None if p.budget_bytes is None else p.budget_bytes // p.unit
    for w in range(len(b) - 1):
        sl = slice(b[w], b[w + 1])
        hit[sl] = fast[uid[sl]]
        u, c = ranking.unit_counts(uid[sl][counted[sl]], n_units)
        heat.add(u, c)
        touched.append(u)
        if (w + 1) % per or k <= 0:
            continue
        if budget is None and p.history_s is None:
            # Decay scales every heat alike, so a unit neither in the tier nor touched
            # since the last migration still ranks below all k units in the tier: only
            # those two sets can make the new top k.
            hot, _ = ranking.sorted_unique(np.concatenate([in_tier, *touched]))
            hot = hot[heat.h[hot] > 0]
        else:
            hot = np.flatnonzero(heat.h > 0)
        touched.clear()
        target = ranking.top(heat.h, hot, k) if budget is None else ranking.rank(heat.h, hot, k)
        want[target] = True
        promote = target[~fast[target]]  # hottest first
        out = in_tier[~want[in_tier]]
        if budget is None:
            demote = out
        else:
            # Each promotion into a full tier needs a demotion too: both move data.
            free = k - len(in_tier)
            # n moves cost n while there is room, 2n - free past it.
            fit = budget if budget <= free else max(free, (budget + free) // 2)
            n_p = min(len(promote), fit)
            promote = promote[:n_p]
            demote = ranking.rank(-heat.h, np.sort(out), max(0, n_p - free))  # coldest first
        want[target] = False
        fast[demote] = False
        fast[promote] = True
        in_tier = target if budget is None else np.flatnonzero(fast)
        moves.append(Migration(t0 + (w + 1) * stats_ns, len(promote), len(demote)))
    return hit, moves


def tiering_distance(
    p: Params, t_acc: np.ndarray, uid: np.ndarray, counted: np.ndarray, n_units: int, t0: int
) -> np.ndarray:
    """Per access, the smallest tier (units) that holds its unit under budget-free
    tiering: its unit's rank in the last placement's heat order (NEVER if unranked)."""
    stats_ns, per = migration_steps(p)
    b = ranking.windows(t_acc, t0, stats_ns)
    heat = _tiering_heat(p, n_units, per)
    rank = np.full(n_units, NEVER, dtype=np.int64)
    d = np.empty(len(uid), dtype=np.int64)
    for w in range(len(b) - 1):
        sl = slice(b[w], b[w + 1])
        d[sl] = rank[uid[sl]]
        u, c = ranking.unit_counts(uid[sl][counted[sl]], n_units)
        heat.add(u, c)
        if (w + 1) % per:
            continue
        order = ranking.rank(heat.h, np.flatnonzero(heat.h > 0))
        rank.fill(NEVER)
        rank[order] = np.arange(len(order))
    return d
