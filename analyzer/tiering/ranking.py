"""The primitives every window-based policy shares: cutting accesses into time
windows, counting units per window, and ranking units by a score."""

from __future__ import annotations

import numpy as np

from analyzer.tiering.params import TieringError

MAX_WINDOWS = 10_000_000


def windows(t_acc: np.ndarray, t0: int, step_ns: int) -> np.ndarray:
    """Boundaries (access indices) of consecutive windows of step_ns from t0."""
    if len(t_acc) == 0:
        return np.zeros(1, dtype=np.int64)
    n = int((int(t_acc[-1]) - t0) // step_ns) + 1
    if n > MAX_WINDOWS:
        # One boundary per window: a nanosecond interval over a minute's trace would
        # ask for tens of GiB (the API's fuzz test found it), not a useful simulation.
        raise TieringError(
            f"an interval of {step_ns / 1e9:g} s cuts the run into {n:,} windows (at most "
            f"{MAX_WINDOWS:,}); give a longer stats or migrate interval"
        )
    edges = t0 + step_ns * np.arange(n + 1, dtype=np.int64)
    return np.searchsorted(t_acc, edges, side="left")


def unit_counts(ids: np.ndarray, n_units: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ids and their counts: a bincount when the window is dense, else a sort."""
    if 4 * len(ids) >= n_units:
        c = np.bincount(ids, minlength=n_units)
        u = np.flatnonzero(c)
        return u, c[u]
    return sorted_unique(ids)


def sorted_unique(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(ids, return_counts=True) by a plain sort: several times faster here."""
    if len(ids) == 0:
        return ids[:0], np.zeros(0, dtype=np.int64)
    s = np.sort(ids)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    return s[starts], np.diff(np.r_[starts, len(s)])


def rank(score: np.ndarray, units: np.ndarray, k: int | None = None) -> np.ndarray:
    """`units` (ascending ids) ordered hottest first, ties to the lower id, so that every
    policy and the sweep agree; only the first k when k is given."""
    if k is not None and k <= 0:
        return units[:0]
    if k is not None and k < len(units):
        s = score[units]
        # Everything as hot as the k-th hottest, then a stable sort of just those.
        kth = np.partition(s, len(s) - k)[len(s) - k]
        units = units[s >= kth]
    order = units[np.argsort(-score[units], kind="stable")]
    return order if k is None else order[:k]


def top(score: np.ndarray, units: np.ndarray, k: int) -> np.ndarray:
    """The set `rank(score, units, k)` holds, unordered: without the sort, which is
    most of a migration's cost when no budget makes the order matter."""
    if k <= 0:
        return units[:0]
    if k >= len(units):
        return units
    s = score[units]
    kth = np.partition(s, len(s) - k)[len(s) - k]
    above = units[s > kth]
    return np.concatenate([above, units[s == kth][: k - len(above)]])
