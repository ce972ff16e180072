"""Every policy behind one interface: a `Run`, prepared once from a run's events and
the parameters, gives the hits for any tier size and, for the stack-like policies,
each access's distance (the smallest tier that serves it), shared by single
simulations and sweeps.

- `tiering`: array-style tiering (migration.py).
- `lru`, `s3fifo`: an SSD cache, admitting on a miss (the C kernels, native.py).
- `oracle`: each migration window's most accessed units: the bound for `tiering`.
- `belady`: Belady's MIN with bypass: the bound for a cache that admits on a miss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from analyzer.tiering import native, ranking
from analyzer.tiering.accesses import Accesses, accesses, counted_mask
from analyzer.tiering.events import Events
from analyzer.tiering.migration import Migration, migration_steps, tiering, tiering_distance
from analyzer.tiering.native import NEVER
from analyzer.tiering.params import Params, TieringError, check


def _oracle_distance(
    p: Params, t_acc: np.ndarray, uid: np.ndarray, n_units: int, t0: int
) -> np.ndarray:
    """Per access, its unit's rank by access count within its own migration window."""
    stats_ns, per = migration_steps(p)
    b = ranking.windows(t_acc, t0, stats_ns * per)
    d = np.empty(len(uid), dtype=np.int64)
    rank = np.zeros(n_units, dtype=np.int64)
    count = np.zeros(n_units, dtype=np.float64)
    for w in range(len(b) - 1):
        sl = slice(b[w], b[w + 1])
        u, c = ranking.unit_counts(uid[sl], n_units)
        count[u] = c
        order = ranking.rank(count, u)
        rank[order] = np.arange(len(order))
        d[sl] = rank[uid[sl]]
        count[u] = 0
    return d


def _lru_distance(acc: Accesses, counted: np.ndarray) -> np.ndarray:
    d = np.full(len(acc.uid), NEVER, dtype=np.int64)
    d[counted] = native.stack_distances(acc.uid[counted], acc.n_units)
    return d


def _cache_flags(policy: str, acc: Accesses, counted: np.ndarray, k: int) -> np.ndarray:
    sim = {"lru": native.lru, "s3fifo": native.s3fifo, "belady": native.belady}[policy]
    flags = np.zeros(len(acc.uid), dtype=np.uint8)
    flags[counted] = sim(acc.uid[counted], acc.n_units, k)
    return flags


class Hits(NamedTuple):
    """What a tier of k units did with each access."""

    hit: np.ndarray  # bool per access: its unit was in the fast tier
    flags: np.ndarray  # uint8 per access: native.HIT | INSERTED | EVICTED (caches)
    moves: list[Migration]  # array-style tiering's migrations


@dataclass
class Run:
    """What a simulation needs, prepared once and shared by single runs and sweeps."""

    p: Params
    ev: Events
    acc: Accesses
    counted: np.ndarray
    t_acc: np.ndarray
    t0: int
    _distance: np.ndarray | None = field(default=None, repr=False)

    def one_pass(self) -> bool:
        return self.p.policy in ("lru", "oracle") or (
            self.p.policy == "tiering" and self.p.budget_bytes is None
        )

    def distance(self) -> np.ndarray:
        if self._distance is None:
            p, a = self.p, self.acc
            if p.policy == "lru":
                self._distance = _lru_distance(a, self.counted)
            elif p.policy == "oracle":
                self._distance = _oracle_distance(p, self.t_acc, a.uid, a.n_units, self.t0)
            else:
                self._distance = tiering_distance(
                    p, self.t_acc, a.uid, self.counted, a.n_units, self.t0
                )
        return self._distance

    def hits(self, k: int) -> Hits:
        """What a tier of k units does with each access."""
        p, a = self.p, self.acc
        if p.policy in ("lru", "s3fifo", "belady"):
            flags = _cache_flags(p.policy, a, self.counted, k)
            return Hits((flags & native.HIT) > 0, flags, [])
        if p.policy == "oracle":
            hit = self.distance() < k
            return Hits(hit, np.zeros(len(hit), dtype=np.uint8), [])
        hit, moves = tiering(p, self.t_acc, a.uid, self.counted, a.n_units, k, self.t0)
        return Hits(hit, np.zeros(len(hit), dtype=np.uint8), moves)


def prepare(ev: Events, p: Params) -> Run:
    if len(ev) == 0:
        raise TieringError("the run has no reads or writes to simulate")
    check(p)
    acc = accesses(ev, p.unit)
    t_acc = ev.t_ns if acc.identity else ev.t_ns[acc.req]
    return Run(p, ev, acc, counted_mask(p, ev, acc), t_acc, int(ev.t_ns[0]))
