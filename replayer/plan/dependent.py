"""Closed-loop plans: `replay plan --timing dependent|afap` (docs/replay.md).

The trace is grouped, scaled and remapped into slices exactly as a recorded plan's
(steps.py); each slice's dependencies are inferred (deps.py) and every submitter
of it becomes a job of `iodepth` = its recorded depth, whose log says what each
request waits for (replayer/src/deps.c reads it):

    iotape dependent log 1
    open PATH
    ID AFTER THINK ACTION OFFSET LENGTH [or AFTER THINK] [join IDS]

ID numbers the plan's requests in their issue order over every slice, so that
what a request waits for (issued before it) has a smaller id; AFTER the ids it
waits for (its predecessor; for a flush or FUA write the writes it covers; another
thread's request where the trace shows the thread waits for it: from its wake
records, wakeedges.wake_edges, else crossedges.cross_edges, in a plan without
copies; - for none); THINK the microseconds after the latest of them
completed (think time, less its run-queue wait with --run-queue net: schedsplit.py,
a short one x its role's factor with --think-calibrate: thinkcal.py, x --think-scale
x --time-scale; 0 with afap), or @US, the
request's recorded time (x --time-scale) after the start where it has no
predecessor (afap: @0). `or AFTER THINK`: a second way, the earlier of the two
taken: a long think on demand whose demand edge takes the place of the anchor
the recorded plan had (demand.py) keeps that plan's way beside it, so that a
demand the replay brings later than that anchor never makes the request later
than `--long-thinks recorded` would. fio 3.33 cannot wait for a completion:
these plans run with iotape-lanes only (plan.json "runner"). `join IDS`: a log
writer's write that may go in the write before it once IDS have completed
(group commit, `--group-commit join`: groupcommit.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from base.errors import IotapeError
from replayer.plan import (
    crossedges,
    demand,
    depjobfile,
    deps,
    groupcommit,
    iolog,
    mapping,
    scale,
    schedsplit,
    sources,
    steps,
    thinkcal,
    wakeedges,
    write,
)
from replayer.plan.model import Manifest, PlanResult, Slice
from replayer.plan.options import PlanOptions
from replayer.plan.source import OP, lane_actions, request_times

HEADER = "iotape dependent log 1"
RUNNER = "iotape-lanes"
START_US = 200_000  # the trace's 0, this long after iotape-lanes starts


@dataclass
class DepJob:
    name: str
    target: str
    stream: str
    db: int | None
    writes: bool
    depth: int = 1  # known once every chunk is in
    requests: int = 0


@dataclass
class SliceState:
    """A slice's inference carried from chunk to chunk, and its jobs by submitter."""

    stream: str
    number: int  # the slice's, in the order slices first came (cross_edges' "stream")
    chain: deps.Chain
    tally: deps.Tally
    jobs: dict[int, DepJob] = field(default_factory=dict)
    cross_edges: int = 0
    long_think_edges: int = 0  # of them, a long think's (crossedges._long_think)
    wake_edges: int = 0  # of them, from the trace's wake records (wakeedges.py)
    # long thinks replayed on demand (demand.py): how many, of them anchored at a
    # demand wake, and the think time they had and have (ns)
    demand_thinks: int = 0
    demand_woken: int = 0
    demand_was_ns: int = 0
    demand_now_ns: int = 0
    rq: schedsplit.Tally = field(default_factory=schedsplit.Tally)  # --run-queue net
    cal: dict[int, thinkcal.Applied] = field(default_factory=dict)  # --think-calibrate
    joins: int = 0  # writes marked for group commit (groupcommit.py)


class Logs:
    """The jobs' logs under JOBDIR/iologs (being made), appended chunk by chunk;
    only counted for a dry run (`dir` None)."""

    def __init__(self, dir: Path | None) -> None:
        self.dir = dir
        self.jobs: list[DepJob] = []  # in the order they first came

    def add(self, job: DepJob, lines: list[str]) -> None:
        if not job.requests:
            self.jobs.append(job)
        job.requests += len(lines)
        if self.dir is None:
            return
        path = self.dir / f"{job.name}.log"
        with open(path, "a") as f:
            if job.requests == len(lines):
                iolog.check_filename(job.target)
                f.write(f"{HEADER}\nopen {job.target}\n")
            f.writelines(lines)


Edge = tuple[int, int, str]  # (the id it waits for or -1, think after it ns, kind)
# _cross's: each slice's cross-thread edges, long thinks on demand, group commit's clauses
Crossed = tuple[list[dict[int, Edge]], list[dict[int, "demand.Replaced"]], list[dict[int, str]]]
# where a cross-thread edge came from; OWN: none (the request's own think replaced)
WAKE, LONG, EVIDENCE, DEMAND, OWN = "wake", "long", "evidence", "demand", "own"


def _slice_jobs(
    s: Slice, st: SliceState, d: deps.Deps, ids: np.ndarray, before: np.ndarray,
    cross: dict[int, Edge], opts: PlanOptions, logs: Logs, thinks: dict[int, demand.Replaced],
    split: schedsplit.SchedSplit | None = None, cal: thinkcal.Calibration | None = None,
    joined: dict[int, str] | None = None,
) -> None:  # fmt: skip
    """A chunk's part of a slice into its submitters' jobs: its requests numbered
    `ids` (the plan's issue order), waiting for their predecessors (`d`, whose
    first rows are the context's, numbered `before`) and, in `cross`, for another
    thread's request (row -> (its id, the gap after its completion in ns, where
    the edge came from: WAKE, LONG, EVIDENCE, DEMAND or OWN; its id -1 where the
    request waits for nothing more than before, its think time replaced) and,
    in `thinks`, the long thinks replaced on demand (row -> (the think before,
    the think now, anchored at a demand wake)): demand.py. `split`: each think less
    its run-queue wait (--run-queue net: schedsplit.py); `cal`: short thinks at
    the target's CPU (--think-calibrate: thinkcal.py); `joined`: group commit's
    clauses (groupcommit.py)."""
    r = s.records
    start, _ = deps.times(r)
    order = np.lexsort((np.arange(len(r)), start))
    k = d.first
    every = np.concatenate([before, ids])
    after: list[list[int]] = [[int(every[p])] if p >= 0 else [] for p in d.pred[k:].tolist()]
    for i, j in d.covers:
        if every[j] < every[i]:
            after[i - k].append(int(every[j]))
    # where the recorded plan's way goes beside a demand's: what it waits for
    # without another thread's request
    base = {i: list(after[i]) for i, x in thinks.items() if x[3] is not None}
    think_ns = d.think_ns[k:].copy()
    for i, (j_id, gap, _) in cross.items():
        # The other thread's completion came after the request's own predecessor's:
        # the think time counts from it, the latest of what the request waits for.
        if j_id >= 0:
            after[i].append(j_id)
        think_ns[i] = gap
    st.cross_edges += sum(j >= 0 for j, _, _ in cross.values())
    st.demand_thinks += len(thinks)
    st.demand_woken += sum(w for _, _, w, _ in thinks.values())
    st.demand_was_ns += sum(a for a, _, _, _ in thinks.values())
    st.demand_now_ns += sum(b for _, b, _, _ in thinks.values())
    st.long_think_edges += sum(k == LONG for _, _, k in cross.values())
    st.wake_edges += sum(k == WAKE for _, _, k in cross.values())
    rq = split.run_queue_ns(r) if split is not None else None
    rel = np.array([bool(a) for a in after], bool)
    if rq is not None:
        think_ns = st.rq.net(think_ns, rq, rel)
    f = np.ones(len(r))
    if cal is not None:
        think_ns, f = thinkcal.scale_slice(cal, st.cal, s.stream, r, d.submitter[k:], think_ns, rel)
    afap = opts.timing == "afap"
    think = np.round(think_ns * opts.think_scale * opts.time_scale / 1000).astype(np.int64)
    at = np.round(s.t_ns * opts.time_scale / 1000).astype(np.int64) + START_US
    flush = r["op"] == OP["flush"]
    off = np.where(flush, 0, s.offset + s.base)
    nbytes = np.where(flush, 0, s.nbytes)
    acts = lane_actions(r)
    sub = d.submitter[k:]
    # Python's own ints and strings from here: a numpy scalar a field is slow.
    ids_l = ids.tolist()
    wait_l = [",".join(map(str, a)) if a else "" for a in after]
    time_l = (
        ["0" if a else "@0" for a in after]
        if afap
        else [str(t) if a else f"@{u}" for a, t, u in zip(after, think.tolist(), at.tolist(),
                                                          strict=True)]
    )  # fmt: skip
    tail_l = [f"{a} {o} {b}" for a, o, b in zip(acts.tolist(), off.tolist(), nbytes.tolist(),
                                                 strict=True)]  # fmt: skip
    for i, how in demand.or_ways(thinks, base, d.think_ns[k:], rq, f, at, opts).items():
        tail_l[i] += f" or {how}"
    for i, how in (joined or {}).items():
        tail_l[i] += how
    st.joins += len(joined or {})
    for who in np.unique(sub).tolist():
        job = st.jobs.get(who)
        if job is None:
            suffix = f".{d.key[0]}{who}" if d.key != "stream" else ""
            db = s.owner.number if s.owner.kind == "db" else None
            job = st.jobs[who] = DepJob(s.name + suffix, s.target, s.stream, db, False)
        rows = order[sub[order] == who]
        job.writes = job.writes or bool(np.isin(r["op"][rows], steps.WRITE_OPS).any())
        lines = [f"{ids_l[i]} {wait_l[i] or '-'} {time_l[i]} {tail_l[i]}\n" for i in rows.tolist()]
        logs.add(job, lines)


def _ids(slices: list[Slice], first_id: int) -> list[np.ndarray]:
    """Each slice's request ids from `first_id`: the plan's issue order over every
    slice (so that whatever a request waits for, issued before it, has a smaller
    id, which is what iotape-lanes checks)."""
    starts = [deps.times(s.records)[0] for s in slices]
    n = sum(len(x) for x in starts)
    if not n:
        return [np.empty(0, np.int64) for _ in slices]
    start = np.concatenate(starts)
    which = np.concatenate([np.full(len(x), k) for k, x in enumerate(starts)])
    row = np.concatenate([np.arange(len(x)) for x in starts])
    gid = np.empty(n, np.int64)
    gid[np.lexsort((row, which, start))] = first_id + np.arange(n)
    cuts = np.cumsum([0, *(len(x) for x in starts)])
    return [gid[cuts[k] : cuts[k + 1]] for k in range(len(slices))]


def _cross(
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
    cross: list[dict[int, Edge]] = [{} for _ in slices]
    thinks: list[dict[int, demand.Replaced]] = [{} for _ in slices]
    joined: list[dict[int, str]] = [{} for _ in slices]
    recs = [s.records for s in slices]
    n = sum(len(r) for r in recs)
    if not n or n != traced or not all((r["tid"] > 0).all() for r in recs):
        return cross, thinks, joined
    start = np.concatenate([deps.times(r)[0] for r in recs])
    end = np.concatenate([deps.times(r)[1] for r in recs])
    big = np.iinfo(np.int64).max
    own = np.concatenate([np.where(d.pred[d.first :] >= 0, d.think_ns[d.first :], big) for d in ds])
    thread = np.concatenate([r["tid"].astype(np.int64) for r in recs])
    which = np.concatenate([np.full(len(r), k) for k, r in enumerate(recs)])
    stream = np.asarray(numbers)[which]
    row = np.concatenate([np.arange(len(r)) for r in recs])
    gid = np.concatenate(ids)
    edge_j = np.full(n, -1, np.int64)
    edge_gap = np.zeros(n, np.int64)
    kind = np.full(n, OWN, dtype=object)
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
        # its sched records tell a timer's rest from CPU time (demand.py)
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
    for i in np.flatnonzero(edge_j != -1).tolist():
        j = int(edge_j[i])
        cross[int(which[i])][int(row[i])] = (int(gid[j]) if j >= 0 else -1, int(edge_gap[i]),
                                             str(kind[i]))  # fmt: skip
    if opts.timing == "dependent" and opts.group_commit == "join":
        pred = np.concatenate([np.where(d.pred[d.first :] >= 0, e[np.maximum(d.pred[d.first :], 0)],
                                        -1) for d, e in zip(ds, everys, strict=True)])  # fmt: skip
        for i, how in groupcommit.joins(gc, recs, start, thread, gid, pred, edge_j).items():
            joined[int(which[i])][int(row[i])] = how
    return cross, thinks, joined


def _demand_summary(st: SliceState, opts: PlanOptions) -> dict[str, Any]:
    """plan.json's word on a slice's long thinks replayed on demand (demand.py)."""
    if opts.timing != "dependent":
        return {}
    return {
        "long_thinks": opts.long_thinks,
        "demand_thinks": st.demand_thinks,
        "demand_woken": st.demand_woken,
        "demand_think_s": [round(st.demand_was_ns / 1e9, 4), round(st.demand_now_ns / 1e9, 4)],
    }


def _summary(
    name: str, st: SliceState, other: int, opts: PlanOptions, wakes: bool, sched: bool, cal: bool
) -> dict[str, Any]:
    """plan.json's `dependencies` entry of a stream (its jobs' depths set first)."""
    for who, job in st.jobs.items():
        job.depth = deps.depth_of(st.chain.hist.get(who, np.zeros(0, np.int64)))
    return {
        "stream": name,
        **st.tally.summary(),
        "cross_edges": st.cross_edges,
        "long_think_edges": st.long_think_edges,
        "wake_edges": st.wake_edges,
        "wakes_recorded": wakes,
        **_demand_summary(st, opts),
        **_group_commit_summary(st, opts),
        **(st.rq.summary(opts.run_queue, sched) if opts.timing == "dependent" else {}),
        "other_stream_predecessors": other,
        **({"think_calibration": [a.summary() for a in st.cal.values()]} if cal else {}),
    }


def _group_commit_summary(st: SliceState, opts: PlanOptions) -> dict[str, Any]:
    if opts.timing != "dependent":
        return {}
    return {"group_commit": opts.group_commit, "group_commit_writes": st.joins}


def plan(opts: PlanOptions) -> PlanResult:
    """A dependent (or afap) plan; JOBDIR written unless dry_run. A large trace
    is read in time-ordered chunks (sources.py), each slice's inference carried
    from one to the next (deps.Chain), its jobs' logs appended as they come."""
    steps.check(opts)
    inp = sources.open_input(opts)
    if opts.dry_run:
        return _plan(opts, inp, None)
    if opts.jobdir is None:
        raise IotapeError("no job directory: give -o JOBDIR")
    with write.staged(Path(opts.jobdir), opts.force) as tmp:
        (tmp / "iologs").mkdir()
        (tmp / "results").mkdir()
        return _plan(opts, inp, tmp)


def _plan(opts: PlanOptions, inp: sources.Input, tmp: Path | None) -> PlanResult:
    view = inp.view
    sc = steps.scaling(opts, view)
    paths, _ = steps.mapping(opts)
    storage = sc.layout if sc else scale.Layout(1, 1)
    groups, users = steps.groups(view, paths, storage)
    lay = steps.layout(view, groups, users, opts)
    # The furthest a request's app-side issue comes before its issue: how far
    # before a chunk's last issue the next chunk's requests may start.
    queue_ns = inp.scan.queue_ns if isinstance(inp, sources.Chunked) else 0
    lost = deps.OtherStreams(view.stream_name)
    wakes = wakeedges.read_wakes(str(opts.trace))
    net = opts.timing == "dependent" and opts.run_queue == "net"
    on_demand = opts.timing == "dependent" and opts.long_thinks == "demand"
    # demand.py tells a timer's rest by the sched records, whatever --run-queue says
    sched = schedsplit.read_split(str(opts.trace)) if net or on_demand else None
    split = sched if net else None
    cal = thinkcal.Calibration.read(str(opts.think_calibrate), str(opts.trace)) if (
        opts.think_calibrate) else None  # fmt: skip
    logs = Logs(tmp / "iologs" if tmp is not None else None)
    state: dict[str, SliceState] = {}
    reach: dict[str, int] = {}
    gc = groupcommit.State()
    n = 0
    for src in inp.chunks():
        horizon = int(request_times(src.records).max(initial=0)) - queue_ns
        lost.add(src.records, horizon)
        gs = groups if src is view else steps.groups(src, paths, storage)[0]
        slices = [s for g in gs for _, s in steps.slices(src, g, sc, lay, opts)]
        ids = _ids(slices, n)
        n += sum(len(s.records) for s in slices)
        sts, ds, befores = [], [], []
        for s, sid in zip(slices, ids, strict=True):
            st = state.get(s.name)
            if st is None:
                st = state[s.name] = SliceState(s.stream, len(state), deps.Chain(), deps.Tally())
            befores.append(st.chain.ctx.ids if st.chain.ctx is not None else sid[:0])
            d = st.chain.add(s.records, sid, horizon)
            st.tally.add(d)
            sts.append(st)
            ds.append(d)
        numbers = [st.number for st in sts]
        everys = [np.concatenate([b, i]) for b, i in zip(befores, ids, strict=True)]
        cross, thinks, joined = _cross(
            slices, numbers, ds, ids, len(src.records), wakes, opts, gc, everys, sched
        )
        for k, s in enumerate(slices):
            _slice_jobs(
                s,
                sts[k],
                ds[k],
                ids[k],
                befores[k],
                cross[k],
                opts,
                logs,
                thinks[k],
                split,
                cal,
                joined[k],
            )
            end = int((s.offset + s.base + s.nbytes).max(initial=0))
            reach[s.target] = max(reach.get(s.target, 0), end)
    summaries = [
        _summary(name, st, lost.counts.get(st.stream, 0), opts, wakes is not None,
                 split is not None, cal is not None)
        for name, st in state.items()
    ]  # fmt: skip
    if cal is not None:
        cal.check()
    moved = mapping.record(groups, lay, sc, opts.remap)
    return _finish(opts, view.duration_ns, sc, lay, logs.jobs, summaries, reach, tmp, moved)


def _finish(
    opts: PlanOptions,
    duration_ns: int,
    sc: scale.Scaling | None,
    lay: steps.TargetLayout,
    jobs: list[DepJob],
    summaries: list[dict],
    reach: dict[str, int],
    tmp: Path | None,
    moved: dict[str, Any] | None = None,
) -> PlanResult:
    fields: dict[str, Any] = {
        "trace": str(Path(opts.trace).resolve()),
        "mode": "exact",
        "mode_reason": None,
        "jobfile": "replay.fio",
        "anchor": None,
        "duration_s": duration_ns / 1e9 * opts.time_scale + START_US / 1e6,
        "time_scale": opts.time_scale,
        "requests_per_job": None,
        "remap": opts.remap,
        "scaling": sc.as_dict() if sc else None,
        "targets": steps.target_entries(lay, {j.target for j in jobs if j.writes}, reach),
        "windows": None,
        "jobs": [
            {k: getattr(j, k) for k in ("name", "target", "stream", "db", "requests")} for j in jobs
        ],
        "timing": opts.timing,
        "think_scale": opts.think_scale,
        "runner": RUNNER,
        "dependencies": summaries,
    }
    if opts.think_calibrate is not None:
        fields["think_calibration"] = str(opts.think_calibrate)
    if moved is not None:
        fields["mapping"] = moved  # where each request went: fidelity pairs through it
    man = Manifest.model_validate(fields)
    text = depjobfile.jobfile(opts, jobs, summaries)
    if tmp is not None:
        (tmp / "replay.fio").write_text(text)
        man.write(tmp / "plan.json")
    return {**man.data(), "jobfile_text": text}
