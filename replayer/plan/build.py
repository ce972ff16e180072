"""`iotape replay plan`: a trace -> a directory of fio job files a person can read.

Layout of JOBDIR:
  replay.fio      the jobs, one fio process, a header saying what was done and why
  replay.wNNNN.fio  a long exact trace: the jobs of window N, one fio process each
                  (replay.fio is window 0), all on one clock (iolog.py)
  iologs/*.log    exact mode: one iolog (v3, microseconds) per stream, target and copy
  anchor.fio      fio's own plain replay of the same requests (one iolog, read_iolog
  anchor.log      defaults), the yardstick that `iotape replay fidelity` compares against
  plan.json       what `iotape replay run` needs: targets, jobs, expected duration

This module checks the options, groups the trace's requests by database (a
storage group's log by group), device and stream, probes the targets and makes
the jobs (model.py says what a Plan holds); scale.py scales each stream and lays
the databases out in storage groups, exact.py times exact jobs, jobfile.py
writes the text, write.py JOBDIR.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from base.errors import IotapeError
from devices import safety, targets
from replayer.hosts import spec as hosts
from replayer.plan import exact, fitloc, iolog, jobfile, remap, scale, synthetic, targetmap, write
from replayer.plan.model import HostAddress, Job, Manifest, Plan, PlanResult, Slice, Window
from replayer.plan.options import PlanOptions, choose_mode
from replayer.plan.source import OP, Source, load
from replayer.plan.targetmap import Owner
from schemas.formats import REPLAY_PLAN

MODES = ("exact", "synthetic", "auto")
PLAN_FORMAT, PLAN_VERSION = REPLAY_PLAN.id, REPLAY_PLAN.version
MAX_WINDOWS = 120
MAX_SUBMITTERS = 64
WRITE_OPS = [OP["write"], OP["write-zeroes"], OP["discard"], OP["flush"]]
PLACEHOLDER = "/dev/TARGET"

__all__ = ["PLACEHOLDER", "PLAN_FORMAT", "PLAN_VERSION", "PlanOptions", "build", "plan"]


class _Group(NamedTuple):
    """The requests of one stream (and submitter) on one device, for one database
    (or one storage group's log)."""

    owner: Owner
    dev: int
    dname: str
    sname: str
    idx: np.ndarray
    path: str
    suffix: str


@dataclass
class _Layout:
    """Where each device's requests go: the end of each source device's reach, the
    targets as probed, and each (target, owner)'s (base, size)."""

    dev_end: dict[int, int]
    probed: dict[str, targetmap.Target]
    spans: dict[tuple[str, Owner], tuple[int, int]]
    single_dev: bool


def _check(opts: PlanOptions) -> None:
    if opts.mode not in MODES:
        raise IotapeError(f"--mode {opts.mode}: unknown; one of {', '.join(MODES)}")
    if not (opts.time_scale > 0):
        raise IotapeError(f"--time-scale {opts.time_scale}: must be positive")
    if opts.locality not in fitloc.KINDS:
        raise IotapeError(f"--locality {opts.locality}: unknown; one of {', '.join(fitloc.KINDS)}")
    if opts.remap not in remap.MODES:
        raise IotapeError(f"--remap {opts.remap}: unknown; one of {', '.join(remap.MODES)}")


def _submitters(r: np.ndarray, stream: str) -> list[tuple[np.ndarray, str]]:
    """Unlabelled I/O split by submitting thread: each thread issued its own
    requests concurrently with the others, and one iolog would serialise them."""
    # By process, not thread: an io_uring worker thread that ran a process's fsync
    # belongs with that process's writes.
    pids = np.unique(r["pid"])
    if stream != "other" or len(pids) < 2 or len(pids) > MAX_SUBMITTERS:
        return [(np.arange(len(r)), "")]
    return [(np.flatnonzero(r["pid"] == p), f".p{int(p)}") for p in pids.tolist()]


def _target(path: str, writes: bool, opts: PlanOptions) -> targetmap.Target:
    """Check what `path` is, and that it is safe to write, before opening it: a
    device is refused for what it is (the root disk, mounted, in use), not for
    whatever opening it would have said."""
    if path == PLACEHOLDER:
        return targetmap.Target(path, "file", None, 512)
    if hosts.split(path):
        return hosts.remote_target(path)
    if opts.create_file is not None and opts.create_file <= 0:
        raise IotapeError(f"--create-file {opts.create_file}: must be a positive size")
    if targets.classify(path, opts.create_file) == "block" and writes:
        safety.check_target(path, opts.destroy)
    return targetmap.probe(path, opts.create_file)


def _seed(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def _who(owner: Owner) -> int | str:
    """An owner in a seed: a database by its number, as before groups existed."""
    return owner.number if owner.kind == "db" else owner.name


def _mapping(opts: PlanOptions) -> tuple[dict[str, str], dict[str, HostAddress]]:
    """--target NAME=PATH as absolute paths (the dry-run placeholder without any), and --host."""
    mapping = targetmap.parse(opts.targets)
    hostmap = hosts.parse(opts.hosts)
    hosts.check_mapping(mapping, hostmap)
    if not mapping:
        if not opts.dry_run:
            raise IotapeError("no target: give --target NAME=PATH (e.g. --target all=/dev/sdb)")
        mapping = {"all": PLACEHOLDER}
    local = lambda v: v == PLACEHOLDER or hosts.split(v) is not None  # noqa: E731
    return {k: (v if local(v) else os.path.abspath(v)) for k, v in mapping.items()}, hostmap


def _streams(src: Source) -> list[tuple[int, str, str, np.ndarray]]:
    """(device, its name, stream name, the requests' indices) of each stream on each device."""
    r = src.records
    devnames = src.device_names()
    out = []
    for dev in np.unique(r["dev"]).tolist():
        dname = devnames.get(dev, f"dev{dev >> 20}:{dev & 0xFFFFF}")
        for sid in np.unique(r["stream"]).tolist():
            idx = np.flatnonzero((r["dev"] == dev) & (r["stream"] == sid))
            if len(idx):
                out.append((dev, dname, src.stream_name(sid), idx))
    return out


def _groups(
    src: Source, mapping: dict[str, str], lay: scale.Layout
) -> tuple[list[_Group], dict[str, list[Owner]]]:
    """The groups of requests each database (and each storage group's log, where
    groups share logs) replays, and the databases and group logs on each target."""
    r = src.records
    lay.check_targets(mapping)
    per_stream = _streams(src)
    owned: list[tuple[Owner, int, str, str, np.ndarray, str]] = []
    for db in range(lay.databases):
        for dev, dname, sname, idx in per_stream:
            if sname in scale.PER_LOG and lay.shared_logs:
                continue
            # A group of one database: its log may be named by either.
            group = lay.group_of(db) if sname in scale.PER_LOG else None
            path = targetmap.choose(mapping, Owner("db", db), sname, dname, group)
            owned.append((Owner("db", db), dev, dname, sname, idx, path))
    for g in range(lay.storage_groups) if lay.shared_logs else ():
        for dev, dname, sname, idx in per_stream:
            if sname in scale.PER_LOG:
                path = targetmap.choose(mapping, Owner("sg", g), sname, dname, None, lay.members(g))
                owned.append((Owner("sg", g), dev, dname, sname, idx, path))
    groups = []
    users: dict[str, list[Owner]] = {}
    for owner, dev, dname, sname, idx, path in owned:
        users.setdefault(path, []).append(owner)
        for sub, suffix in _submitters(r[idx], sname):
            groups.append(_Group(owner, dev, dname, sname, idx[sub], path, suffix))
    return groups, users


def _layout(
    src: Source, groups: list[_Group], users: dict[str, list[Owner]], opts: PlanOptions
) -> _Layout:
    """Probe every target (checking it is safe to write) and split it among its databases."""
    r = src.records
    dev_ids = np.unique(r["dev"]).tolist()
    data = r["op"] != OP["flush"]
    ends = np.where(data, r["offset"].astype(np.int64) + r["bytes"].astype(np.int64), 0)
    dev_end = {dev: int(ends[r["dev"] == dev].max(initial=512)) for dev in dev_ids}
    written = {g.path for g in groups if np.isin(r["op"][g.idx], WRITE_OPS).any()}
    probed = {p: _target(p, p in written, opts) for p in users}
    need = {p: max(dev_end.values()) for p in users}
    spans = targetmap.ranges(users, probed, need)
    return _Layout(dev_end, probed, spans, len(dev_ids) == 1)


def _slices(
    src: Source, g: _Group, sc: scale.Scaling | None, lay: _Layout, opts: PlanOptions
) -> Iterator[tuple[int, Slice]]:
    """(copy, slice) of a group, scaled to its stream's share and remapped into its
    database's (or group log's) range of its target; each copy rotated through the range."""
    r = src.records
    base, size = lay.spans[(g.path, g.owner)]
    block = lay.probed[g.path].block
    f = (
        scale.group_factor(g.sname, sc, g.owner.number)
        if g.owner.kind == "sg"
        else scale.factor(g.sname, sc)
    )
    reps = scale.replicas(len(g.idx), f, _seed(_who(g.owner), g.dev, g.sname))
    stem = f"{g.owner.name}.{g.sname}" + ("" if lay.single_dev else f".{g.dname}") + g.suffix
    dev_end = lay.dev_end[g.dev]
    for j, sub in enumerate(reps):
        if not len(sub):
            continue
        rows = g.idx[sub]
        rr = r[rows]
        rotate = (j * dev_end // len(reps)) // block * block if j else 0
        off, b = remap.remap(rr["offset"], rr["bytes"], size, block, opts.remap, dev_end, rotate)
        writes = bool(np.isin(rr["op"], WRITE_OPS).any())
        name = stem + (f".c{j}" if len(reps) > 1 else "")
        yield (
            j,
            Slice(name, g.path, g.sname, g.owner, writes, rr, src.t_ns[rows], off, b, base, size),
        )


def _synthetic_jobs(
    s: Slice, window_ns: int, seed: int, opts: PlanOptions
) -> tuple[fitloc.Model, list[Job]]:
    """A slice fitted per window: its locality model and its jobs."""
    args = (s.records, s.t_ns, s.offset, s.nbytes, s.size, window_ns)
    model = synthetic.fit(*args, seed, opts.locality)
    jobs = []
    for w, o, n, seq_start in synthetic.window_jobs(*args, 1.0, opts.time_scale, model):
        o = {"filename": s.target, **o}
        if seq_start is not None:
            o["offset"] = str(s.base + seq_start)
            o["size"] = str(s.size - seq_start)
        else:
            o["offset"] = str(s.base)
            o["size"] = str(s.size)
        jobs.append(Job(f"{s.name}.{w}", s.target, s.stream, s.owner, o, n, s.writes))
    return model, jobs


def build(opts: PlanOptions) -> Plan:
    """Everything the plan will write, computed in memory."""
    _check(opts)
    src = load(opts.trace)
    sc = scale.resolve(
        src.metadata(),
        opts.mailboxes,
        opts.databases,
        opts.copies,
        opts.from_mailboxes,
        opts.from_databases,
        opts.from_copies,
        opts.storage_groups,
        opts.from_storage_groups,
    )
    mapping, hostmap = _mapping(opts)
    n = len(src.records)
    mode, why = choose_mode(opts, n, exact.plans_lanes(opts, n, bool(hostmap)))
    layout = exact.resolve_layout(opts, len(src.records), bool(hostmap)) if mode == "exact" else ""
    opts = dataclasses.replace(opts, layout=layout or opts.layout)
    groups, users = _groups(src, mapping, sc.layout if sc else scale.Layout(1, 1))
    lay = _layout(src, groups, users, opts)
    window_ns = int(max(opts.window_s, src.duration_ns / 1e9 / MAX_WINDOWS) * 1e9)
    jobs: list[Job] = []
    models: dict[str, fitloc.Model] = {}
    for g in groups:
        for j, s in _slices(src, g, sc, lay, opts):
            if mode == "exact":
                jobs += exact.slice_jobs(s, src.timing, opts)
                continue
            seed = _seed(_who(g.owner), g.dev, g.sname, j)
            models[s.name], more = _synthetic_jobs(s, window_ns, seed, opts)
            jobs += more
    per_segment, start_us, windows = 0, None, [Window(0, jobs, 0, 0)]
    layout = "pieces"
    if mode == "exact":
        jobs, per_segment, windows, start_us, layout = exact.arrange(jobs, opts, bool(hostmap))
    return Plan(
        opts, src, mode, why, jobs, windows, start_us, per_segment, sc,
        lay.probed, lay.spans, window_ns, models, hostmap, layout,
    )  # fmt: skip


def _reach(jobs: list[Job]) -> dict[str, int]:
    """Per target, the end of the furthest byte any job may touch."""
    out: dict[str, int] = {}
    for j in jobs:
        if j.entries is not None:
            _t, action, off, b = j.entries
            data = action != iolog.SYNC
            end = int((off[data] + b[data]).max(initial=0))
        else:
            end = int(j.options["offset"]) + int(j.options["size"])
        out[j.target] = max(out.get(j.target, 0), end)
    return out


def manifest(p: Plan) -> Manifest:
    """plan.json: what `replay run` needs (targets, jobs, expected duration)."""
    tw: dict[str, bool] = {}
    for j in p.jobs:
        tw[j.target] = tw.get(j.target, False) or j.writes
    reach = _reach(p.jobs)
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


def plan(opts: PlanOptions) -> PlanResult:
    """Build the plan and, unless dry_run, write JOBDIR whole (or nothing). Returns
    the manifest, with "jobfile_text" added."""
    # streamplan builds on this module: imported here, not at the top.
    from replayer.plan import streamplan

    if streamplan.wanted(opts):
        streamed = streamplan.plan(opts)
        if streamed is not None:
            return streamed
    p = build(opts)
    texts = {w.jobfile: jobfile.jobfile_text(p, w) for w in p.windows}
    text = "".join(
        (f"\n; ---- {name} ----\n" if k else "") + t for k, (name, t) in enumerate(texts.items())
    )
    man = manifest(p)
    if not opts.dry_run:
        if opts.jobdir is None:
            raise IotapeError("no job directory: give -o JOBDIR")
        write.write(Path(opts.jobdir), opts.force, p, man, texts)
    return {**man.data(), "jobfile_text": text}
