"""An exact plan of lanes written while the trace is read in time-ordered
chunks (stream.py), so that memory stays flat however long the trace: a 1-hour
trace at 8,000 IOPS (29 M requests) would need ~13 GiB planned whole.

Each chunk goes through the same steps as a whole trace (build: groups,
slices, remap; exact: jobs), laid out against the scan's view of the whole
trace (its devices' furthest bytes, its streams and writes: stream.skeleton),
and its requests are dealt to lanes (lanes.Lanes keeps each lane's state from
one chunk to the next) and appended to their logs; fio's plain replay (the
anchor) is appended likewise. Used where the plan is exact, of lanes, unscaled,
on one host, and the trace is large (STREAM_ABOVE); otherwise build.plan holds
the trace whole. The job file is written last, when the lanes are known.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from base.errors import IotapeError
from replayer.hosts import spec as hosts
from replayer.plan import build, exact, iolog, jobfile, lanes, scale, stream, write
from replayer.plan.model import Job, Plan, PlanResult, Window
from replayer.plan.options import PlanOptions, choose_mode

# Records (80 bytes each) past which a plan is streamed: ~80 MB of trace.
STREAM_ABOVE = 1_000_000
RECORD_BYTES = 80


def wanted(opts: PlanOptions) -> bool:
    """Whether to stream: exact (or auto) lanes, no scaling, one host, a big file."""
    scaled = any(
        v is not None for v in (opts.mailboxes, opts.databases, opts.copies, opts.storage_groups)
    )
    if opts.mode == "synthetic" or opts.layout == "pieces" or opts.windows or scaled:
        return False
    if opts.hosts or opts.dry_run or opts.segment <= 0:
        return False
    try:
        big = os.path.getsize(opts.trace) > STREAM_ABOVE * RECORD_BYTES
    except OSError:
        return False  # build.plan says what is wrong with it
    return big


class _Out:
    """The lanes' logs and the anchor log, appended chunk by chunk."""

    def __init__(self, tmp: Path, start_us: int, targets: list[str]) -> None:
        self.dir = tmp / "iologs"
        self.dir.mkdir()
        self.start_us = start_us
        self.lanes: dict[str, Job] = {}  # lane name -> its job (entries empty)
        self.reach: dict[str, int] = {}
        self.end_us = 0
        self.largest = 0
        self.anchor = open(tmp / "anchor.log", "w")  # noqa: SIM115 - closed in finish()
        self.anchor.write(iolog.HEADER + "\n")
        self.anchor.writelines(
            [f"1 {u} add\n" for u in targets] + [f"1 {u} open\n" for u in targets]
        )
        self.targets = targets

    def add(self, j: Job, lane: np.ndarray) -> None:
        """Append job `j`'s entries to their lanes' logs."""
        assert j.entries is not None  # exact jobs only
        t, a, o, b = j.entries
        data = a != iolog.SYNC
        if data.any():
            self.largest = max(self.largest, int(b[data].max()))
            end = int((o[data] + b[data]).max())
            self.reach[j.target] = max(self.reach.get(j.target, 0), end)
        path = hosts.local_path(j.target)
        for k in np.unique(lane).tolist():
            sel = lane == k
            name = f"{j.name}.g{k:03d}"
            new = name not in self.lanes
            if new:
                empty = tuple(np.zeros(0, np.int64) for _ in range(4))
                self.lanes[name] = Job(
                    name, j.target, j.stream, j.owner, lanes.lane_options(j), 0, j.writes,
                    (empty[0], empty[1], empty[2], empty[3]), k,
                )  # fmt: skip
            lane_job = self.lanes[name]
            lane_job.requests += int((a[sel] != iolog.SYNC).sum())
            lane_job.writes = lane_job.writes or j.writes
            with open(self.dir / f"{name}.log", "a") as f:
                if new:
                    f.write(iolog.head_v2(path))
                f.writelines(iolog.lines_v2(path, t[sel], a[sel], o[sel], b[sel], self.start_us))

    def add_anchor(self, jobs: list[Job]) -> None:
        parts = [(j.target, j.entries) for j in jobs if j.entries is not None]
        if not parts:
            return
        t = np.concatenate([e[0] for _, e in parts])
        order = np.argsort(t, kind="stable")
        names = np.concatenate([np.full(len(e[0]), n, dtype=object) for n, e in parts])[order]
        cols = [np.concatenate([e[k] for _, e in parts])[order] for k in range(4)]
        acts = np.asarray(iolog.ACTIONS, dtype=object)[cols[1]]
        self.anchor.writelines(
            f"{ts + iolog.T0_US} {n} {a} {o} {b}\n"
            for ts, n, a, o, b in zip(
                cols[0].tolist(), names.tolist(), acts.tolist(), cols[2].tolist(),
                cols[3].tolist(), strict=True,
            )
        )  # fmt: skip
        self.end_us = max(self.end_us, int(cols[0][-1]))

    def finish(self) -> list[Job]:
        end = self.end_us + iolog.T0_US
        self.anchor.writelines(f"{end} {u} close\n" for u in self.targets)
        self.anchor.close()
        for name, j in self.lanes.items():
            with open(self.dir / f"{name}.log", "a") as f:
                f.write(iolog.tail_v2(hosts.local_path(j.target)))
        out = sorted(self.lanes.values(), key=lambda j: j.name)
        lanes.set_buffer_size(out, self.largest)
        return out


def plan(opts: PlanOptions) -> PlanResult | None:
    """Plan and write JOBDIR streamed; None where the trace is not to be streamed
    after all (auto chose synthetic mode): build.plan then plans it whole."""
    s = stream.scan(opts.trace)
    mapping, hostmap = build._mapping(opts)
    lanes_ok = exact.plans_lanes(opts, s.requests, bool(hostmap))
    mode, _why = choose_mode(opts, s.requests, lanes_ok)
    if mode != "exact":
        return None
    opts = dataclasses.replace(opts, layout="lanes")
    skel = stream.skeleton(s)
    groups, users = build._groups(skel, mapping, scale.Layout(1, 1))
    lay = build._layout(skel, groups, users, opts)
    if opts.jobdir is None:
        raise IotapeError("no job directory: give -o JOBDIR")
    jobdir = Path(opts.jobdir)
    parent = write.check_jobdir(jobdir, opts.force)
    tmp = Path(tempfile.mkdtemp(prefix=f".{jobdir.name}.", dir=parent))
    try:
        start = lanes.start_us(lanes.MAX_LANES)
        out = _Out(tmp, start, sorted({g.path for g in groups}))
        dealer = lanes.Lanes()
        for src in stream.sorted_chunks(s):
            chunk_groups, _ = build._groups(src, mapping, scale.Layout(1, 1))
            jobs: list[Job] = []
            for g in chunk_groups:
                for _k, sl in build._slices(src, g, None, lay, opts):
                    jobs += exact.slice_jobs(sl, src.timing, opts)
            jobs = exact.fold_sync_only(jobs)
            out.add_anchor(jobs)
            for j in jobs:
                assert j.entries is not None and j.busy_us is not None  # lanes
                out.add(j, dealer.deal(j.name, j.entries[0], j.entries[1], j.busy_us))
        lane_jobs = out.finish()
        p = Plan(
            opts, skel, "exact", None, lane_jobs, [Window(0, lane_jobs, start, 0)], start, 0,
            None, lay.probed, lay.spans, 0, {}, hostmap, "lanes", s.requests,
        )  # fmt: skip
        return _finish(tmp, jobdir, p, out.reach)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _finish(tmp: Path, jobdir: Path, p: Plan, reach: dict[str, int]) -> PlanResult:
    """The job file, the anchor's job and plan.json into `tmp`, then `tmp` into place."""
    text = jobfile.jobfile_text(p)
    man = build.manifest(p)
    for t in man.targets:
        t.reach_bytes = reach.get(t.path, 0)
    (tmp / "replay.fio").write_text(text)
    (tmp / "anchor.fio").write_text(jobfile.anchor_job())
    (tmp / "results").mkdir()
    man.write(tmp / "plan.json")
    os.chmod(tmp, 0o755)
    if jobdir.exists():
        shutil.rmtree(jobdir)
    os.replace(tmp, jobdir)
    return {**man.data(), "jobfile_text": text}
