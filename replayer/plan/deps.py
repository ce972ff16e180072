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
  chance are the trace's evidence of cross-thread dependencies; and the mirror
  count (requests issued as soon before another submitter's completion), the
  other side of crossedges.ordered's sign test. `cross_edges`
  (crossedges.py)
  acts on that evidence over a whole plan, every stream: where one stream's
  requests come soon after another stream's completions (by another thread) at
  least CROSS_EVIDENCE times as often as chance gives (a log writer's write
  right after a session's read, the session's next read right after that
  write: its commit), and in that order more often than a coin flip gives
  (crossedges.ordered: threads the host wakes together are in either order),
  each such request also waits for that completion, its
  think time counted from it. A think time over LONG_THINK_NS (crossedges.py) that no evidence
  explains (the trace does not show what the thread waited for: a flusher
  polling for progress, a log writer for a commit) waits, by hfplayer's rule,
  for the latest completion before its issue by another, I/O-bound thread
  (median think under LONG_THINK_NS); a thread on its own clock
  (crossedges.clocked) neither gets nor gives such an edge, nor an evidence or
  wake edge, nor does a thread with fewer than
  LONG_SHARE of its think times that long (the host's stalls). A plan chains
  each stream apart (a thread's db-read and db-write are two chains):
  `other_stream_predecessors` counts the requests whose thread's previous
  completion was of another stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replayer.plan.nearest import others_around
from replayer.plan.source import FLAG, FUA, OP, PREFLUSH
from replayer.run import quantiles

UNSEEN = 1 << FLAG["complete_unseen"]
CROSS_NS = 50_000  # 50 us: a wake-up after another thread's completion
MAX_CROSS_SUBMITTERS = 64  # past this, cross-thread candidates are not counted
DEPTH_SHARE = 0.001  # a depth counts once this share of requests were issued at it


@dataclass
class Deps:
    """A slice's requests' dependencies, in the slice's order. Where a Context
    from earlier chunks was given, its requests come first (`first` of them):
    a predecessor may be one of them, and their own figures are not this call's."""

    key: str  # "tid", "pid" or "stream": what a submitter is
    submitter: np.ndarray  # int64 label per request
    pred: np.ndarray  # index of the predecessor in the slice, -1 for none
    think_ns: np.ndarray  # issue minus the predecessor's completion (0 without one)
    covers: list[tuple[int, int]]  # (flush/FUA request, a write it waits for)
    depth: dict[int, int]  # submitter -> its most requests in flight
    # cross-thread candidates, how many chance would give and the mirror count
    # (_cross; None: too many submitters)
    cross: tuple[int, int, int] | None
    start: np.ndarray  # each request's app-side issue (times())
    end: np.ndarray  # its completion (an unseen one bounded)
    first: int = 0  # rows before this are the context's


@dataclass
class Context:
    """What a chunk's requests may depend on of the chunks before it (a trace
    planned in chunks): per submitter, the requests that completed after the
    horizon (the earliest issue a later request can have), and the latest
    completed request and write before it. A later request waits for the latest
    completion before its own issue: one of these, never an older one; and the
    older ones, started and ended before it, do not change what it had in flight."""

    rec: np.ndarray  # their records
    end: np.ndarray  # their completions (a bounded unseen one as bounded)
    ids: np.ndarray  # their ids in the plan

    @staticmethod
    def keep(parts: tuple[np.ndarray, np.ndarray], end: np.ndarray, sub: np.ndarray,
             ids: np.ndarray, horizon: int) -> Context:  # fmt: skip
        """Of the records `parts` (the context's, then the chunk's: not joined,
        a copy of the chunk less)."""
        before, rec = parts
        keep = end > horizon
        done = np.flatnonzero(~keep)
        write = np.isin(np.concatenate([before["op"], rec["op"]]), WRITES)
        for m in (np.ones(len(write), bool), write):
            rows = done[m[done]]
            if not len(rows):
                continue
            # the latest completion of each submitter among `rows`
            o = rows[np.lexsort((end[rows], sub[rows]))]
            last = np.append(sub[o][1:] != sub[o][:-1], True)
            keep[o[last]] = True
        k = np.flatnonzero(keep)
        n = len(before)
        return Context(_cat(before[k[k < n]], rec[k[k >= n] - n]), end[k], ids[k])


WRITES = [OP["write"], OP["write-zeroes"]]


def _cat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Records `a` then `b`, their dtype kept (numpy's concatenate drops padding)."""
    out = np.empty(len(a) + len(b), b.dtype)
    out[: len(a)], out[len(a) :] = a, b
    return out


def times(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(app-side issue, completion) of each request, ns in the trace's clock."""
    q = r["ts_queue_ns"].astype(np.int64)
    d = r["ts_issue_ns"].astype(np.int64)
    c = r["ts_complete_ns"].astype(np.int64)
    start = np.where(q > 0, q, np.where(d > 0, d, c))
    return start, np.maximum(c, start)


def submitter_key(r: np.ndarray) -> str:
    """What a submitter is in these records: the thread, else the process, else
    the whole stream."""
    return _key(r["tid"], r["pid"])


def _key(tid: np.ndarray, pid: np.ndarray) -> str:
    if (tid > 0).all():
        return "tid"
    if (pid > 0).all():
        return "pid"
    return "stream"


def submitters(r: np.ndarray, key: str | None = None) -> tuple[str, np.ndarray]:
    """What a submitter is in these records (`key` where a trace read in chunks
    decided it on its first), and each request's."""
    key = key or submitter_key(r)
    if key == "stream":
        return key, np.zeros(len(r), np.int64)
    return key, r[key].astype(np.int64)


def _inflight(start: np.ndarray, end: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Requests (of start/end) in flight at each issue of `at` (indexes into them)."""
    started = np.searchsorted(np.sort(start, kind="stable"), start[at], side="right")
    # stable: a merge sort, quick on completions nearly in order already
    ended = np.searchsorted(np.sort(end, kind="stable"), start[at], side="right")
    return started - ended


def depth_of(hist: np.ndarray) -> int:
    """The most requests in flight at an issue that at least DEPTH_SHARE of the
    requests (and two) saw (`hist`: issues by how many were in flight): one
    late-recorded completion (a completion the kernel never reported is stamped
    when its tag is reused) does not make a synchronous submitter asynchronous."""
    n = int(hist.sum())
    if n == 0:
        return 1
    k = min(max(2, int(np.ceil(DEPTH_SHARE * n))), n)
    # the k-th largest in-flight count
    at_least = np.cumsum(hist[::-1])[::-1]
    return max(1, int(np.flatnonzero(at_least >= k)[-1]))


def _add(hist: dict[int, np.ndarray], s: int, counts: np.ndarray) -> None:
    b = np.bincount(np.maximum(counts, 0))
    h = hist.get(s, np.zeros(0, np.int64))
    if len(b) > len(h):
        h = np.concatenate([h, np.zeros(len(b) - len(h), np.int64)])
    h[: len(b)] += b
    hist[s] = h


def latest_before(end: np.ndarray, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in `at`, the row (of `rows`, whose completions are end[rows])
    with the latest completion at or before it; -1 where none."""
    by_end = rows[np.argsort(end[rows], kind="stable")]
    k = np.searchsorted(end[by_end], at, side="right") - 1
    return np.where(k >= 0, by_end[np.maximum(k, 0)], -1)


def around(end: np.ndarray, rows: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each time in `at`, the rows (of `rows`) with the latest completion at
    or before it (latest_before) and with the earliest after it; -1 where none."""
    by_end = rows[np.argsort(end[rows], kind="stable")]
    k = np.searchsorted(end[by_end], at, side="right")
    before = np.where(k > 0, by_end[np.maximum(k - 1, 0)], -1)
    after = np.where(k < len(by_end), by_end[np.minimum(k, len(by_end) - 1)], -1)
    return before, after


def _chain(
    start: np.ndarray, end: np.ndarray, rows: np.ndarray, pred: np.ndarray, first: int
) -> None:
    """The predecessor among `rows` of each of them from `first` on (into `pred`)."""
    by_end = rows[np.argsort(end[rows], kind="stable")]
    mine = rows[rows >= first]
    ks = np.searchsorted(end[by_end], start[mine], side="right") - 1
    cand = by_end[np.maximum(ks, 0)]
    # A request that took no time ends as it starts: it is neither its own
    # predecessor nor one of a request issued at that instant before it. Those
    # few step back one by one.
    odd = (ks >= 0) & ((cand == mine) | ((start[cand] == start[mine]) & (cand > mine)))
    pred[mine] = np.where(ks >= 0, cand, -1)
    for i, k in zip(mine[odd].tolist(), ks[odd].tolist(), strict=True):
        while k >= 0 and (by_end[k] == i or (start[by_end[k]] == start[i] and by_end[k] > i)):
            k -= 1
        pred[i] = by_end[k] if k >= 0 else -1


def _covers(
    op: np.ndarray, flags: np.ndarray, start: np.ndarray, end: np.ndarray, sub: np.ndarray,
    first: int, pred: np.ndarray,
) -> list[tuple[int, int]]:  # fmt: skip
    """(flush/FUA request, a write it waits for) pairs: for each submitter (in
    label order), its latest write completed before the request's issue, where
    that is not the request's own predecessor."""
    write = np.isin(op, WRITES)
    orders = (op == OP["flush"]) | (write & ((flags & (FUA | PREFLUSH)) != 0))
    orders[:first] = False
    who = np.flatnonzero(orders)
    if not len(who):
        return []
    out_i, out_j = [], []
    for s in np.unique(sub[write]).tolist():
        rows = np.flatnonzero(write & (sub == s))
        w = latest_before(end, rows, start[who])
        ok = (w >= 0) & (w != who) & (start[np.maximum(w, 0)] <= start[who])
        ok &= w != pred[who]
        out_i.append(who[ok])
        out_j.append(w[ok])
    return list(zip(np.concatenate(out_i).tolist(), np.concatenate(out_j).tolist(), strict=True))


def _cross(
    start: np.ndarray, end: np.ndarray, sub: np.ndarray, think: np.ndarray, has: np.ndarray,
    first: int,
) -> tuple[int, int, int] | None:  # fmt: skip
    """(candidates, how many independent submitters would show by chance, mirror)
    among the requests from `first` on: a request counts where another
    submitter's completion came CROSS_NS or less before its issue and after its
    own predecessor's completion. By chance: other submitters' completions as a
    Poisson stream at their mean rate (over these requests' span). Mirror: the
    requests issued as soon BEFORE another submitter's completion (under their
    own think time), crossedges.ordered's other side: threads the host wakes
    together show as many of these as candidates, a waiting thread far fewer."""
    labels = np.unique(sub)
    if len(labels) > MAX_CROSS_SUBMITTERS:
        return None
    if len(labels) < 2:
        return 0, 0, 0
    big = np.iinfo(np.int64).max
    span = max(int(end.max() - start[first:].min(initial=int(end.max()))), 1)
    tix = np.unique(sub, return_inverse=True)[1].reshape(len(sub))
    nearest, lead = others_around(start, end, tix)
    # each submitter's others' rate, added up in the order of their labels (as
    # chance's sum has always been)
    mine = np.bincount(tix[first:], minlength=len(labels)).tolist()
    per = [sum((c / span for x, c in enumerate(mine) if x != u), 0.0) for u in range(len(labels))]
    rate = np.array(per)[tix]
    own = np.where(has, think, big)[first:]
    window = np.minimum(own, CROSS_NS).astype(float)
    chance = float((1 - np.exp(-rate[first:] * window)).sum())
    cand = (nearest[first:] <= CROSS_NS) & (nearest[first:] < own)
    mirror = (lead[first:] <= CROSS_NS) & (lead[first:] < own)
    return int(cand.sum()), round(chance), int(mirror.sum())


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


def infer(
    r: np.ndarray,
    cross: bool = True,
    ctx: Context | None = None,
    key: str | None = None,
    hist: dict[int, np.ndarray] | None = None,
) -> Deps:
    """The dependencies of records `r` (one stream's, in issue order). A trace
    read in chunks gives the chunks before as `ctx` (its requests come first in
    the result), the submitter `key` its first chunk chose, and `hist`, each
    submitter's in-flight counts so far (added to): the depth is the whole
    trace's so far."""
    first = len(ctx.rec) if ctx is not None else 0
    # the context's records and the chunk's, field by field (not joined: a copy
    # of the chunk's records less)
    parts = [ctx.rec, r] if ctx is not None and first else [r]

    def col(f: str) -> np.ndarray:
        return np.concatenate([x[f] for x in parts]) if len(parts) > 1 else r[f]

    if ctx is not None and first:
        ts = [times(x) for x in parts]
        start, end = np.concatenate([t[0] for t in ts]), np.concatenate([t[1] for t in ts])
        end[:first] = ctx.end
    else:
        start, end = times(r)
    n = len(start)
    key = key or _key(col("tid"), col("pid"))
    sub = np.zeros(n, np.int64) if key == "stream" else col(key).astype(np.int64)
    pred = np.full(n, -1, np.int64)
    hist = {} if hist is None else hist
    depth: dict[int, int] = {}
    flags = col("flags")
    unseen = (flags & UNSEEN) != 0
    # each submitter's rows (ascending), from one sort rather than a scan each
    by = np.argsort(sub, kind="stable")
    labels, heads = np.unique(sub[by], return_index=True)
    for s, rows in zip(labels.tolist(), np.split(by, heads[1:]), strict=True):
        seen = rows[~unseen[rows]]
        at = np.flatnonzero(seen >= first)
        _add(hist, int(s), _inflight(start[seen], end[seen], at))
        depth[int(s)] = depth_of(hist[int(s)])
        if depth[int(s)] == 1 and unseen[rows].any():
            _bound_unseen(start, end, rows, unseen)
        _chain(start, end, rows, pred, first)
    has = pred >= 0
    think = np.where(has, start - end[np.maximum(pred, 0)], 0)
    covers = _covers(col("op"), flags, start, end, sub, first, pred)
    cr = _cross(start, end, sub, think, has, first) if cross else None
    return Deps(key, sub, pred, np.maximum(think, 0), covers, depth, cr, start, end, first)


class Chain:
    """One slice's (or device's) inference carried from chunk to chunk of a
    trace read in time order: the context, the submitter key, the depth so far."""

    def __init__(self, cross: bool = True) -> None:
        self.cross = cross
        self.ctx: Context | None = None
        self.key: str | None = None
        self.hist: dict[int, np.ndarray] = {}

    def add(self, r: np.ndarray, ids: np.ndarray, horizon: int | None) -> Deps:
        """The dependencies of the next chunk's records `r` (numbered `ids`),
        the context's requests first (Deps.first); `horizon`: the earliest
        app-side issue (times()) a request of a later chunk can have (None: no
        chunk follows, nothing kept for one)."""
        d = infer(r, self.cross, self.ctx, self.key, self.hist)
        self.key = d.key
        if horizon is None:
            self.ctx = None
            return d
        before = r[:0]
        if self.ctx is not None and d.first:
            before = self.ctx.rec
            ids = np.concatenate([self.ctx.ids, ids])
        self.ctx = Context.keep((before, r), d.end, d.submitter, ids, horizon)
        return d


@dataclass
class Tally:
    """What `replay plan` reports of a slice's dependencies, added up chunk by
    chunk (summary())."""

    key: str = "stream"
    requests: int = 0
    with_predecessor: int = 0
    depth: dict[int, int] = field(default_factory=dict)
    flush_orderings: int = 0
    cross: tuple[int, int, int] | None = (0, 0, 0)
    think: quantiles.Spill = field(default_factory=quantiles.Spill)

    def add(self, d: Deps) -> None:
        has = d.pred[d.first :] >= 0
        self.key = d.key
        self.requests += len(has)
        self.with_predecessor += int(has.sum())
        self.depth.update(d.depth)
        self.flush_orderings += len(d.covers)
        self.think.add(d.think_ns[d.first :][has])
        c, dc = self.cross, d.cross
        self.cross = None if c is None or dc is None else (c[0] + dc[0], c[1] + dc[1], c[2] + dc[2])

    def summary(self) -> dict[str, Any]:
        """plan.json's `dependencies` entry (the think times let go)."""
        pct = {}
        if self.think.count:
            ns, _ = self.think.percentiles(THINK_PCT, lambda x: x)
            pct = {f"p{q}": round(v / 1000, 1) for q, v in zip(THINK_PCT, ns, strict=True)}
        self.think.close()
        return {
            "submitter": self.key,
            "submitters": len(self.depth),
            "requests": self.requests,
            "with_predecessor": self.with_predecessor,
            "depth": max(self.depth.values(), default=1),
            "think_us": pct,
            "flush_orderings": self.flush_orderings,
            "cross_candidates": self.cross[0] if self.cross else None,
            "cross_by_chance": self.cross[1] if self.cross else None,
            "cross_mirror": self.cross[2] if self.cross else None,
        }


THINK_PCT = (10, 50, 90, 99)


class OtherStreams:
    """Per stream, the requests whose submitter's latest completion before them
    (on the same device, any stream) was of another stream: a plan chains each
    stream apart, so these wait for their own stream's previous completion
    instead. Added up chunk by chunk (each device's chain carried)."""

    def __init__(self, stream_name: Callable[[int], str]) -> None:
        self.name = stream_name
        self.chains: dict[int, Chain] = {}
        self.counts: dict[str, int] = {}

    def add(self, r: np.ndarray, horizon: int | None) -> None:
        for dev in np.unique(r["dev"]).tolist():
            rows = np.flatnonzero(r["dev"] == dev)
            chain = self.chains.setdefault(dev, Chain(cross=False))
            ctx = chain.ctx.rec["stream"] if chain.ctx is not None else r["stream"][:0]
            # one device's records: not copied where they are all of them
            mine = r if len(rows) == len(r) else r[rows]
            d = chain.add(mine, np.zeros(len(rows), np.int64), horizon)
            sid = np.concatenate([ctx, mine["stream"]])
            has = d.pred >= 0
            other = has & (sid[np.maximum(d.pred, 0)] != sid)
            other[: d.first] = False
            for s, n in zip(*np.unique(sid[other], return_counts=True), strict=True):
                name = self.name(int(s))
                self.counts[name] = self.counts.get(name, 0) + int(n)


def other_stream_predecessors(r: np.ndarray, stream_name: Callable[[int], str]) -> dict[str, int]:
    """OtherStreams of records `r` held whole."""
    o = OtherStreams(stream_name)
    o.add(r, 0)
    return o.counts


def summary(d: Deps) -> dict[str, Any]:
    """What `replay plan` reports of one slice's dependencies, inferred whole."""
    t = Tally()
    t.add(d)
    return t.summary()
