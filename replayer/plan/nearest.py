"""The completions nearest each request's issue by other submitters (deps.py's
cross-thread candidates), in one search over every submitter's completions."""

from __future__ import annotations

import numpy as np


def others_around(start: np.ndarray, end: np.ndarray, tix: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """For each request, how long before its issue the latest completion by
    another submitter (`tix`) came, and how soon after it the next comes (int64
    max: none). In one search over completions in order: a step over the run
    of the request's own submitter's where one is at hand."""
    big = np.iinfo(np.int64).max
    n = len(start)
    o = np.argsort(end, kind="stable")
    eo, to = end[o], tix[o]
    run = np.r_[True, to[1:] != to[:-1]] if n else np.zeros(0, bool)
    prev = np.maximum.accumulate(np.where(run, np.arange(n), 0)) - 1
    nxt = np.minimum.accumulate(np.where(np.r_[run[1:], True], np.arange(n), n)[::-1])[::-1] + 1
    k = np.searchsorted(eo, start, side="right")  # the first completion after the issue
    b = k - 1
    b = np.where((b >= 0) & (to[np.maximum(b, 0)] == tix), prev[np.maximum(b, 0)], b)
    nearest = np.where(b >= 0, start - eo[np.maximum(b, 0)], big)
    a = np.where((k < n) & (to[np.minimum(k, n - 1)] == tix), nxt[np.minimum(k, n - 1)], k)
    lead = np.where(a < n, eo[np.minimum(a, n - 1)] - start, big)
    return nearest, lead
