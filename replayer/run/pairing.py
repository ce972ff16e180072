"""Pair a replay's requests with its original's while both stream past, in order.

A replayed request is the original request with the same (op, offset, size) and
the same place among its equals: the k-th read of 4 KiB at byte X in the replay
is the k-th in the original (fidelity.match, which holds both traces whole).
Met in time order, that is first come, first paired: for each key, the earliest
unpaired request of one trace pairs with the earliest unpaired of the other.
`Pairer` does it a batch at a time, keeping the unpaired requests of both
traces from one batch to the next.

The horizon bounds what is kept, and how far apart a pair may be. Both traces
count time from their first request, so a replayed request comes within a few
milliseconds of its original (fio's start, the replay's jitter). A request pairs
only with one less than `HORIZON_NS` away: met one at a time, a request still
unpaired when the other trace has moved that far past it is dropped, and the
next one of its key pairs instead (Pairer._match does the same a batch at a
time, so the pairs do not depend on where the batches fall). That is the only
difference from fidelity.match: a request the other trace lacks no longer shifts
the k of every later equal request (which paired each of them with the wrong
one, minutes apart, up to the end of the trace); wherever every pair of
fidelity.match lies within the horizon, the pairs are the same, which the tests
check.

A plan that moved the offsets (--remap, scaling: plan.json "mapping") replays an
original request at another (offset, size): `Pairer` then keys the original's
requests as the plan replayed them (`orig_keys`, replayer/plan/mapping.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from replayer.run import pairmatch
from replayer.run.ordered import COMPACT, cat, take

HORIZON_NS = 60 * 10**9
MAX_ROUNDS = 32
PAIRMATCH_ROWS = (1 << 31) - 1  # src/pairmatch.c counts rows in int32


def keys(r: np.ndarray) -> np.ndarray:
    """fidelity._keys: (op, offset, size) as one integer."""
    return (
        (r["op"].astype(np.uint64) << np.uint64(56))
        ^ (r["offset"].astype(np.uint64) << np.uint64(8))
        ^ r["bytes"].astype(np.uint64)
    )


def _groups(k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(order, unique keys, first place of each in order, count of each)."""
    order = np.argsort(k, kind="stable")
    sk = k[order]
    start = np.r_[0, np.flatnonzero(sk[1:] != sk[:-1]) + 1] if len(sk) else np.zeros(0, np.int64)
    counts = np.diff(np.r_[start, len(sk)])
    return order, sk[start], start, counts


def first_come(ka: np.ndarray, kb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (into a, into b): per key, the m earliest of each, m the fewer."""
    oa, ua, sa, ca = _groups(ka)
    ob, ub, sb, cb = _groups(kb)
    _, ia, ib = np.intersect1d(ua, ub, assume_unique=True, return_indices=True)
    m = np.minimum(ca[ia], cb[ib])
    step = np.arange(int(m.sum())) - np.repeat(np.cumsum(m) - m, m)
    return oa[np.repeat(sa[ia], m) + step], ob[np.repeat(sb[ib], m) + step]


@dataclass
class Step:
    """What one batch settled: pairs (original row, replay row, aligned by place),
    and the requests of each trace that will stay unpaired."""

    orig: np.ndarray
    rep: np.ndarray
    lost_orig: np.ndarray
    lost_rep: np.ndarray


Keys = Callable[[np.ndarray], np.ndarray]


class Pairer:
    def __init__(
        self,
        horizon_ns: int = HORIZON_NS,
        orig_keys: Keys | None = None,
        rep_keys: Keys | None = None,
    ) -> None:
        self.horizon_ns = horizon_ns
        self.orig_keys: Keys = orig_keys or keys
        self.rep_keys: Keys = rep_keys or keys
        self._o = np.empty(0, COMPACT)
        self._r = np.empty(0, COMPACT)
        # The held rows' keys: each request is keyed once, when it comes (keys are
        # a function of each row alone), not again at every step it stays held.
        self._ko = np.empty(0, np.uint64)
        self._kr = np.empty(0, np.uint64)

    @property
    def held(self) -> int:
        return len(self._o) + len(self._r)

    def earliest_held(self) -> int | None:
        """The earliest time of an original request still unpaired (None: none):
        every later pair's original is one of these or comes in a later batch."""
        return int(self._o["t"].min()) if len(self._o) else None

    def step(self, o: np.ndarray, r: np.ndarray, bound: int | None) -> Step:
        """Add the next requests of each trace, all of them before `bound` (ns;
        None: the end of both traces)."""
        a = cat([self._o, o]) if len(self._o) else o
        b = cat([self._r, r]) if len(self._r) else r
        ka = _joined(self._ko, self.orig_keys(o))
        kb = _joined(self._kr, self.rep_keys(r))
        ia, ib, gone_a, gone_b = self._match(a, b, ka, kb)
        self._o, self._ko, lost_a = self._unpaired(a, ka, ia, gone_a, bound)
        self._r, self._kr, lost_b = self._unpaired(b, kb, ib, gone_b, bound)
        # Pairs come in a's row order: where every row of a paired, they are a
        # itself (a replay near its rate pairs whole batches; no copy of them).
        return Step(a if len(ia) == len(a) else take(a, ia), take(b, ib), lost_a, lost_b)

    def _unpaired(
        self, x: np.ndarray, k: np.ndarray, paired: np.ndarray, gone: np.ndarray, bound: int | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows of `x` still held, their keys (of `k`), rows that will stay unpaired):
        those not `paired`, the last `gone` or more than the horizon before `bound`."""
        if len(paired) == len(x):
            none = np.empty(0, x.dtype)  # (not x[:0]: a view would keep x alive)
            return none, np.empty(0, np.uint64), none
        free = np.ones(len(x), bool)
        free[paired] = False
        if bound is None:
            return np.empty(0, x.dtype), np.empty(0, np.uint64), take(x, free)
        old = free & ((x["t"] < bound - self.horizon_ns) | gone)
        held = free & ~old
        return take(x, held), k[held], take(x, old)

    def _match(self, a: np.ndarray, b: np.ndarray, ka: np.ndarray, kb: np.ndarray):
        """first_come of rows a and b keyed ka and kb, where a request more than the
        horizon older than its partner is dropped instead (it could pair with
        nothing later either) and its key matched again without it: per key, the
        earliest such pair first, as if the requests came one at a time. After
        MAX_ROUNDS (a key with hundreds of chance pairs, as in a synthetic replay)
        every such pair is dropped."""
        if pairmatch.available() and len(a) < PAIRMATCH_ROWS and len(b) < PAIRMATCH_ROWS:
            return pairmatch.match(ka, a["t"], kb, b["t"], self.horizon_ns)
        gone_a, gone_b = np.zeros(len(a), bool), np.zeros(len(b), bool)
        for round_ in range(MAX_ROUNDS + 1):
            la, lb = np.flatnonzero(~gone_a), np.flatnonzero(~gone_b)
            pa, pb = first_come(ka[la], kb[lb])
            ia, ib = la[pa], lb[pb]
            ta, tb = a["t"][ia], b["t"][ib]
            bad = np.flatnonzero(np.abs(tb - ta) > self.horizon_ns)
            if not len(bad):
                break
            if round_ < MAX_ROUNDS:
                # Only each key's earliest: dropping it may let its later ones pair.
                order = np.lexsort((np.minimum(ta, tb)[bad], ka[ia[bad]]))
                kk = ka[ia[bad[order]]]
                bad = bad[order[np.r_[True, kk[1:] != kk[:-1]]]]
            older_a = ta[bad] < tb[bad]
            gone_a[ia[bad[older_a]]] = True
            gone_b[ib[bad[~older_a]]] = True
            if round_ == MAX_ROUNDS:
                keep = np.ones(len(ia), bool)
                keep[bad] = False
                ia, ib = ia[keep], ib[keep]
        # In the original's row order, as the C matcher gives them (pairmatch.py).
        by_a = np.argsort(ia, kind="stable")
        return ia[by_a], ib[by_a], gone_a, gone_b


def _joined(held: np.ndarray, new: np.ndarray) -> np.ndarray:
    return np.concatenate([held, np.asarray(new, np.uint64)]) if len(held) else new


class KeysAhead:
    """`fn`'s keys of each batch, made in the thread that reads the batches
    (ahead.py: `made` runs there, `given` on the consumer's side) and taken by
    the pairing (Pairer's orig_keys): the mapping's keys are numpy work off the
    pairing's thread. A batch the consumer joined with others
    (fidstream._at_least) is keyed where it is asked for; what was made for the
    batches it joined is dropped then, so at most the batches in flight are
    held."""

    def __init__(self, fn: Keys) -> None:
        self.fn = fn
        self._made: deque[tuple[np.ndarray, np.ndarray]] = deque()  # (batch, keys)
        self._given = 0  # of those made, how many the consumer has been handed

    def made(self, batches: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        for b in batches:
            self._made.append((b, self.fn(b)))
            yield b

    def given(self, batches: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        for b in batches:
            self._given += 1
            yield b

    def __call__(self, a: np.ndarray) -> np.ndarray:
        while self._given and self._made:
            b, k = self._made.popleft()
            self._given -= 1
            if b is a:
                return k
        return self.fn(a)
