"""Closed-loop plans: `replay plan --timing dependent|afap` (docs/replay.md).

The trace is grouped, scaled and remapped into slices exactly as a recorded plan's
(steps.py); each slice's dependencies are inferred (deps.py) and every submitter
of it becomes a job of `iodepth` = its recorded depth, whose log says what each
request waits for (replayer/src/deps.c reads it):

    iotape dependent log 1
    open PATH
    ID AFTER THINK ACTION OFFSET LENGTH [or AFTER THINK] [join IDS | same-turn]

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
writer's write that may go in the write before it once IDS have completed;
`same-turn`: the second write of a log writer's turn, which goes in the same write
as the turn's first only where that one went in the write before it (group commit,
`--group-commit join`: groupcommit.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from base.errors import IotapeError
from replayer.plan import (
    demand,
    depcross,
    depjobfile,
    deps,
    fromtarget,
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
from replayer.plan.depcross import LONG, WAKE, Edges
from replayer.plan.model import Manifest, PlanResult, Slice
from replayer.plan.options import PlanOptions
from replayer.plan.source import OP, lane_action_codes, request_times

if TYPE_CHECKING:
    from replayer.plan import deplines

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
    # its lines from the target's recording (fromtarget.py): a timer, a clock
    lines: fromtarget.JobClock | None = None
    cpu: str = ""  # its `cpu US` line (cpucycle.py), or none


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

    def add(self, job: DepJob, count: int, data: bytes | memoryview = b"") -> None:
        """`count` more lines of `job` (`data`: them, deplines.lines')."""
        first = not job.requests
        if first:
            self.jobs.append(job)
        job.requests += count
        if self.dir is None:
            return
        with open(self.dir / f"{job.name}.log", "ab") as f:
            if first:
                iolog.check_filename(job.target)
                f.write(f"{HEADER}\nopen {job.target}\n".encode())
                if job.lines is not None:  # fromtarget.py: a log writer's timer
                    f.write(job.lines.head().encode())
                f.write(job.cpu.encode())
            f.write(data)

    def close(self, reach: dict[str, int]) -> None:
        """Each job's last lines (fromtarget.py: a clock), `reach` each target's
        furthest byte."""
        for job in self.jobs:
            tail = job.lines.tail(reach.get(job.target, 0)) if job.lines else ""
            if tail and self.dir is not None:
                with open(self.dir / f"{job.name}.log", "a") as f:
                    f.write(tail)


def _slice_jobs(
    s: Slice, st: SliceState, d: deps.Deps, ids: np.ndarray, before: np.ndarray,
    cross: Edges, opts: PlanOptions, logs: Logs, thinks: dict[int, demand.Replaced],
    split: schedsplit.SchedSplit | None = None, cal: thinkcal.Calibration | None = None,
    joined: dict[int, str] | None = None, tgt: fromtarget.FromTarget | None = None,
) -> None:  # fmt: skip
    """A chunk's part of a slice into its submitters' jobs: its requests numbered
    `ids` (the plan's issue order), waiting for their predecessors (`d`, whose
    first rows are the context's, numbered `before`) and, in `cross`, for another
    thread's request (Edges) and, in `thinks`, the long thinks replaced on demand
    (row -> (the think before, the think now, anchored at a demand wake)):
    demand.py. `split`: each think less its run-queue wait (--run-queue net:
    schedsplit.py); `cal`: short thinks at the target's CPU (--think-calibrate:
    thinkcal.py); `joined`: group commit's clauses (groupcommit.py); `tgt`: the I/O
    the application makes by its clock on the target (fromtarget.py)."""
    # pyarrow only where a dependent plan is made: build.py, which every plan
    # imports, imports this module (~35 MiB and 0.1 s a recorded plan would pay)
    from replayer.plan import deplines

    r = s.records
    k = d.first
    every = np.concatenate([before, ids])
    pred = d.pred[k:]
    # a thread on its own clock on the target (clockjobs.py) waits for nothing: its
    # requests go at their recorded times, as a clocked thread's (crossedges.clocked)
    free = tgt.clocked_rows(s.name, s.stream, d.submitter[k:], r) if tgt else np.zeros(len(r), bool)
    has = np.flatnonzero((pred >= 0) & ~free)
    ci, cj = (np.array(d.covers, np.int64).reshape(-1, 2).T if d.covers
              else (np.empty(0, np.int64),) * 2)  # fmt: skip
    ok = (every[cj] < every[ci]) & ~free[ci - k]
    x = (cross.j >= 0) & ~free[cross.rows]
    # in the log's order: its predecessor, the writes it covers, another thread's request
    waits = deplines.Waits.of(len(r), [has, ci[ok] - k, cross.rows[x]],
                              [every[pred[has]], every[cj[ok]], cross.j[x]])  # fmt: skip
    think_ns = d.think_ns[k:].copy()
    # The other thread's completion came after the request's own predecessor's:
    # the think time counts from it, the latest of what the request waits for.
    think_ns[cross.rows] = cross.gap
    st.cross_edges += int(x.sum())
    st.long_think_edges += int((cross.kind == LONG).sum())
    st.wake_edges += int((cross.kind == WAKE).sum())
    st.demand_thinks += len(thinks)
    st.demand_woken += sum(w for _, _, w, _ in thinks.values())
    st.demand_was_ns += sum(a for a, _, _, _ in thinks.values())
    st.demand_now_ns += sum(b for _, b, _, _ in thinks.values())
    rq = split.run_queue_ns(r) if split is not None else None
    rel = waits.count() > 0
    if rq is not None:
        think_ns = st.rq.net(think_ns, rq, rel)
    f = np.ones(len(r))
    if cal is not None:
        think_ns, f = thinkcal.scale_slice(cal, st.cal, s.stream, r, d.submitter[k:], think_ns, rel)
    think = np.round(think_ns * opts.think_scale * opts.time_scale / 1000).astype(np.int64)
    at = np.round(s.t_ns * opts.time_scale / 1000).astype(np.int64) + START_US
    extra = _extra(thinks, waits, cross, d.think_ns[k:], rq, f, at, opts, joined or {})
    extra = {i: v for i, v in extra.items() if not free[i]}  # a clock's: at its time alone
    st.joins += sum(v.startswith(" join ") for v in (joined or {}).values())
    flush = r["op"] == OP["flush"]
    names, acts = lane_action_codes(r)
    cols = deplines.Columns(ids, waits, think, at, opts.timing == "afap", acts, names,
                            np.where(flush, 0, s.offset + s.base), np.where(flush, 0, s.nbytes),
                            extra)  # fmt: skip
    _deal(s, st, d, cols, logs, tgt)


def _extra(
    thinks: dict[int, demand.Replaced], waits: deplines.Waits, cross: Edges, own_ns: np.ndarray,
    rq: np.ndarray | None, f: np.ndarray, at: np.ndarray, opts: PlanOptions,
    joined: dict[int, str],
) -> dict[int, str]:  # fmt: skip
    """Row -> what follows its line's fields: the recorded plan's way beside a
    demand's (`or AFTER THINK`: demand.or_ways) and group commit's `join IDS` or
    `same-turn`."""
    out: dict[int, str] = {}
    if thinks:
        # what a row waits for without another thread's request (the last, where it has one)
        other = dict(zip(cross.rows.tolist(), (cross.j >= 0).tolist(), strict=True))
        base = {}
        for i, x in thinks.items():
            if x[3] is not None:
                w = waits.of_row(i)
                base[i] = w[:-1] if other.get(i) else w
        for i, how in demand.or_ways(thinks, base, own_ns, rq, f, at, opts).items():
            out[i] = f" or {how}"
    for i, how in joined.items():
        out[i] = out.get(i, "") + how
    return out


def _deal(s: Slice, st: SliceState, d: deps.Deps, cols: deplines.Columns, logs: Logs,
          tgt: fromtarget.FromTarget | None = None) -> None:  # fmt: skip
    """The lines of a chunk's part of a slice to its submitters' jobs, each
    job's in issue order (a new job's lines from the target decided by `tgt`)."""
    r = s.records
    start, _ = deps.times(r)
    order = np.lexsort((np.arange(len(r)), start))
    sub = d.submitter[d.first :]
    order = order[np.argsort(sub[order], kind="stable")]
    who = sub[order]
    heads = np.flatnonzero(np.r_[True, who[1:] != who[:-1]]) if len(who) else np.zeros(0, int)
    cuts = np.r_[heads, len(order)]
    writes = np.isin(r["op"], steps.WRITE_OPS)
    jobs = []
    for g, w in enumerate(who[heads].tolist()):
        job = st.jobs.get(w)
        if job is None:
            suffix = f".{d.key[0]}{w}" if d.key != "stream" else ""
            db = s.owner.number if s.owner.kind == "db" else None
            job = st.jobs[w] = DepJob(s.name + suffix, s.target, s.stream, db, False)
            if tgt is not None:
                row = order[cuts[g]]
                comm = bytes(r["comm"][row]).decode(errors="replace")
                job.lines = tgt.job(s.name, s.stream, w, comm, int(cols.offset[row]))
            if (a := st.cal.get(w)) is not None and a.cycle is not None:
                job.cpu = a.cycle.line()
        job.writes = job.writes or bool(writes[order[cuts[g] : cuts[g + 1]]].any())
        jobs.append(job)
    if logs.dir is None:  # a dry run: only counted
        for g, job in enumerate(jobs):
            logs.add(job, int(cuts[g + 1] - cuts[g]))
        return
    from replayer.plan import deplines  # as in _slice_jobs

    deplines.write_groups(cols, order, cuts, lambda g, n, data: logs.add(jobs[g], n, data))


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
    name: str, st: SliceState, other: int, opts: PlanOptions, wakes: bool, sched: bool, cal: bool,
    tgt: fromtarget.FromTarget | None = None,
) -> dict[str, Any]:  # fmt: skip
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
        **(tgt.summary(name) if tgt is not None else {}),
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
    cal, tgt = None, None
    if opts.think_calibrate:  # both traces' heads read once, for both
        path, trace = str(opts.think_calibrate), str(opts.trace)
        there, mine = thinkcal.head(path, "--think-calibrate"), thinkcal.head(trace, "trace")
        spend = opts.cycle_cpu == "target"
        cal = thinkcal.Calibration.read(path, trace, there, mine, spend, sched)
        tgt = fromtarget.FromTarget.read(opts, wakes, there, mine)
        del there, mine
    logs = Logs(tmp / "iologs" if tmp is not None else None)
    state: dict[str, SliceState] = {}
    reach: dict[str, int] = {}
    gc = groupcommit.State()
    n = 0
    for src in inp.chunks():
        horizon = int(request_times(src.records).max(initial=0)) - queue_ns
        # a trace held whole is its one chunk: no later one needs a context (but
        # a slice's name that comes twice in it chains on)
        last = isinstance(inp, sources.Whole)
        lost.add(src.records, None if last else horizon)
        gs = groups if src is view else steps.groups(src, paths, storage)[0]
        slices = [s for g in gs for _, s in steps.slices(src, g, sc, lay, opts)]
        ids = _ids(slices, n)
        n += sum(len(s.records) for s in slices)
        sts, ds, befores = _infer(slices, ids, state, horizon, last)
        numbers = [st.number for st in sts]
        everys = [np.concatenate([b, i]) for b, i in zip(befores, ids, strict=True)]
        cross, thinks, joined = depcross.cross(
            slices, numbers, ds, ids, len(src.records), wakes, opts, gc, everys, sched
        )
        for k in range(len(slices)):
            _slice_jobs(slices[k], sts[k], ds[k], ids[k], befores[k], cross[k], opts, logs,
                        thinks[k], split, cal, joined[k], tgt)  # fmt: skip
        _reach(reach, slices)
        # what this chunk held goes before the next is read, not at once with it
        del src, gs, slices, ids, ds, befores, everys, cross, thinks, joined
    summaries = [
        _summary(name, st, lost.counts.get(st.stream, 0), opts, wakes is not None,
                 split is not None, cal is not None, tgt)
        for name, st in state.items()
    ]  # fmt: skip
    if cal is not None:
        cal.check()
    logs.close(reach)
    moved = mapping.record(groups, lay, sc, opts.remap)
    return _finish(opts, view.duration_ns, sc, lay, logs.jobs, summaries, reach, tmp, moved)


def _reach(reach: dict[str, int], slices: list[Slice]) -> None:
    """Each target's furthest byte so far (into `reach`)."""
    for s in slices:
        reach[s.target] = max(reach.get(s.target, 0), int((s.offset + s.base + s.nbytes).max(
            initial=0)))  # fmt: skip


def _infer(
    slices: list[Slice], ids: list[np.ndarray], state: dict[str, SliceState], horizon: int,
    last: bool,
) -> tuple[list[SliceState], list[deps.Deps], list[np.ndarray]]:  # fmt: skip
    """Each slice's dependencies in a chunk (its state, first seen, made), and the
    ids of its context's requests. `last`: no chunk follows (a trace held whole),
    no context kept for one, but for a name that comes twice in the chunk."""
    twice = {k for k, v in Counter(s.name for s in slices).items() if v > 1}
    sts, ds, befores = [], [], []
    for s, sid in zip(slices, ids, strict=True):
        st = state.get(s.name)
        if st is None:
            st = state[s.name] = SliceState(s.stream, len(state), deps.Chain(), deps.Tally())
        befores.append(st.chain.ctx.ids if st.chain.ctx is not None else sid[:0])
        d = st.chain.add(s.records, sid, None if last and s.name not in twice else horizon)
        st.tally.add(d)
        sts.append(st)
        ds.append(d)
    return sts, ds, befores


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
