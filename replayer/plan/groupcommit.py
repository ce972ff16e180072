"""Group commit in a dependent plan (issue 34): which log writes a faster device
would have written together, for iotape-lanes to decide at run time.

A log writer (ESE's, a database's WAL writer) writes at each turn whatever the
sessions appended since its last write; commits that come while a write is in
flight share the next one. A faster device sees more commits a turn: fewer,
larger log writes (the reference workload: 0.27 a transactional request on the
HDD-like device, 0.20 on the SSD-like one). A replay of the slow device's trace
that issues each recorded write after its recorded wait keeps its count, and the
sessions waiting for those writes (durable commits) keep its pace.

So a write gets `join IDS` (replayer/src/groupcommit.c) where:
- its thread is one other threads wait for (a cross-thread edge into one of its
  requests: the log writer, whose write wakes the committing sessions);
- its thread's writes have had more than one size so far: a log writer's carry
  what was appended (4, 8, 12 KiB, ...); a writer of fixed blocks (the log
  file's pre-formatter, 256 KiB at a time, which the log writer waits for; a
  sequential writer) writes the same whatever the others do;
- it is a plain write, and the thread's request before it is a plain write of
  the same device that it follows on (starts inside it or where it ends: the log's
  next bytes, or its last, partly filled sector again);
- other threads' requests wait for it (its committers), each after a request
  of its own thread: IDS are those predecessors, the committers' last I/O
  before they committed.
When the replay's write before it goes and IDS have completed, its committers
have committed: the writer takes their records at once, in one write. A
committer that waited for the write before (held by the writer) has not, so a
write stays apart from the one its committers waited for, as on any device.
A write nobody waits for (a lazy commit's timer, a filling buffer) keeps its
own time.

A turn of two writes. Where a commit waits, the engine's log writer writes a
turn's full segments, then the partial segment in a write of its own, right
where the first ends (ESE 15's 4 KiB segments, the engine's `--log-partial
rewrite`), on any device: the second is not a write a faster device would have
grouped into the first, and taking it there made fewer log writes than the
engine makes (an SSD-like trace replayed onto the HDD-like device: 305 of 798
taken, where the engine on that device groups almost no durable commits). Such
a second write (it starts where its thread's write before ends, no other
thread's request before it, a think under the runner's spin line) is marked
` same-turn`, and its committers' clause goes on the turn's first write instead
(where that one follows on a write of the turn before): the runner takes the
whole turn into the write before it, or none of it. And a turn's second write
takes nothing: a turn writes what was appended before it began, so a commit
made while its first write is in flight goes in the next turn.

What is found in one chunk only (sources.py reads a large trace in chunks): a
write whose predecessor or whose committers are in another chunk has no clause
(a few at each seam).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from replayer.plan import thinkcal
from replayer.plan.source import ACTIONS, lane_action_codes

MODES = ("join", "recorded")

# a thread's last request of the chunks so far: (issue ns, plain write, device,
# offset, end offset)
Last = tuple[int, bool, int, int, int]


@dataclass
class State:
    """What one chunk leaves the next: each thread's last request and the
    threads other threads wait for."""

    last: dict[int, Last] = field(default_factory=dict)
    awaited: set[int] = field(default_factory=set)
    size: dict[int, int] = field(default_factory=dict)  # a thread's first write's bytes
    varied: set[int] = field(default_factory=set)  # threads whose writes had two sizes
    joins: int = 0  # clauses written


def _plain_writes(recs: list[np.ndarray]) -> np.ndarray:
    """Writes without FUA or a preflush (an ordering point stays where it was)."""
    return np.concatenate([lane_action_codes(x)[1] == ACTIONS.index("write") for x in recs])


def _varied(
    st: State, by: np.ndarray, t_by: np.ndarray, heads: np.ndarray, plain: np.ndarray,
    size: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """For each request in `by` order (each thread's in issue order, `heads` where a
    thread's start): whether its thread's plain writes had two sizes by then (st.size,
    st.varied carried from chunk to chunk, and updated)."""
    n = len(by)
    grp = np.cumsum(np.r_[False, t_by[1:] != t_by[:-1]]) if n else np.zeros(0, np.int64)
    firsts = np.full(len(heads), -1, np.int64)  # each thread's first plain write's bytes
    for g, h in enumerate(heads.tolist()):
        t = int(t_by[h])
        if t in st.size:
            firsts[g] = st.size[t]
    pw = np.flatnonzero(plain)
    if len(pw):
        g_pw = grp[pw]
        new = firsts[g_pw] < 0
        _, at = np.unique(g_pw[new], return_index=True)
        firsts[g_pw[new][at]] = size[pw[new][at]]
    differs = plain & (firsts[grp] >= 0) & (size != firsts[grp])
    seen = np.cumsum(differs)  # within each thread: any so far
    base = seen[heads] - differs[heads]
    threads = t_by[heads].tolist()
    was = np.array([t in st.varied for t in threads], bool)
    varied = ((seen - base[grp]) > 0) | was[grp]
    for t, f in zip(threads, firsts.tolist(), strict=True):
        if f >= 0:
            st.size.setdefault(t, f)
    now = np.logical_or.reduceat(varied, heads) if n else np.zeros(0, bool)
    st.varied.update(t for t, v in zip(threads, now.tolist(), strict=True) if v)
    return varied


def _follows(prev: Last | None, dev: int, off: int) -> bool:
    """Whether a write of `dev` at `off` follows on its thread's previous request
    `prev`, a plain write of the same device: starts inside it or where it ends."""
    return prev is not None and prev[1] and prev[2] == dev and prev[3] <= off <= prev[4]


def _same_turn(prev: Last | None, off: int, edge: int, own: int) -> bool:
    """Whether a write is its writer's second of one turn: it starts where the
    write before ends (not on that write's partial segment again, as a new turn
    does), and nothing but that write's completion and a short think came before
    it (no other thread's wake, no timer): the log writer writes a turn's full
    segments, then the partial one, as two writes on any device."""
    return prev is not None and off == prev[4] and edge < 0 and own <= thinkcal.LINE_NS


def joins(
    st: State, recs: list[np.ndarray], start: np.ndarray, thread: np.ndarray, gid: np.ndarray,
    pred: np.ndarray, edge_j: np.ndarray, own: np.ndarray,
) -> dict[int, str]:  # fmt: skip
    """The chunk's clauses: row of the concatenated `recs` -> " join IDS" (ids:
    `gid`) or " same-turn"; `pred`: each row's own predecessor's id (-1: none);
    `edge_j`: each row's cross-thread edge (the row it waits for, else negative);
    `own`: each row's think after its own predecessor."""
    n = len(start)
    if not n:
        return {}
    waits = np.flatnonzero(edge_j >= 0)
    st.awaited.update(np.unique(thread[edge_j[waits]]).tolist())
    plain = _plain_writes(recs)
    dev = np.concatenate([x["dev"] for x in recs]).astype(np.int64)
    off = np.concatenate([x["offset"] for x in recs]).astype(np.int64)
    size = np.concatenate([x["bytes"] for x in recs]).astype(np.int64)
    stop = off + size
    # each awaited write's row (sorted) and the rows waiting for it: waiting[at[x]:at[x + 1]]
    o = np.argsort(edge_j[waits], kind="stable")
    waiting = waits[o]
    awaited, at = np.unique(edge_j[waiting], return_index=True)
    at = np.r_[at, len(waiting)]
    by = np.lexsort((start, thread))  # each thread's requests in issue order
    t_by = thread[by]
    first = np.r_[True, t_by[1:] != t_by[:-1]] if n else np.zeros(0, bool)
    heads, tails = np.flatnonzero(first), np.r_[np.flatnonzero(first)[1:] - 1, n - 1]
    varied = _varied(st, by, t_by, heads, plain[by], size[by])
    pos = np.empty(n, np.int64)
    pos[by] = np.arange(n)
    out: dict[int, str] = {}
    held = np.fromiter(st.awaited, np.int64, len(st.awaited))
    may = plain[awaited] & varied[pos[awaited]] & np.isin(thread[awaited], held)

    def before(k: int) -> Last | None:  # the request before `by[k]` in its thread
        if first[k]:
            return st.last.get(int(t_by[k]))
        p_ = int(by[k - 1])
        return (0, bool(plain[p_]), int(dev[p_]), int(off[p_]), int(stop[p_]))

    committers: dict[int, set[int]] = {}  # a turn's first write -> the ids its clause holds
    for x in np.flatnonzero(may).tolist():  # the few awaited plain writes: Python from here
        i = int(awaited[x])
        k = int(pos[i])
        prev = before(k)
        if not _follows(prev, int(dev[i]), int(off[i])):
            continue
        ids = np.unique(pred[waiting[at[x] : at[x + 1]]]).tolist()
        head = i
        if _same_turn(prev, int(off[i]), int(edge_j[i]), int(own[i])):
            # The turn's last write: the committers' records go with its first one,
            # where that one follows on a write of the turn before (in this chunk).
            if first[k] or not _follows(before(k - 1), int(dev[i]), int(off[by[k - 1]])):
                continue
            out[i], head = " same-turn", int(by[k - 1])
        if ids[0] >= 0 and ids[-1] < gid[head]:
            committers.setdefault(head, set()).update(ids)
        else:
            out.pop(i, None)
    for head, got in committers.items():  # a turn's first write awaited too: both its lists
        out[head] = f" join {','.join(map(str, sorted(got)))}"
    for h, e in zip(heads.tolist(), tails.tolist(), strict=True):  # what the next chunk needs
        r = int(by[e])
        st.last[int(t_by[h])] = (int(start[r]), bool(plain[r]), int(dev[r]), int(off[r]),
                                 int(stop[r]))  # fmt: skip
    st.joins += len(committers)
    return out
