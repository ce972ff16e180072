"""Cross-thread edges of a dependent plan (deps.py's doc, docs/replay.md): where
the trace shows one stream's requests waiting for another thread's completions
above chance, each such request also waits for that completion."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from replayer.plan.deps import MAX_CROSS_SUBMITTERS, around

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
CROSS_Z = 4.0  # the sign test's (ordered): 3e-5 for one window of independent threads
# A think time longer than this, where no evidence gave an edge, is a wait for
# another thread's event the trace does not show (_long_think). In an HDD-like
# engine trace the flusher's 10-90 ms between passes (a 5 ms poll for the
# sessions' progress) and the log writer's and sessions' waits over 2 ms set a
# dependent replay's pace on a device 300x faster; the fio jobs' 1 ms think
# times stay under it.
LONG_THINK_NS = CROSS_EDGE_NS
# A thread whose issue-to-issue gaps vary less than this (their interquartile
# range over their median) runs on its own clock: the engine's background
# maintenance reads (0.001 in an HDD-like trace and in an SSD-like one), against
# 0.118-1,591 for every other thread there.
PERIODIC_CV = 0.05
# A thread waits long for others where at least this share of its think times
# are over LONG_THINK_NS (in an HDD-like engine trace: the flusher 76 %, the log
# writer 37 %, each session 19 %). Fewer are the host's stalls (this VM's vCPUs
# stall 1-13 ms a few times a second): 1-3 of a fio process's 1,500 think times
# of 1 ms, recorded on either device under load, are over 2 ms; an edge for
# such a stall would have the request wait for another, independent process.
LONG_SHARE = 0.1


@dataclass
class Cross:
    """Cross-thread edges over a whole plan (every stream): request i waits also
    for request j of another thread, `gap_ns` after j's completion."""

    i: np.ndarray
    j: np.ndarray
    gap_ns: np.ndarray
    # (stream, other) -> (candidates, chance, mirror) at the window with the
    # highest ratio of candidates to chance (cross_edges)
    pairs: dict[tuple[int, int], tuple[int, int, int]]
    long_think: np.ndarray  # per edge: a long think's (_long_think), not the evidence's


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
    where, within one of `evidence_ns`, S's candidates on T are at least
    CROSS_MIN and CROSS_EVIDENCE times what independent threads would show by
    chance (T's other-thread completions as a Poisson stream at their mean
    rate), and in order (`ordered`): more than a coin flip gives against
    `mirror`, S's requests issued as soon BEFORE another thread's T completion
    (at the same lags, each under its own think time). A thread that waits for a completion
    issues after it; threads the host wakes together (its wake-up batching, a
    vCPU stall) issue just before another's completion as often as just after
    it, which Poisson does not model: fio's independent processes in an
    SSD-like trace recorded under load, 752 candidates within 10 us against
    196 by Poisson and 913 in mirror. `pairs` keeps, per pair, the window with
    the highest ratio of candidates to chance. A request of S then waits for
    its nearest candidate of a dependent
    pair. An edge points to a completion before the request's issue, so to an
    earlier issue: the plan's ids (issue order) keep every edge backwards. A
    thread on its own clock (`clocked`) neither gets nor gives an edge, as in
    _long_think."""
    n = len(start)
    big = np.iinfo(np.int64).max
    e = np.empty(0, np.int64)
    none = Cross(e, e, e, {}, np.empty(0, bool))
    threads = np.unique(thread)
    if n == 0 or len(threads) < 2 or len(threads) > MAX_CROSS_SUBMITTERS:
        return none
    span = max(int(end.max() - start.min()), 1)
    window = np.minimum(own, window_ns)
    streams = np.unique(stream).tolist()
    th = Threads.of(start, thread)
    mine = th.regular[th.tix]
    best = np.full(n, big, np.int64)
    best_j = np.full(n, -1, np.int64)
    pairs: dict[tuple[int, int], tuple[int, int, int]] = {}
    tix = th.tix
    for t in streams:
        # per request, another thread's latest T completion before its issue (of
        # one finished before it was issued: that thread's latest or none) and
        # how soon its next comes after it
        gj, lead = latest_of_others(start, end, tix, np.flatnonzero((stream == t) & ~mine), True)
        gap = np.where(gj >= 0, start - end[np.maximum(gj, 0)], big)
        cand = (gap <= window) & (gap < own) & ~mine
        mirror = (lead <= window) & (lead < own) & ~mine
        rate = int(((stream == t) & ~mine).sum()) / span
        for s in streams:
            m = stream == s
            cs, gs, ms, ls = cand[m], gap[m], mirror[m], lead[m]
            found = False
            for ev in evidence_ns:
                c = int((cs & (gs <= ev)).sum())
                mc = int((ms & (ls <= ev)).sum())
                w = np.minimum(window[m], ev).astype(float)
                chance = float((1 - np.exp(-rate * w)).sum())
                kept = pairs.get((int(s), int(t)))
                if kept is None or c * max(kept[1], 1) > kept[0] * max(chance, 1):
                    pairs[(int(s), int(t))] = (c, round(chance), mc)
                found = found or (
                    c >= CROSS_MIN and c >= CROSS_EVIDENCE * chance and ordered(c, mc)
                )
            if found:
                take = cand & m & (gap < best)
                best[take] = gap[take]
                best_j[take] = gj[take]
        # this stream's arrays go before the next stream's search makes its own
        del gj, lead, gap, cand, mirror
    evident = best_j >= 0
    _long_think(start, end, th, own, best, best_j)
    has = best_j >= 0
    return Cross(np.flatnonzero(has), best_j[has], best[has], pairs, ~evident[has])


def ordered(after: int, before: int) -> bool:
    """Whether `after` requests issued just after another thread's completion
    against `before` issued as soon before one are more than a coin flip gives
    (a sign test: at least CROSS_Z standard deviations over an even split)."""
    return after - before >= CROSS_Z * math.sqrt(after + before)


def _long_think(
    start: np.ndarray, end: np.ndarray, th: Threads, own: np.ndarray,
    best: np.ndarray, best_j: np.ndarray,
) -> None:  # fmt: skip
    """Edges (into best/best_j, where the evidence gave none) for the think times
    over LONG_THINK_NS: hfplayer's rule, each waits for the latest completion
    before its issue by another, I/O-bound thread (docs/replay.md). A thread
    paced by its own clock (its issues PERIODIC_CV regular) neither gets such an
    edge nor gives one; one whose think times are over LONG_THINK_NS for less than
    LONG_SHARE of its requests gets none. A request without a predecessor of its
    own (a thread's first) is such a think too, its start the longest of its waits
    (the engine's page flusher, waiting for the sessions to dirty its cache: its
    first write 1.2 s after their first reads in an 8 s HDD-like trace, which a
    replay at its recorded time kept). A trace planned in
    chunks judges each thread by the chunk's requests (as the evidence is counted)."""
    big = np.iinfo(np.int64).max
    keep = np.zeros(len(start), bool)  # threads whose long thinks keep their time
    pacer = np.zeros(len(th.rows), bool)
    for x, rows in enumerate(th.rows):
        regular = bool(th.regular[x])
        keep[rows] = not waits_long(start[rows], own[rows], regular)
        # a thread that mostly thinks long: its completions wake nobody
        pacer[x] = paces(start[rows], own[rows], regular)
    gj, _ = latest_of_others(start, end, th.tix, np.flatnonzero(pacer[th.tix]), False)
    gap = np.where(gj >= 0, start - end[np.maximum(gj, 0)], big)
    take = (best_j < 0) & ~keep & (own > LONG_THINK_NS) & (gap < own)
    best[take] = gap[take]
    best_j[take] = gj[take]


def paces(issues: np.ndarray, own: np.ndarray, regular: bool | None = None) -> bool:
    """Whether a thread's completions may be what another waited for: an
    I/O-bound thread (median think under LONG_THINK_NS), not on its own clock
    (periodic; `regular`: its answer where known). A thread that mostly thinks
    long wakes nobody by its I/O."""
    mine = own[own < np.iinfo(np.int64).max]
    if not len(mine) or np.median(mine) > LONG_THINK_NS:
        return False
    return not (periodic(issues) if regular is None else regular)


def waits_long(issues: np.ndarray, own: np.ndarray, regular: bool | None = None) -> bool:
    """Whether a thread (its requests' issues and own think times, int64 max
    without a predecessor) waits long for other threads' events: not on its own
    clock (periodic) and with at least LONG_SHARE of its think times over
    LONG_THINK_NS, its first request (its start, a wait too) counted as one.
    Fewer are the host's stalls. The first counts: a thread of few requests (the
    engine's log pre-formatter, 11 in an 8 s HDD-like trace: one long think and
    its start 0.5 s in) would otherwise keep its start as recorded, and the log
    writer that waits for its file with it (0.5 s of a 0.67 s critical path).
    `regular`: periodic's answer where known."""
    if not len(own) or (periodic(issues) if regular is None else regular):
        return False
    return bool(np.mean(own > LONG_THINK_NS) >= LONG_SHARE)


def clocked(start: np.ndarray, thread: np.ndarray) -> np.ndarray:
    """Per request, whether its thread is on its own clock (periodic). Such a
    thread sets no other's pace in a dependent plan, whatever the trace shows
    of it: its requests replay at their recorded pace on any target (its clock's),
    so a request tied to one of its completions would be tied to that pace. The
    engine's maintenance reads (27 ms apart, 5,326 in a 226 s HDD-like trace,
    the flusher's writes of pages they touched above chance after them) held a
    replay of its 1 s of transactional work on the SSD-like device to 136 s. What
    is lost: work the clocked thread caused in another thread (those writes) is
    replayed without waiting for it, and as often as recorded, where a faster
    run would have done less of it in its shorter time."""
    th = Threads.of(start, thread)
    return th.regular[th.tix]


@dataclass
class Threads:
    """A plan's threads: each request's (`tix`, 0.. in the order of their
    labels), each one's rows (ascending) and whether it is on its own clock."""

    tix: np.ndarray
    rows: list[np.ndarray]
    regular: np.ndarray  # per thread: periodic

    @staticmethod
    def of(start: np.ndarray, thread: np.ndarray) -> Threads:
        labels = np.unique(thread)
        tix = np.searchsorted(labels, thread)
        # one sort for every thread's rows, not a scan of every request a thread
        by = np.argsort(tix, kind="stable")
        rows = np.split(by, np.searchsorted(tix[by], np.arange(1, len(labels))))
        return Threads(tix, rows, np.array([periodic(start[r]) for r in rows], bool))


def periodic(issues: np.ndarray) -> bool:
    """Whether a thread's issues come at a regular period (the interquartile
    range of the gaps between them under PERIODIC_CV of their median; one late
    issue does not undo it): a thread paced by its own clock, not by the I/O it
    waits for."""
    g = np.diff(np.sort(issues, kind="stable"))  # a merge sort: issues come nearly in order
    g = g[g > 0]
    if len(g) < 3:
        return False
    q1, q2, q3 = np.percentile(g, [25, 50, 75])
    return bool(q3 - q1 < PERIODIC_CV * q2)


ROUNDS = 8  # steps back a request takes in latest_of_others before the slow way


def latest_of_others(
    start: np.ndarray, end: np.ndarray, tix: np.ndarray, rows: np.ndarray, lead: bool
) -> tuple[np.ndarray, np.ndarray]:
    """For each request i, of `rows` (their threads `tix`, 0..63), each other
    thread's latest completion at or before i's issue (of equal ones its last row)
    that was also issued before i; of those the latest (of equal ones, the
    lowest thread's): its row, else -1. And with `lead`, how soon after i's issue
    another thread's next completion of `rows` comes (int64 max: none). As a
    loop over threads that searches every request in each would, in one search:
    the rows merged by completion, a step back over a run of i's own thread's."""
    n = len(start)
    big = np.iinfo(np.int64).max
    p = rows[np.lexsort((rows, -tix[rows], end[rows]))]
    ep, tp = end[p], tix[p]
    m = len(p)
    if m and tp.max() >= 64:  # past a bit mask's threads (never in cross_edges)
        return _latest_of_others_slowly(start, end, tix, rows, np.arange(n), lead)
    run = np.r_[True, tp[1:] != tp[:-1]] if m else np.zeros(0, bool)
    # the position before the run of equal threads each position is in, and after it
    prev = (np.maximum.accumulate(np.where(run, np.arange(m), 0)) - 1).astype(np.int32)
    nxt = np.where(np.r_[run[1:], True], np.arange(m), m)
    nxt = (np.minimum.accumulate(nxt[::-1])[::-1] + 1).astype(np.int32)
    out = np.full(n, -1, np.int64)
    ahead = np.full(n, big, np.int64)
    if not m:
        return out, ahead
    sorted_ = (p, ep, tp, prev, nxt)
    # a block of requests at a time: what a request's search holds, held for a block
    for b in range(0, n, QUERIES):
        e = min(b + QUERIES, n)
        if lead:
            ahead[b:e] = _lead(sorted_, start[b:e], tix[b:e])
        out[b:e] = _latest(sorted_, start, end, tix, rows, b, e)
    return out, ahead


QUERIES = 1 << 18  # requests searched at a time (latest_of_others)
Sorted = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _lead(sorted_: Sorted, start: np.ndarray, tix: np.ndarray) -> np.ndarray:
    """How soon after each issue (`start`, of thread `tix`) another thread's next
    completion (of the merged rows) comes; int64 max: none."""
    p, ep, tp, _, nxt = sorted_
    m = len(p)
    q = np.searchsorted(ep, start, side="right")
    qc = np.minimum(q, m - 1)
    q = np.where((q < m) & (tp[qc] == tix), nxt[qc], q)
    return np.where(q < m, ep[np.minimum(q, m - 1)] - start, np.iinfo(np.int64).max)


def _latest(
    sorted_: Sorted, start: np.ndarray, end: np.ndarray, tix: np.ndarray, rows: np.ndarray,
    b: int, e: int,
) -> np.ndarray:  # fmt: skip
    """latest_of_others' rows for requests b..e: a step back at a time from
    each one's search (a run of its own thread's at once), ROUNDS of them, and
    what is left thread by thread."""
    p, ep, tp, prev, _ = sorted_
    s, t = start[b:e], tix[b:e]
    out = np.full(e - b, -1, np.int64)
    pos = np.searchsorted(ep, s, side="right") - 1
    seen = np.zeros(e - b, np.uint64)  # threads whose latest failed (issued after i)
    live = np.flatnonzero(pos >= 0)
    for _ in range(ROUNDS):
        if not len(live):
            break
        c = p[pos[live]]
        tc = tp[pos[live]].astype(np.uint64)
        mine = tc == t[live]
        skip = mine | ((seen[live] >> tc) & np.uint64(1)).astype(bool)
        good = ~skip & (start[c] < s[live]) & (c != live + b)
        out[live[good]] = c[good]
        bad = ~skip & ~good
        seen[live[bad]] |= np.uint64(1) << tc[bad]
        pos[live] = np.where(mine, prev[pos[live]], pos[live] - 1)
        live = live[~good & (pos[live] >= 0)]
    if len(live):
        out[live] = _latest_of_others_slowly(start, end, tix, rows, live + b, False)[0]
    return out


def _latest_of_others_slowly(
    start: np.ndarray, end: np.ndarray, tix: np.ndarray, rows: np.ndarray, at: np.ndarray,
    lead: bool,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """latest_of_others for requests `at`, thread by thread."""
    big = np.iinfo(np.int64).max
    gap = np.full(len(at), big, np.int64)
    gj = np.full(len(at), -1, np.int64)
    ahead = np.full(len(at), big, np.int64)
    for u in np.unique(tix[rows]).tolist():
        j, k = around(end, rows[tix[rows] == u], start[at])
        if lead:
            g = np.where(k >= 0, end[np.maximum(k, 0)] - start[at], big)
            ahead = np.minimum(ahead, np.where(tix[at] != u, g, big))
        g = np.where(j >= 0, start[at] - end[np.maximum(j, 0)], big)
        ok = (tix[at] != u) & (j >= 0) & (start[np.maximum(j, 0)] < start[at]) & (j != at)
        upd = ok & (g < gap)
        gap = np.where(upd, g, gap)
        gj = np.where(upd, j, gj)
    return gj, ahead
