"""`iotape replay plan`: a trace -> a directory of fio job files a person can read.

Layout of JOBDIR:
  replay.fio      the jobs, one fio process, a header saying what was done and why
  replay.wNNNN.fio  a long exact trace: the jobs of window N, one fio process each
                  (replay.fio is window 0), all on one clock (iolog.py)
  iologs/*.log    exact mode: one iolog (v3, microseconds; v2 for lanes) per stream,
                  target and copy
  anchor.fio      fio's own plain replay of the same requests (one iolog, read_iolog
  anchor.log      defaults), the yardstick that `iotape replay fidelity` compares against
  plan.json       what `iotape replay run` needs: targets, jobs, expected duration

The planner is one pipeline over a source of requests (sources.py): the whole
trace, or time-ordered chunks of it where it is too large to hold. Options
checked and the targets mapped (steps.py), the mode, exact layout and scaling
chosen (Frame), the trace's view grouped by database, device, stream and
submitter and its targets probed and laid out (Laid); then every chunk is
grouped, sliced, scaled, remapped and made into jobs (exact.py, synthetic.py)
and handed to a sink (sinks.py) that holds and arranges them, or deals them to
lanes and appends their logs; the job files (jobfile.py), plan.json (manifest)
and JOBDIR (write.py) follow. model.py says what a Plan holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from base.errors import IotapeError
from replayer.plan import (
    dependent,
    exact,
    fitloc,
    jobfile,
    lanes,
    mapping,
    scale,
    sinks,
    sources,
    steps,
    timing_options,
    write,
)
from replayer.plan.model import HostAddress, Job, Manifest, Plan, PlanResult
from replayer.plan.options import PlanOptions, choose_mode
from replayer.plan.source import Source
from replayer.plan.steps import PLACEHOLDER
from replayer.plan.targetmap import Owner
from schemas.documents.plan import MappingEntry
from schemas.formats import REPLAY_PLAN

PLAN_FORMAT, PLAN_VERSION = REPLAY_PLAN.id, REPLAY_PLAN.version
MAX_WINDOWS = 120
# What a remap keeps, measured from the trace and the plan's mapping: the command
# hands replayer/run/predict.py's `predict` in (the planner stands below run/).
Predict = Callable[[Path, MappingEntry], dict[str, Any]]

__all__ = ["PLACEHOLDER", "PLAN_FORMAT", "PLAN_VERSION", "PlanOptions", "build", "plan"]


@dataclass
class Frame:
    """What every chunk of a trace is planned against: the options (--layout
    resolved), the mode and why, the scaling, --target paths and --host."""

    opts: PlanOptions
    mode: str
    mode_reason: str | None
    scaling: scale.Scaling | None
    paths: dict[str, str]
    hosts: dict[str, HostAddress]

    @property
    def storage(self) -> scale.Layout:
        return self.scaling.layout if self.scaling else scale.Layout(1, 1)


@dataclass
class Laid:
    """The trace's view grouped, and its targets laid out."""

    groups: list[steps.Group]
    users: dict[str, list[Owner]]
    targets: steps.TargetLayout


def _frame(opts: PlanOptions, inp: sources.Input) -> Frame:
    sc = steps.scaling(opts, inp.view)
    paths, hostmap = steps.mapping(opts)
    n = inp.requests
    mode, why = choose_mode(opts, n, exact.plans_lanes(opts, n, bool(hostmap)))
    layout = ""
    if mode == "exact":
        chunked = isinstance(inp, sources.Chunked)
        layout = "lanes" if chunked else exact.resolve_layout(opts, n, bool(hostmap))
    opts = dataclasses.replace(opts, layout=layout or opts.layout)
    return Frame(opts, mode, why, sc, paths, hostmap)


def _lay_out(fr: Frame, inp: sources.Input) -> Laid:
    groups, users = steps.groups(inp.view, fr.paths, fr.storage)
    touched = inp.touched() if fr.opts.remap == "compact" else None
    return Laid(groups, users, steps.layout(inp.view, groups, users, fr.opts, touched))


def _open(opts: PlanOptions) -> tuple[sources.Input, Frame]:
    """The trace (whole, or in chunks where it is large and the plan exact lanes)
    and what its chunks are planned against."""
    steps.check(opts)
    inp = sources.open_input(opts)
    fr = _frame(opts, inp)
    if isinstance(inp, sources.Chunked) and fr.mode != "exact":
        inp = sources.whole(opts)  # auto chose synthetic mode: planned whole
        fr = _frame(opts, inp)
    return inp, fr


def _jobs(
    fr: Frame, lay: steps.TargetLayout, src: Source, groups: list[steps.Group], window_ns: int,
    models: dict[str, fitloc.Model],
) -> list[Job]:  # fmt: skip
    """A chunk's jobs: its groups sliced, scaled and remapped, timed exactly or
    fitted per window (each slice's locality model into `models`)."""
    jobs: list[Job] = []
    for g in groups:
        for j, s in steps.slices(src, g, fr.scaling, lay, fr.opts):
            if fr.mode == "exact":
                jobs += exact.slice_jobs(s, src.timing, fr.opts)
                continue
            seed = steps.seed(steps.who(g.owner), g.dev, g.sname, j)
            models[s.name], more = steps.synthetic_jobs(s, window_ns, seed, fr.opts)
            jobs += more
    return jobs


def _run(inp: sources.Input, fr: Frame, laid: Laid, sink: sinks.Sink) -> Plan:
    """Every chunk of `inp` planned into `sink`: the plan."""
    view = inp.view
    window_ns = int(max(fr.opts.window_s, view.duration_ns / 1e9 / MAX_WINDOWS) * 1e9)
    models: dict[str, fitloc.Model] = {}
    for src in inp.chunks():
        # The whole trace is its own view: grouped once.
        groups = laid.groups if src is view else steps.groups(src, fr.paths, fr.storage)[0]
        sink.add(_jobs(fr, laid.targets, src, groups, window_ns, models))
    a = sink.finish()
    return Plan(
        opts=fr.opts,
        src=view,
        requests=inp.requests,
        mode=fr.mode,
        mode_reason=fr.mode_reason,
        jobs=a.jobs,
        windows=a.windows,
        start_us=a.start_us,
        per_segment=a.per_segment,
        scaling=fr.scaling,
        probed=laid.targets.probed,
        spans=laid.targets.spans,
        window_ns=window_ns,
        models=models,
        hosts=fr.hosts,
        layout=a.layout,
        reach=a.reach,
        mapping=mapping.record(laid.groups, laid.targets, fr.scaling, fr.opts.remap),
    )


def _collected(inp: sources.Input, fr: Frame) -> Plan:
    """The plan held in memory (its groups let go once it is made)."""
    laid = _lay_out(fr, inp)
    return _run(inp, fr, laid, sinks.Collected(fr.opts, fr.mode, bool(fr.hosts)))


def _chunked(inp: sources.Chunked, fr: Frame, predict: Predict | None) -> PlanResult:
    """JOBDIR written as the trace is read: its logs appended chunk by chunk."""
    laid = _lay_out(fr, inp)
    with write.staged(_jobdir(fr.opts), fr.opts.force) as tmp:
        sink = sinks.LaneLogs(tmp, sorted({g.path for g in laid.groups}), fr.opts.lane_io)
        return _result(_run(inp, fr, laid, sink), tmp, logs=False, predict=predict)


def build(opts: PlanOptions) -> Plan:
    """Everything the plan will write, computed in memory from the whole trace."""
    steps.check(opts)
    inp = sources.whole(opts)
    return _collected(inp, _frame(opts, inp))


def manifest(p: Plan) -> Manifest:
    """plan.json: what `replay run` needs (targets, jobs, expected duration)."""
    tw: dict[str, bool] = {}
    for j in p.jobs:
        tw[j.target] = tw.get(j.target, False) or j.writes
    reach = p.reach
    opts = p.opts
    fields: dict[str, Any] = {
        "trace": str(Path(opts.trace).resolve()),
        "mode": p.mode,
        "mode_reason": p.mode_reason,
        "jobfile": "replay.fio",
        "anchor": "anchor.fio" if any(j.entries is not None for j in p.jobs) else None,
        "duration_s": p.src.duration_ns / 1e9 * opts.time_scale + p.windows[0].start_us / 1e6,
        "time_scale": opts.time_scale,
        "requests_per_job": p.per_segment or None,
        "remap": opts.remap,
        "scaling": p.scaling.as_dict() if p.scaling else None,
        "targets": [
            {
                "path": path,
                "kind": t.kind,
                "writes": tw.get(path, False),
                "block_size": t.block,
                "size": t.size,
                "create_bytes": t.create,
                "reach_bytes": reach.get(path, 0),
            }
            for path, t in sorted(p.probed.items())
        ],
        "windows": [
            {"jobfile": w.jobfile, "launch_us": w.launch_us, "jobs": len(w.jobs)} for w in p.windows
        ]
        if len(p.windows) > 1
        else None,
        "jobs": [_job_entry(j, p.scaling) for j in p.jobs],
    }
    if p.scaling is not None and p.scaling.grouped:
        fields["layout"] = _layout_entry(p.scaling.layout)
    if p.layout == "lanes":
        fields["exact_layout"] = "lanes"
        assert p.start_us is not None  # exact: the logs' zero
        fields["start_us"] = p.start_us
        fields["lanes_start_us"] = lanes.lanes_start_us(p.jobs, p.start_us)
    if p.mapping is not None:
        fields["mapping"] = p.mapping
    return Manifest.model_validate(fields)


def _job_entry(j: Job, sc: scale.Scaling | None) -> dict[str, Any]:
    """A job in plan.json: its storage group too where groups are in play."""
    db = j.owner.number if j.owner.kind == "db" else None
    out: dict[str, Any] = {
        "name": j.name,
        "target": j.target,
        "stream": j.stream,
        "db": db,
        "requests": j.requests,
    }
    if sc is not None and sc.grouped:
        out["group"] = j.owner.number if db is None else sc.layout.group_of(db)
    return out


def _layout_entry(lay: scale.Layout) -> dict[str, Any]:
    """plan.json's "layout", where storage groups are in play (otherwise one log
    per database, and plan.json what it was before groups existed)."""
    groups = [{"group": g, "databases": lay.members(g)} for g in range(lay.storage_groups)]
    return {"databases": lay.databases, "storage_groups": lay.storage_groups, "groups": groups}


def _jobdir(opts: PlanOptions) -> Path:
    if opts.jobdir is None:
        raise IotapeError("no job directory: give -o JOBDIR")
    return Path(opts.jobdir)


def _result(
    p: Plan, tmp: Path | None, logs: bool = True, predict: Predict | None = None
) -> PlanResult:
    """The manifest with "jobfile_text" added; JOBDIR's contents into `tmp` (unless
    None). With `predict`, a plan that moves offsets says what its remap keeps."""
    texts = {w.jobfile: jobfile.jobfile_text(p, w) for w in p.windows}
    text = "".join(
        (f"\n; ---- {name} ----\n" if k else "") + t for k, (name, t) in enumerate(texts.items())
    )
    man = manifest(p)
    if predict is not None and man.mapping is not None and man.mapping.mode != "fit":
        man.prediction = predict(Path(p.opts.trace), man.mapping)
    if tmp is not None:
        write.contents(tmp, _jobdir(p.opts), p, man, texts, logs)
    return {**man.data(), "jobfile_text": text}


def plan(opts: PlanOptions, predict: Predict | None = None) -> PlanResult:
    """Plan and, unless dry_run, write JOBDIR whole (or nothing). Returns the
    manifest, with "jobfile_text" added. A trace read in chunks is planned into
    JOBDIR's logs as it is read; a whole one in memory, then written. A dependent
    or afap plan (--timing) is dependent.py's. `predict`: see Predict."""
    timing_options.check(opts)
    if opts.timing != "recorded":
        return dependent.plan(opts)
    inp, fr = _open(opts)
    if isinstance(inp, sources.Chunked):
        return _chunked(inp, fr, predict)
    p = _collected(inp, fr)
    if opts.dry_run:
        return _result(p, None, predict=predict)
    with write.staged(_jobdir(opts), opts.force) as tmp:
        return _result(p, tmp, predict=predict)
