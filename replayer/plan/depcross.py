"""A dependent plan's cross-thread edges among a chunk's requests, slice by
slice (dependent.py): from the trace's wake records (wakeedges.py), else
inferred (crossedges.py); long thinks on demand (demand.py) and group
commit's joins (groupcommit.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replayer.plan import crossedges, demand, deps, groupcommit, schedsplit, wakeedges
from replayer.plan.model import Slice
from replayer.plan.options import PlanOptions

# where a cross-thread edge came from (Edges.kind's codes); OWN: none (the
# request's own think replaced)
WAKE, LONG, EVIDENCE, DEMAND, OWN = range(5)


@dataclass
class Edges:
    """A chunk's cross-thread edges of one slice: its row `rows` waits also for
    the request of id `j` (-1: for nothing more than before, its think time
    replaced), `gap` ns after its completion; `kind`: where the edge came from."""

    rows: np.ndarray
    j: np.ndarray
    gap: np.ndarray
    kind: np.ndarray

    @staticmethod
    def none() -> Edges:
        e = np.empty(0, np.int64)
        return Edges(e, e, e, np.empty(0, np.int8))


# _cross's: each slice's cross-thread edges, long thinks on demand, group commit's clauses
Crossed = tuple[list[Edges], list[dict[int, "demand.Replaced"]], list[dict[int, str]]]


def cross(
    slices: list[Slice], numbers: list[int], ds: list[deps.Deps], ids: list[np.ndarray],
    traced: int, wakes: wakeedges.Wakes | None, opts: PlanOptions, gc: groupcommit.State,
    everys: list[np.ndarray], split: schedsplit.SchedSplit | None = None,
) -> Crossed:  # fmt: skip
    """Each slice's cross-thread edges among a chunk's requests: from the trace's
    wake records where it has them (wakeedges.wake_edges), else inferred
    (crossedges.cross_edges); only where each request of the chunk is in one slice
    (no copies: a copy's threads are the original's) and the trace has threads. A
    trace read in chunks finds no edge to a request of an earlier chunk (a few at
    each seam). Then, with `--long-thinks demand` (a dependent plan), the long
    thinks replayed on demand (demand.py): each slice's `thinks`; with
    `--group-commit join`, the writes that may join the write before them
    (groupcommit.py; `everys`: each slice's ids, its context's first): `joined`."""
    cross = [Edges.none() for _ in slices]
    thinks: list[dict[int, demand.Replaced]] = [{} for _ in slices]
    joined: list[dict[int, str]] = [{} for _ in slices]
    recs = [s.records for s in slices]
    n = sum(len(r) for r in recs)
    if not n or n != traced or not all((r["tid"] > 0).all() for r in recs):
        return cross, thinks, joined
    ts = [deps.times(r) for r in recs]
    start, end = np.concatenate([t[0] for t in ts]), np.concatenate([t[1] for t in ts])
    del ts
    big = np.iinfo(np.int64).max
    own = np.concatenate([np.where(d.pred[d.first :] >= 0, d.think_ns[d.first :], big) for d in ds])
    thread = np.concatenate([r["tid"].astype(np.int64) for r in recs])
    which = np.concatenate([np.full(len(r), k) for k, r in enumerate(recs)])
    stream = np.asarray(numbers)[which]
    row = np.concatenate([np.arange(len(r)) for r in recs])
    gid = np.concatenate(ids)
    edge_j = np.full(n, -1, np.int64)
    edge_gap = np.zeros(n, np.int64)
    kind = np.full(n, OWN, np.int8)
    c = crossedges.cross_edges(start, end, thread, stream, own)
    edge_j[c.i], edge_gap[c.i] = c.j, c.gap_ns
    kind[c.i] = np.where(c.long_think, LONG, EVIDENCE)
    if wakes is not None:
        # exact where the trace says who woke the thread: in place of an inferred edge
        w = wakeedges.wake_edges(start, end, thread, own, wakes)
        # a thread on its own clock sets no other's pace (crossedges.clocked)
        mine = crossedges.clocked(start, thread)
        k = ~mine[w.i] & ~mine[w.j]
        edge_j[w.i[k]], edge_gap[w.i[k]], kind[w.i[k]] = w.j[k], w.gap_ns[k], WAKE
    if opts.timing == "dependent" and opts.long_thinks == "demand" and wakes is not None:
        # only with wake records: without, a wait a wake ended and one a timer
        # ended look alike (demand.py)
        # its sched records (`split`) tell a timer's rest from CPU time (demand.py)
        runs = np.concatenate([split.runs_of(r) for r in recs]) if split is not None else None
        dm = demand.demand_thinks(start, end, thread, own, edge_j, edge_gap, wakes, runs)
        got = (dm.i, dm.j, dm.think_ns, dm.was_ns, dm.woken)
        for i, j, t, was, woken in zip(*(x.tolist() for x in got), strict=True):
            e = int(edge_j[i])
            bound = (int(gid[e]) if e >= 0 else -1, int(edge_gap[i])) if j not in (-1, e) else None
            thinks[int(which[i])][int(row[i])] = (int(was), int(t), bool(woken), bound)
            if j >= 0:
                edge_j[i], kind[i] = j, DEMAND
            edge_gap[i] = t
            if edge_j[i] < 0:
                edge_j[i] = -2  # no edge: its own think replaced
    sel = np.flatnonzero(edge_j != -1)
    j = edge_j[sel]
    jid = np.where(j >= 0, gid[np.maximum(j, 0)], -1)
    at = which[sel]
    for k in np.unique(at).tolist():
        m = at == k
        cross[k] = Edges(row[sel[m]], jid[m], edge_gap[sel[m]], kind[sel[m]])
    if opts.timing == "dependent" and opts.group_commit == "join":
        pred = np.concatenate([np.where(d.pred[d.first :] >= 0, e[np.maximum(d.pred[d.first :], 0)],
                                        -1) for d, e in zip(ds, everys, strict=True)])  # fmt: skip
        for i, how in groupcommit.joins(gc, recs, start, thread, gid, pred, edge_j, own).items():
            joined[int(which[i])][int(row[i])] = how
    return cross, thinks, joined
