"""Dependency inference for closed-loop replay (`replay plan --timing dependent|afap`),
from the trace alone.

Heuristics (hfplayer, FAST'17, does the like for block traces):

- Submitter: the thread (`tid`); where the trace has no thread, the process
  (`pid`); where it has neither (an imported blkparse or fio log), the whole
  stream on its device is one submitter, its depth the most it had in flight
  (`Deps.key` says which was used).
- A request's app-side issue is its queue time (the block layer's entry, the
  nearest the trace has to the system call), else its dispatch, else its
  completion; its completion is `ts_complete_ns`.
- Depth: the most requests of a submitter in flight at once (a synchronous
  submitter shows one; an asynchronous one its window), counted at issues and
  reached by at least 0.1 % of its requests (and two): a single overlap, such as
  a completion the kernel never reported (stamped late, when its tag was reused),
  is not a window. Requests flagged complete_unseen (the kernel never reported
  their completion; the recorder stamped it when the tag was reused, ~100 ms late:
  3 of 6,000 in an HDD-like trace here) do not count towards the depth, and a
  synchronous submitter's are taken to have completed its median think time
  before its next issue.
- Predecessor: the latest completion of the same submitter before the request's
  issue; think time: issue minus that completion. A request with none (a
  submitter's first, or one of an async window filled at once) keeps its
  recorded time.
- Flush and FUA ordering: a flush, a FUA write or a PREFLUSH write also waits for
  the writes it covers: of every submitter of its stream, the latest write that
  had completed before its issue (the runner orders the rest by depth).
- Cross-thread dependencies (a session waiting for another thread's commit)
  leave no mark in a block trace but timing. `cross` counts the requests issued
  within CROSS_NS of another submitter's completion, and sooner after it than
  after their own predecessor: candidates the replay cannot honour (it keeps only
  the submitter's own chain), i.e. an upper bound of what is lost; beside it,
  how many of them independent submitters would show by chance (the others'
  completions as a Poisson stream at their mean rate): candidates well above
  chance are the trace's evidence of cross-thread dependencies. `cross_edges`
  acts on that evidence over a whole plan, every stream: where one stream's
  requests come soon after another stream's completions (by another thread) at
  least CROSS_EVIDENCE times as often as chance gives (a log writer's write
  right after a session's read, the session's next read right after that
  write: its commit), each such request also waits for that completion, its
  think time counted from it. A plan chains
  each stream apart (a thread's db-read and db-write are two chains):
  `other_stream_predecessors` counts the requests whose thread's previous
  completion was of another stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from replayer.plan.source import FLAG, FUA, OP, PREFLUSH

UNSEEN = 1 << FLAG["complete_unseen"]
CROSS_NS = 50_000  # 50 us: a wake-up after another thread's completion
MAX_CROSS_SUBMITTERS = 64  # past this, cross-thread candidates are not counted
DEPTH_SHARE = 0.001  # a depth counts once this share of requests were issued at it


@dataclass
class Deps:
    """A slice's requests' dependencies, in the slice's order."""

    key: str  # "tid", "pid" or "stream": what a submitter is
    submitter: np.ndarray  # int64 label per request
    pred: np.ndarray  # index of the predecessor in the slice, -1 for none
    think_ns: np.ndarray  # issue minus the predecessor's completion (0 without one)
    covers: list[tuple[int, int]]  # (flush/FUA request, a write it waits for)
    depth: dict[int, int]  # submitter -> its most requests in flight
    # cross-thread candidates and how many chance would give (None: too many submitters)
    cross: tuple[int, int] | None


def times(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(app-side issue, completion) of each request, ns in the trace's clock."""
    q = r["ts_queue_ns"].astype(np.int64)
    d = r["ts_issue_ns"].astype(np.int64)
    c = r["ts_complete_ns"].astype(np.int64)
    start = np.where(q > 0, q, np.where(d > 0, d, c))
    return start, np.maximum(c, start)


def submitters(r: np.ndarray) -> tuple[str, np.ndarray]:
    """What a submitter is in these records, and each request's."""
    if (r["tid"] > 0).all():
        return "tid", r["tid"].astype(np.int64)
    if (r["pid"] > 0).all():
        return "pid", r["pid"].astype(np.int64)
    return "stream", np.zeros(len(r), np.int64)


def _depth(start: np.ndarray, end: np.ndarray) -> int:
    """The most requests in flight at an issue that at least DEPTH_SHARE of the
    requests (and two) saw: one late-recorded completion (a completion the kernel
    never reported is stamped when its tag is reused) does not make a
    synchronous submitter asynchronous."""
    n = len(start)
    by_start = np.sort(start, kind="stable")
    started = np.searchsorted(by_start, start, side="right")
    ended = np.searchsorted(np.sort(end), start, side="right")
    inflight = np.sort(started - ended)[::-1]
    k = max(2, int(np.ceil(DEPTH_SHARE * n)))
    return max(1, int(inflight[min(k, n) - 1]))


def _latest_before(end: np.ndarray, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in `at`, the row (of `rows`, whose completions are end[rows])
    with the latest completion at or before it; -1 where none."""
    by_end = rows[np.argsort(end[rows], kind="stable")]
    k = np.searchsorted(end[by_end], at, side="right") - 1
    return np.where(k >= 0, by_end[np.maximum(k, 0)], -1)


def _chain(start: np.ndarray, end: np.ndarray, rows: np.ndarray, pred: np.ndarray) -> None:
    """Each of `rows`' predecessor among `rows` (into `pred`)."""
    by_end = rows[np.argsort(end[rows], kind="stable")]
    ks = np.searchsorted(end[by_end], start[rows], side="right") - 1
    for i, k in zip(rows.tolist(), ks.tolist(), strict=True):
        # A request that took no time ends as it starts: it is neither its own
        # predecessor nor one of a request issued at that instant before it.
        while k >= 0 and (by_end[k] == i or (start[by_end[k]] == start[i] and by_end[k] > i)):
            k -= 1
        pred[i] = by_end[k] if k >= 0 else -1


def _covers(
    r: np.ndarray, start: np.ndarray, end: np.ndarray, sub: np.ndarray
) -> list[tuple[int, int]]:
    op, flags = r["op"], r["flags"]
    write = np.isin(op, [OP["write"], OP["write-zeroes"]])
    orders = (op == OP["flush"]) | (write & ((flags & (FUA | PREFLUSH)) != 0))
    who = np.flatnonzero(orders)
    out: list[tuple[int, int]] = []
    if not len(who):
        return out
    for s in np.unique(sub).tolist():
        rows = np.flatnonzero(write & (sub == s))
        if not len(rows):
            continue
        w = _latest_before(end, rows, start[who])
        for i, j in zip(who.tolist(), w.tolist(), strict=True):
            if j >= 0 and j != i and start[j] <= start[i]:
                out.append((i, j))
    return out


def _cross(
    start: np.ndarray, end: np.ndarray, sub: np.ndarray, think: np.ndarray, has: np.ndarray
) -> tuple[int, int] | None:
    """(candidates, how many independent submitters would show by chance): a
    request counts where another submitter's completion came CROSS_NS or less
    before its issue and after its own predecessor's completion. By chance: other
    submitters' completions as a Poisson stream at their mean rate."""
    labels = np.unique(sub)
    if len(labels) > MAX_CROSS_SUBMITTERS:
        return None
    if len(labels) < 2:
        return 0, 0
    nearest = np.full(len(start), np.iinfo(np.int64).max, np.int64)
    rate = np.zeros(len(start))
    span = max(int(end.max() - start.min()), 1)
    for s in labels.tolist():
        rows = np.flatnonzero(sub == s)
        other = sub != s
        j = _latest_before(end, rows, start)
        gap = np.where(j >= 0, start - end[np.maximum(j, 0)], nearest)
        nearest = np.where(other, np.minimum(nearest, gap), nearest)
        rate[other] += len(rows) / span
    own = np.where(has, think, np.iinfo(np.int64).max)
    window = np.minimum(own, CROSS_NS).astype(float)
    chance = float((1 - np.exp(-rate * window)).sum())
    return int(((nearest <= CROSS_NS) & (nearest < own)).sum()), round(chance)


def _bound_unseen(start: np.ndarray, end: np.ndarray, rows: np.ndarray, unseen: np.ndarray) -> None:
    """A synchronous submitter's request whose completion the kernel never
    reported (stamped when its tag was reused, up to ~100 ms late here) completed
    before the submitter's next issue: `end` bounded by that issue less the
    submitter's median think time."""
    o = rows[np.argsort(start[rows], kind="stable")]
    nxt = np.append(start[o[1:]], np.iinfo(np.int64).max)
    late = unseen[o]
    # its next issue less the submitter's median think time
    gaps = (nxt - end[o])[~late & (nxt > end[o]) & (nxt < np.iinfo(np.int64).max)]
    think = int(np.median(gaps)) if len(gaps) else 0
    bound = np.minimum(end[o[late]], nxt[late] - think)
    end[o[late]] = np.maximum(bound, start[o[late]])


def infer(r: np.ndarray, cross: bool = True) -> Deps:
    """The dependencies of records `r` (one stream's, in issue order)."""
    start, end = times(r)
    key, sub = submitters(r)
    pred = np.full(len(r), -1, np.int64)
    depth: dict[int, int] = {}
    unseen = (r["flags"] & UNSEEN) != 0
    for s in np.unique(sub).tolist():
        rows = np.flatnonzero(sub == s)
        seen = rows[~unseen[rows]]
        depth[int(s)] = _depth(start[seen], end[seen]) if len(seen) else 1
        if depth[int(s)] == 1 and unseen[rows].any():
            _bound_unseen(start, end, rows, unseen)
        _chain(start, end, rows, pred)
    has = pred >= 0
    think = np.where(has, start - end[np.maximum(pred, 0)], 0)
    covers = [(i, j) for i, j in _covers(r, start, end, sub) if j != pred[i]]
    return Deps(
        key, sub, pred, np.maximum(think, 0), covers, depth, _cross(start, end, sub, think, has)
    )


def other_stream_predecessors(r: np.ndarray, stream_name: Callable[[int], str]) -> dict[str, int]:
    """Per stream, the requests whose submitter's latest completion before them
    (on the same device, any stream) was of another stream: a plan chains each
    stream apart, so these wait for their own stream's previous completion instead."""
    out: dict[str, int] = {}
    for dev in np.unique(r["dev"]).tolist():
        rows = np.flatnonzero(r["dev"] == dev)
        d = infer(r[rows], cross=False)
        has = d.pred >= 0
        sid = r["stream"][rows]
        other = has & (sid[np.maximum(d.pred, 0)] != sid)
        for s, n in zip(*np.unique(sid[other], return_counts=True), strict=True):
            name = stream_name(int(s))
            out[name] = out.get(name, 0) + int(n)
    return out


def summary(d: Deps) -> dict[str, Any]:
    """What `replay plan` reports of a slice's dependencies (plan.json `dependencies`)."""
    has = d.pred >= 0
    think_us = d.think_ns[has] / 1000
    pct = (
        {f"p{q}": round(float(np.percentile(think_us, q)), 1) for q in (10, 50, 90, 99)}
        if len(think_us)
        else {}
    )
    return {
        "submitter": d.key,
        "submitters": len(d.depth),
        "requests": len(d.pred),
        "with_predecessor": int(has.sum()),
        "depth": max(d.depth.values(), default=1),
        "think_us": pct,
        "flush_orderings": len(d.covers),
        "cross_candidates": d.cross[0] if d.cross else None,
        "cross_by_chance": d.cross[1] if d.cross else None,
    }


CROSS_EVIDENCE = 3.0  # a pair of streams' candidates over what chance gives
# How soon after another thread's completion a request counts as waiting for it:
# a wake-up on this 2-vCPU VM took 42-65 us at the median after the log write a
# session waited for (an HDD-like engine trace), over 1 ms at p90 (vCPU stalls).
CROSS_EDGE_NS = 2_000_000
# The evidence is counted within each of these of the completion: a dependent
# request's wake-up falls within a few us on a fast, busy trace (an SSD-like
# engine trace at 50k I/O/s: a session's read after the log write it waited
# for, 1,131 within 5 us against 363 by chance; 2,231 against 1,334 within
# 50 us) and tens of us on a slow one (the HDD-like: 31 within 30 us, 1 by chance).
CROSS_EVIDENCE_NS = (5_000, 10_000, 20_000, 50_000, 100_000)
CROSS_MIN = 20  # and at least this many candidates: fewer are no evidence


@dataclass
class Cross:
    """Cross-thread edges over a whole plan (every stream): request i waits also
    for request j of another thread, `gap_ns` after j's completion."""

    i: np.ndarray
    j: np.ndarray
    gap_ns: np.ndarray
    pairs: dict[tuple[int, int], tuple[int, int]]  # (stream, other) -> (candidates, chance)


def cross_edges(
    start: np.ndarray,
    end: np.ndarray,
    thread: np.ndarray,
    stream: np.ndarray,
    own: np.ndarray,
    window_ns: int = CROSS_EDGE_NS,
    evidence_ns: tuple[int, ...] = CROSS_EVIDENCE_NS,
) -> Cross:
    """The cross-thread dependencies the trace gives evidence of (docs/replay.md).

    For each request and each stream T: the latest completion, by another thread,
    of a T request before its issue; a candidate where it came `window_ns` or less
    before the issue and after the request's own predecessor completed (`own`: its
    think time, int64 max without one). A pair of streams (S, T) is dependent
    where S's candidates on T within one of `evidence_ns` are at least
    CROSS_EVIDENCE times what independent threads would show by chance (T's
    other-thread completions as a Poisson stream at their mean rate) and at least
    CROSS_MIN (`pairs` keeps the window with the highest ratio). A
    request of S then waits for its nearest candidate of a dependent pair. An edge
    points to a completion before the request's issue, so to an earlier issue: the
    plan's ids (issue order) keep every edge backwards."""
    n = len(start)
    big = np.iinfo(np.int64).max
    none = Cross(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), {})
    threads = np.unique(thread)
    if n == 0 or len(threads) < 2 or len(threads) > MAX_CROSS_SUBMITTERS:
        return none
    span = max(int(end.max() - start.min()), 1)
    window = np.minimum(own, window_ns)
    streams = np.unique(stream).tolist()
    best = np.full(n, big, np.int64)
    best_j = np.full(n, -1, np.int64)
    pairs: dict[tuple[int, int], tuple[int, int]] = {}
    idx = np.arange(n)
    for t in streams:
        gap = np.full(n, big, np.int64)
        gj = np.full(n, -1, np.int64)
        for u in threads.tolist():
            rows = np.flatnonzero((stream == t) & (thread == u))
            if not len(rows):
                continue
            j = _latest_before(end, rows, start)
            g = np.where(j >= 0, start - end[np.maximum(j, 0)], big)
            # another thread's, finished before the issue of a request issued after it
            ok = (thread != u) & (j >= 0) & (start[np.maximum(j, 0)] < start) & (j != idx)
            upd = ok & (g < gap)
            gap = np.where(upd, g, gap)
            gj = np.where(upd, j, gj)
        cand = (gap <= window) & (gap < own)
        rate = int((stream == t).sum()) / span
        for s in streams:
            m = stream == s
            found = False
            for ev in evidence_ns:
                c = int((cand & m & (gap <= ev)).sum())
                w = np.minimum(window[m], ev).astype(float)
                chance = float((1 - np.exp(-rate * w)).sum())
                best_pair = pairs.get((int(s), int(t)))
                if best_pair is None or c * max(best_pair[1], 1) > best_pair[0] * max(chance, 1):
                    pairs[(int(s), int(t))] = (c, round(chance))
                found = found or (c >= CROSS_MIN and c >= CROSS_EVIDENCE * chance)
            if found:
                take = cand & m & (gap < best)
                best = np.where(take, gap, best)
                best_j = np.where(take, gj, best_j)
    has = best_j >= 0
    return Cross(np.flatnonzero(has), best_j[has], best[has], pairs)
