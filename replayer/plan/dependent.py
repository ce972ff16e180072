"""Closed-loop plans: `replay plan --timing dependent|afap` (docs/replay.md).

The trace is grouped, scaled and remapped into slices exactly as a recorded plan's
(steps.py); each slice's dependencies are inferred (deps.py) and every submitter
of it becomes a job of `iodepth` = its recorded depth, whose log says what each
request waits for (replayer/src/deps.c reads it):

    iotape dependent log 1
    open PATH
    ID AFTER THINK ACTION OFFSET LENGTH

ID numbers the plan's requests (a slice's in issue order, slice after slice);
AFTER the ids it waits for (its predecessor, and for a flush or FUA write the
writes it covers; - for none); THINK the microseconds after the latest of them
completed (think time x --think-scale x --time-scale; 0 with afap), or @US, the
request's recorded time (x --time-scale) after the start where it has no
predecessor (afap: @0). fio 3.33 cannot wait for a completion: these plans run
with iotape-lanes only (plan.json "runner").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from base.errors import IotapeError
from replayer.plan import deps, iolog, mapping, scale, sources, steps, write
from replayer.plan.model import Manifest, PlanResult, Slice
from replayer.plan.options import PlanOptions
from replayer.plan.source import FUA, OP, PREFLUSH

TIMINGS = ("recorded", "dependent", "afap")
HEADER = "iotape dependent log 1"
RUNNER = "iotape-lanes"
START_US = 200_000  # the trace's 0, this long after iotape-lanes starts


@dataclass
class DepJob:
    name: str
    target: str
    stream: str
    db: int | None
    depth: int
    writes: bool
    lines: list[str] = field(default_factory=list)


def check(opts: PlanOptions) -> None:
    if opts.timing not in TIMINGS:
        raise IotapeError(f"--timing {opts.timing}: not {', '.join(TIMINGS)}")
    if not (opts.think_scale >= 0):
        raise IotapeError(f"--think-scale {opts.think_scale}: must be 0 or more")
    if opts.timing == "recorded":
        if opts.think_scale != 1.0:
            raise IotapeError("--think-scale: only with --timing dependent")
        return
    if opts.mode == "synthetic":
        raise IotapeError(f"--timing {opts.timing}: an exact plan only (not --mode synthetic)")
    if opts.hosts:
        raise IotapeError(f"--timing {opts.timing}: one host only (iotape-lanes runs it)")
    if opts.layout != "auto":
        raise IotapeError(f"--timing {opts.timing}: its layout is a job per submitter")


def _actions(r: np.ndarray) -> np.ndarray:
    op, flags = r["op"], r["flags"]
    names = np.full(len(r), "write", dtype=object)
    names[op == OP["read"]] = "read"
    names[op == OP["flush"]] = "sync"
    names[op == OP["discard"]] = "trim"
    w = names == "write"
    fua, pre = w & ((flags & FUA) != 0), w & ((flags & PREFLUSH) != 0)
    names[fua & ~pre] = "write+fua"
    names[pre & ~fua] = "write+preflush"
    names[pre & fua] = "write+preflush+fua"
    return names


def _slice_jobs(s: Slice, first_id: int, opts: PlanOptions) -> tuple[list[DepJob], dict]:
    """A slice's jobs, one per submitter, its requests numbered from `first_id`."""
    r = s.records
    d = deps.infer(r)
    start, _ = deps.times(r)
    order = np.lexsort((np.arange(len(r)), start))
    rank = np.empty(len(r), np.int64)
    rank[order] = np.arange(len(r))
    ids = first_id + rank
    after: list[list[int]] = [[int(ids[p])] if p >= 0 else [] for p in d.pred.tolist()]
    for i, j in d.covers:
        if rank[j] < rank[i]:
            after[i].append(int(ids[j]))
    afap = opts.timing == "afap"
    think = np.round(d.think_ns * opts.think_scale * opts.time_scale / 1000).astype(np.int64)
    at = np.round(s.t_ns * opts.time_scale / 1000).astype(np.int64) + START_US
    flush = r["op"] == OP["flush"]
    off = np.where(flush, 0, s.offset + s.base)
    nbytes = np.where(flush, 0, s.nbytes)
    acts = _actions(r)
    jobs = []
    for sub in np.unique(d.submitter).tolist():
        rows = order[d.submitter[order] == sub]
        suffix = f".{d.key[0]}{sub}" if d.key != "stream" else ""
        db = s.owner.number if s.owner.kind == "db" else None
        writes = bool(np.isin(r["op"][rows], steps.WRITE_OPS).any())
        job = DepJob(s.name + suffix, s.target, s.stream, db, d.depth[sub], writes)
        for i in rows.tolist():
            a = ",".join(map(str, after[i])) or "-"
            t = ("0" if afap else str(think[i])) if after[i] else ("@0" if afap else f"@{at[i]}")
            job.lines.append(f"{ids[i]} {a} {t} {acts[i]} {off[i]} {nbytes[i]}\n")
        jobs.append(job)
    return jobs, {"stream": s.name, **deps.summary(d)}


def _jobfile(opts: PlanOptions, jobs: list[DepJob], summaries: list[dict]) -> str:
    what = {
        "dependent": "each request when the requests it waits for have completed, plus its"
        f" think time x {opts.think_scale:g}",
        "afap": "each request as soon as the requests it waits for have completed (no think time)",
    }[opts.timing]
    out = [
        f"; iotape replay plan of {opts.trace}: timing {opts.timing} (closed loop):\n",
        f";   {what}, at each submitter's recorded depth (iodepth threads).\n",
        "; Run with iotape-lanes only (`iotape replay run`): fio 3.33 cannot wait for a\n",
        "; completion. Each log says what every request waits for (replayer/plan/dependent.py).\n",
        ";\n; per stream: requests with a predecessor, depth, think time p50 (us)\n",
    ]
    for d in summaries:
        out.append(
            f";   {d['stream']}: {d['with_predecessor']}/{d['requests']} by {d['submitter']},"
            f" depth {d['depth']}, think p50 {d['think_us'].get('p50', '-')}\n"
        )
    out += ["\n[global]\n", "ioengine=psync\n", "direct=1\n", "thread=1\n"]
    for j in jobs:
        out.append(f"\n; {j.stream}: {len(j.lines)} requests\n[{j.name}]\n")
        out += [f"read_iolog=iologs/{j.name}.log\n", f"iodepth={j.depth}\n"]
    return "".join(out)


def _targets(lay: steps.TargetLayout, jobs: list[DepJob], reach: dict[str, int]) -> list[dict]:
    tw: dict[str, bool] = {}
    for j in jobs:
        tw[j.target] = tw.get(j.target, False) or j.writes
    return [
        {
            "path": path,
            "kind": t.kind,
            "writes": tw.get(path, False),
            "block_size": t.block,
            "size": t.size,
            "create_bytes": t.create,
            "reach_bytes": reach.get(path, 0),
        }
        for path, t in sorted(lay.probed.items())
    ]


def plan(opts: PlanOptions) -> PlanResult:
    """A dependent (or afap) plan of the whole trace; JOBDIR written unless dry_run."""
    steps.check(opts)
    view = sources.whole(opts).view
    sc = steps.scaling(opts, view)
    paths, _ = steps.mapping(opts)
    groups, users = steps.groups(view, paths, sc.layout if sc else scale.Layout(1, 1))
    lay = steps.layout(view, groups, users, opts)
    lost = deps.other_stream_predecessors(view.records, view.stream_name)
    jobs: list[DepJob] = []
    summaries: list[dict] = []
    reach: dict[str, int] = {}
    n = 0
    for g in groups:
        for _, s in steps.slices(view, g, sc, lay, opts):
            more, summ = _slice_jobs(s, n, opts)
            n += len(s.records)
            jobs += more
            summaries.append({**summ, "other_stream_predecessors": lost.get(s.stream, 0)})
            end = int((s.offset + s.base + s.nbytes).max(initial=0))
            reach[s.target] = max(reach.get(s.target, 0), end)
    moved = mapping.record(groups, lay, sc, opts.remap)
    return _finish(opts, view.duration_ns, sc, lay, jobs, summaries, reach, moved)


def _finish(
    opts: PlanOptions,
    duration_ns: int,
    sc: scale.Scaling | None,
    lay: steps.TargetLayout,
    jobs: list[DepJob],
    summaries: list[dict],
    reach: dict[str, int],
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
        "targets": _targets(lay, jobs, reach),
        "windows": None,
        "jobs": [
            {
                "name": j.name,
                "target": j.target,
                "stream": j.stream,
                "db": j.db,
                "requests": len(j.lines),
            }
            for j in jobs
        ],
        "timing": opts.timing,
        "think_scale": opts.think_scale,
        "runner": RUNNER,
        "dependencies": summaries,
    }
    if moved is not None:
        fields["mapping"] = moved  # where each request went: fidelity pairs through it
    man = Manifest.model_validate(fields)
    text = _jobfile(opts, jobs, summaries)
    if not opts.dry_run:
        if opts.jobdir is None:
            raise IotapeError("no job directory: give -o JOBDIR")
        with write.staged(Path(opts.jobdir), opts.force) as tmp:
            (tmp / "iologs").mkdir()
            (tmp / "results").mkdir()
            for j in jobs:
                iolog.check_filename(j.target)
                with open(tmp / "iologs" / f"{j.name}.log", "w") as f:
                    f.write(f"{HEADER}\nopen {j.target}\n")
                    f.writelines(j.lines)
            (tmp / "replay.fio").write_text(text)
            man.write(tmp / "plan.json")
    return {**man.data(), "jobfile_text": text}
