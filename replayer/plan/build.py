"""`iotape replay plan`: a trace -> a directory of fio job files a person can read.

Layout of JOBDIR:
  replay.fio      the jobs, one fio process, a header saying what was done and why
  replay.wNNNN.fio  a long exact trace: the jobs of window N, one fio process each
                  (replay.fio is window 0), all on one clock (iolog.py)
  iologs/*.log    exact mode: one iolog (v3, microseconds) per stream, target and copy
  anchor.fio      fio's own plain replay of the same requests (one iolog, read_iolog
  anchor.log      defaults), the yardstick that `iotape replay fidelity` compares against
  plan.json       what `iotape replay run` needs: targets, jobs, expected duration
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from iotape.errors import IotapeError
from replayer.hosts import spec as hosts
from replayer.plan import fitloc, iolog, remap, scale, synthetic
from replayer.plan.source import FUA, OP, PREFLUSH, Source, load, max_in_flight
from replayer.run import safety, targets
from schemas.formats import REPLAY_PLAN

MODES = ("exact", "synthetic", "auto")
PLAN_FORMAT, PLAN_VERSION = REPLAY_PLAN.id, REPLAY_PLAN.version
MAX_WINDOWS = 120
MAX_SUBMITTERS = 64
# fio's CPU clock starts at fio's start: the zero that exact jobs' starts count from
# (iolog.py explains how a job's first wait becomes absolute).
CLOCKSOURCE = "cpu"
# A plan of several fio processes (windows) shares CLOCK_MONOTONIC instead (iolog.py).
CLOCKSOURCE_SHARED = "clock_gettime"
# Exact jobs start this long after fio does, plus START_PER_JOB_S per job: fio sets
# its jobs up one after another once it releases them (~0.1-0.2 ms each here),
# and a job that is still setting up at its start time starts late.
START_S = 0.5
START_PER_JOB_S = 0.001
# A job's first wait (absolute, from fio's start) is slept in fio's 0.5 s chunks,
# and fio never makes up a chunk's late wake-up (its catch-up compares the time
# slept with the whole wait): a piece 5 s into the trace started ~0.3 ms late
# here, growing ~60 us per second of trace. A piece that starts later than this
# therefore gets a startdelay that creates its thread this long before its first
# entry (counted from the latest genesis the plan allows: _startdelay_us): its
# wait is then a few chunks. fio creates delayed jobs from a loop that polls
# every 100 ms and sets each up after that (100-200 ms late here; 0.6 s was not
# enough margin once the machine was busy).
STARTDELAY_MARGIN_S = 1.0
# Jobs per fio process (fio 3.33 refuses more than 4096). A trace of more pieces
# gets longer pieces (a stall inside a piece then delays the rest of it, since
# fio times each entry from the previous issue), or with --windows is cut into
# windows of WINDOW_JOBS pieces in time order, each run by its own fio process
# launched its set-up time before its first piece: pieces stay `--segment` long
# and each fio holds one window. Measured on a 60 s trace at 8k IOPS, the
# windows' p99 was 339 ms against 12.8 ms for one process in the same run: a fio
# process setting up (opening every job's file, creating its threads) raised the
# running replay's device latency p99 from 0.1 to 15-25 ms, and a window starts
# every ~2 s. fio's memory, though, is one window's (473 MiB against 1.37 GiB).
MAX_JOBS = 2000
# A window's jobs have no startdelay: fio counts it from its genesis, which it
# sets only after opening every job's file one by one, and a process started
# while another replays took seconds to get there (windows of 2,000 jobs whose
# startdelayed pieces all ran 2-7 s late). Every job is created at launch and
# its first wait is absolute; a window is small enough that those waits (slept
# in 0.5 s steps) stay short, and its set-up gets WINDOW_PER_JOB_S per job.
WINDOW_JOBS = 500
WINDOW_PER_JOB_S = 0.003
SYNC_ENGINES = ("psync", "sync", "pvsync", "pvsync2", "vsync")
WRITE_OPS = [OP["write"], OP["write-zeroes"], OP["discard"], OP["flush"]]
PLACEHOLDER = "/dev/TARGET"


@dataclass
class PlanOptions:
    trace: Path
    jobdir: Path | None = None
    mode: str = "auto"
    mailboxes: float | None = None
    databases: int | None = None
    copies: int | None = None
    from_mailboxes: float | None = None
    from_databases: int | None = None
    from_copies: int | None = None
    time_scale: float = 1.0
    remap: str = "fit"
    targets: list[str] = field(default_factory=list)
    dry_run: bool = False
    force: bool = False
    window_s: float = 1.0
    locality: str = "auto"  # synthetic: zipf, zoned, or auto (the better in simulation)
    exact_limit: int = 2_000_000
    engine: str = "psync"
    segment: int = 32
    # A trace of more than MAX_JOBS pieces: one fio process whose pieces get
    # longer (False), or windows of fio processes (True, --windows; see WINDOW_JOBS).
    windows: bool = False
    create_file: int | None = None  # bytes: create each target file that does not exist
    destroy: list[str] = field(default_factory=list)  # --destroy-data-on
    hosts: list[str] = field(default_factory=list)  # --host NAME=ADDRESS[:PORT] (hosts.py)


@dataclass
class Job:
    name: str
    target: str
    stream: str
    db: int
    options: dict[str, str]
    requests: int
    writes: bool
    entries: tuple | None = None  # exact: (t_us, action, offset, length)
    segment: int | None = None  # exact: which piece of its stream's requests this job is


def _entries(r: np.ndarray, t_ns: np.ndarray, off: np.ndarray, b: np.ndarray, ts: float):
    """iolog entries for records: a write carrying PREFLUSH becomes sync + write."""
    op = r["op"]
    action = np.full(len(r), iolog.WRITE, dtype=np.int64)
    action[op == OP["read"]] = iolog.READ
    action[op == OP["flush"]] = iolog.SYNC
    action[op == OP["discard"]] = iolog.TRIM
    off = np.where(action == iolog.SYNC, 0, off)
    b = np.where(action == iolog.SYNC, 0, b)
    t_us = np.round(t_ns * ts / 1000).astype(np.int64)
    pre = (r["flags"] & PREFLUSH).astype(bool) & (action == iolog.WRITE)
    if pre.any():
        n = int(pre.sum())
        t_us = np.concatenate([t_us, t_us[pre]])
        action = np.concatenate([action, np.full(n, iolog.SYNC)])
        off = np.concatenate([off, np.zeros(n, np.int64)])
        b = np.concatenate([b, np.zeros(n, np.int64)])
        # The sync goes just before its write.
        rank = np.concatenate([np.ones(len(r)), np.zeros(n)])
        order = np.lexsort((rank, t_us))
        t_us, action, off, b = t_us[order], action[order], off[order], b[order]
    return t_us, action, off, b


def _lanes(r: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
    """A lane per request such that a lane's requests never overlapped in the trace
    (each was issued after the one before it completed): a synchronous fio job
    issues one request at a time, so overlapping requests need separate jobs, or
    the second waits for the first and the stream falls behind."""
    lat = r["ts_complete_ns"].astype(np.int64) - np.maximum(
        r["ts_issue_ns"].astype(np.int64), r["ts_queue_ns"].astype(np.int64)
    )
    end = t_ns + np.maximum(lat, 0)
    lane = np.zeros(len(r), np.int64)
    free_at: list[int] = []
    for i, (t, e) in enumerate(zip(t_ns.tolist(), end.tolist(), strict=True)):
        k = next((k for k, f in enumerate(free_at) if f <= t), len(free_at))
        if k == len(free_at):
            free_at.append(e)
        free_at[k] = e
        lane[i] = k
    return lane


def _submitters(r: np.ndarray, stream: str) -> list[tuple[np.ndarray, str]]:
    """Unlabelled I/O split by submitting thread: each thread issued its own
    requests concurrently with the others, and one iolog would serialise them."""
    # By process, not thread: an io_uring worker thread that ran a process's fsync
    # belongs with that process's writes.
    pids = np.unique(r["pid"])
    if stream != "other" or len(pids) < 2 or len(pids) > MAX_SUBMITTERS:
        return [(np.arange(len(r)), "")]
    return [(np.flatnonzero(r["pid"] == p), f".p{int(p)}") for p in pids.tolist()]


def _fold_sync_only(jobs: list[Job]) -> list[Job]:
    """fio refuses an iolog with nothing but syncs; such a job's syncs join the
    busiest job on the same target and database."""
    out: list[Job] = []
    lonely: list[Job] = []
    for j in jobs:
        if j.entries is not None and not (j.entries[1] != iolog.SYNC).any():
            lonely.append(j)
        else:
            out.append(j)
    for j in lonely:
        peers = [p for p in out if p.entries is not None and p.target == j.target and p.db == j.db]
        if not peers:
            continue
        host = max(peers, key=lambda p: p.requests)
        cols = [np.concatenate([a, b]) for a, b in zip(host.entries, j.entries, strict=True)]
        order = np.argsort(cols[0], kind="stable")
        host.entries = tuple(c[order] for c in cols)
        host.requests += j.requests
        host.writes = True
    return out


def _segments(jobs: list[Job], per_job: int, windows: bool = False) -> tuple[list[Job], int]:
    """Cut each exact job into pieces of at most `per_job` requests, each its own
    job. fio 3.33 times an iolog request from the one before it, and every wait
    ends a little late (5-20 us here, more when the CPU is busy), so a job's
    lateness grows with its length; a job's first request, though, is timed from
    fio's start (iolog.py), the same zero for every job. A piece's error is
    therefore bounded by its own few requests.
    fio takes at most MAX_JOBS jobs: long traces get longer pieces, or with
    `windows` keep their length and run as windows of fio processes (_windows)."""
    if per_job <= 0:
        return jobs, 0
    n = per_job
    if not windows:
        total = sum(len(j.entries[0]) for j in jobs if j.entries is not None)
        n = max(per_job, -(-total // MAX_JOBS))
    out: list[Job] = []
    for j in jobs:
        if j.entries is None:
            out.append(j)
            continue
        t, action, off, b = j.entries
        data = np.flatnonzero(action != iolog.SYNC)
        # Cut before every n-th data request, so no piece holds syncs alone.
        cuts = data[n::n].tolist()
        bounds = [0, *cuts, len(t)]
        for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            piece = tuple(c[lo:hi] for c in (t, action, off, b))
            reqs = int((piece[1] != iolog.SYNC).sum())
            out.append(
                Job(
                    f"{j.name}.s{k:04d}",
                    j.target,
                    j.stream,
                    j.db,
                    dict(j.options),
                    reqs,
                    j.writes,
                    piece,
                    k,
                )
            )
    # fio sets its jobs up one after another: in time order, the pieces that start
    # first are the first ready.
    out.sort(key=lambda j: int(j.entries[0][0]) if j.entries is not None else 0)
    return out, n


@dataclass
class Window:
    """Consecutive pieces run by one fio process."""

    index: int
    jobs: list[Job]
    start_us: int  # set-up budget: the first piece's entry this long after launch
    launch_us: int  # when its fio starts, in trace microseconds (may be < 0)

    @property
    def jobfile(self) -> str:
        return "replay.fio" if self.index == 0 else f"replay.w{self.index:04d}.fio"


def _setup_us(n_jobs: int, windowed: bool = False, extra_s: float = 0.0) -> int:
    per_job = WINDOW_PER_JOB_S if windowed else START_PER_JOB_S
    return int((START_S + extra_s + per_job * n_jobs) * 1e6)


def _first_us(job: Job) -> int:
    return int(job.entries[0][0]) if job.entries is not None and len(job.entries[0]) else 0


def _windows(jobs: list[Job], windows: bool, extra_s: float = 0.0) -> list[Window]:
    """With `windows` and past MAX_JOBS, cut the time-ordered jobs into windows of
    WINDOW_JOBS, each launched its set-up budget before its first piece's first
    request; otherwise one window of them all."""
    out = []
    windowed = windows and len(jobs) > MAX_JOBS
    size = WINDOW_JOBS if windowed else max(len(jobs), 1)
    for k, lo in enumerate(range(0, max(len(jobs), 1), size)):
        part = jobs[lo : lo + size]
        setup = _setup_us(len(part), windowed, extra_s)
        first = min((_first_us(j) for j in part), default=0) if k else 0
        out.append(Window(k, part, setup, first - setup))
    return out


def _target(path: str, writes: bool, opts: PlanOptions) -> targets.Target:
    """Check what `path` is, and that it is safe to write, before opening it: a
    device is refused for what it is (the root disk, mounted, in use), not for
    whatever opening it would have said."""
    if path == PLACEHOLDER:
        return targets.Target(path, "file", None, 512)
    if hosts.split(path):
        return hosts.remote_target(path)
    if opts.create_file is not None and opts.create_file <= 0:
        raise IotapeError(f"--create-file {opts.create_file}: must be a positive size")
    if targets.classify(path, opts.create_file) == "block" and writes:
        safety.check_target(path, opts.destroy)
    return targets.probe(path, opts.create_file)


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


def _seed(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


SYNTHETIC_LOSES = (
    "not reproduced: the request order, each request's own offset, size and time "
    "(fio draws them per window), the issue times within a window, discards; "
    "kept: per-window rate, read/write and size mix, depth, flushes, and each "
    "stream's footprint, sequential share and LRU hit-ratio curve as fitted "
    "(check them with `iotape replay fidelity`)"
)


def _mode(opts: PlanOptions, n: int) -> tuple[str, str | None]:
    """(mode, why auto chose synthetic): auto replays exactly whenever the trace is
    within --exact-limit, the most requests whose iologs fio is asked to hold."""
    if opts.mode != "auto" or n <= opts.exact_limit:
        return ("exact" if opts.mode == "auto" else opts.mode), None
    return "synthetic", (
        f"auto chose synthetic mode: {n} requests > --exact-limit {opts.exact_limit} "
        "(fio holds every iolog entry in memory; raise --exact-limit to replay exactly); "
        + SYNTHETIC_LOSES
    )


def build(opts: PlanOptions) -> dict:
    """Everything the plan will write, computed in memory: {"src", "jobs", "header", ...}."""
    if opts.mode not in MODES:
        raise IotapeError(f"--mode {opts.mode}: unknown; one of {', '.join(MODES)}")
    if not (opts.time_scale > 0):
        raise IotapeError(f"--time-scale {opts.time_scale}: must be positive")
    if opts.locality not in fitloc.KINDS:
        raise IotapeError(f"--locality {opts.locality}: unknown; one of {', '.join(fitloc.KINDS)}")
    if opts.remap not in remap.MODES:
        raise IotapeError(f"--remap {opts.remap}: unknown; one of {', '.join(remap.MODES)}")
    src = load(opts.trace)
    sc = scale.resolve(
        src.metadata(),
        opts.mailboxes,
        opts.databases,
        opts.copies,
        opts.from_mailboxes,
        opts.from_databases,
        opts.from_copies,
    )
    mode, why = _mode(opts, len(src.records))
    mapping = targets.parse(opts.targets)
    hostmap = hosts.parse(opts.hosts)
    hosts.check_mapping(mapping, hostmap)
    if not mapping:
        if not opts.dry_run:
            raise IotapeError("no target: give --target NAME=PATH (e.g. --target all=/dev/sdb)")
        mapping = {"all": PLACEHOLDER}
    local = lambda v: v == PLACEHOLDER or hosts.split(v) is not None  # noqa: E731
    mapping = {k: (v if local(v) else os.path.abspath(v)) for k, v in mapping.items()}
    k_dbs = sc.databases if sc else 1
    r = src.records
    devnames = src.device_names()
    dev_ids = np.unique(r["dev"]).tolist()
    stream_ids = np.unique(r["stream"]).tolist()
    groups = []
    users: dict[str, list[int]] = {}
    for db in range(k_dbs):
        for dev in dev_ids:
            dname = devnames.get(dev, f"dev{dev >> 20}:{dev & 0xFFFFF}")
            for sid in stream_ids:
                sname = src.stream_name(sid)
                idx = np.flatnonzero((r["dev"] == dev) & (r["stream"] == sid))
                if not len(idx):
                    continue
                path = targets.choose(mapping, db, sname, dname)
                users.setdefault(path, []).append(db)
                for sub, suffix in _submitters(r[idx], sname):
                    groups.append((db, dev, dname, sid, sname, idx[sub], path, suffix))
    data = r["op"] != OP["flush"]
    ends = np.where(data, r["offset"].astype(np.int64) + r["bytes"].astype(np.int64), 0)
    dev_end = {dev: int(ends[r["dev"] == dev].max(initial=512)) for dev in dev_ids}
    written = {g[6] for g in groups if np.isin(r["op"][g[5]], WRITE_OPS).any()}
    probed = {p: _target(p, p in written, opts) for p in users}
    need = {p: max(dev_end.values()) for p in users}
    spans = targets.ranges(users, probed, need)
    window_ns = int(max(opts.window_s, src.duration_ns / 1e9 / MAX_WINDOWS) * 1e9)
    single_dev = len(dev_ids) == 1
    jobs: list[Job] = []
    models: dict[str, fitloc.Model] = {}
    for db, dev, dname, _sid, sname, idx, path, suffix in groups:
        base, size = spans[(path, db)]
        block = probed[path].block
        f = scale.factor(sname, sc)
        reps = scale.replicas(len(idx), f, _seed(db, dev, sname))
        stem = f"db{db}.{sname}" + ("" if single_dev else f".{dname}") + suffix
        for j, sub in enumerate(reps):
            if not len(sub):
                continue
            rows = idx[sub]
            rr = r[rows]
            rotate = (j * dev_end[dev] // len(reps)) // block * block if j else 0
            off, b = remap.remap(
                rr["offset"], rr["bytes"], size, block, opts.remap, dev_end[dev], rotate
            )
            writes = bool(np.isin(rr["op"], WRITE_OPS).any())
            name = stem + (f".c{j}" if len(reps) > 1 else "")
            if mode == "exact":
                fua = ((rr["flags"] & FUA) != 0) & (rr["op"] == OP["write"])
                lanes = (
                    _lanes(rr, src.t_ns[rows])
                    if opts.engine in SYNC_ENGINES and src.timing != "none"
                    else np.zeros(len(rr), np.int64)
                )
                parts = [
                    (
                        f"{'.fua' if f else ''}{f'.l{k}' if lanes.max() else ''}",
                        (fua == f) & (lanes == k),
                    )
                    for f in (False, True)
                    for k in range(int(lanes.max()) + 1)
                ]
                for part, sel in parts:
                    if not sel.any():
                        continue
                    depth = (
                        1
                        if src.timing == "none"
                        else min(256, 2 * max_in_flight(rr[sel], src.t_ns[rows][sel]))
                    )
                    depth = max(depth, 2 if src.timing != "none" else 1)
                    # A synchronous engine issues one request at a time per job anyway.
                    o = {"iodepth": str(1 if opts.engine in SYNC_ENGINES else depth)}
                    if part.startswith(".fua"):
                        # fio's iolog has no FUA action; O_DSYNC writes are what the
                        # kernel turns into FUA writes (or write + flush without FUA).
                        o["sync"] = "dsync"
                    ent = _entries(
                        rr[sel], src.t_ns[rows][sel], off[sel] + base, b[sel], opts.time_scale
                    )
                    jobs.append(Job(name + part, path, sname, db, o, int(sel.sum()), writes, ent))
            else:
                model = synthetic.fit(
                    rr,
                    src.t_ns[rows],
                    off,
                    b,
                    size,
                    window_ns,
                    _seed(db, dev, sname, j),
                    opts.locality,
                )
                models[name] = model
                for w, o, n, seq_start in synthetic.window_jobs(
                    rr,
                    src.t_ns[rows],
                    off,
                    b,
                    size,
                    window_ns,
                    1.0,
                    opts.time_scale,
                    model,
                ):
                    o = {"filename": path, **o}
                    if seq_start is not None:
                        o["offset"] = str(base + seq_start)
                        o["size"] = str(size - seq_start)
                    else:
                        o["offset"] = str(base)
                        o["size"] = str(size)
                    jobs.append(Job(f"{name}.{w}", path, sname, db, o, n, writes))
    per_segment = 0
    start_us = None
    windows = [Window(0, jobs, 0, 0)]
    if mode == "exact":
        jobs, per_segment = _segments(_fold_sync_only(jobs), opts.segment, opts.windows)
        if opts.windows and hostmap:
            raise IotapeError("--windows with --host: windows run on one host; drop one")
        windows = _windows(jobs, opts.windows, hosts.START_S if hostmap else 0.0)
        # One process: iolog times count from fio's start, the trace's 0 at its
        # set-up budget. Several: from the stamped monotonic base (iolog.py).
        start_us = windows[0].start_us if len(windows) == 1 else iolog.MONO_BASE_US
    return {
        "hosts": hostmap,
        "start_us": start_us,
        "windows": windows,
        "src": src,
        "per_segment": per_segment,
        "scaling": sc,
        "mode": mode,
        "jobs": jobs,
        "probed": probed,
        "spans": spans,
        "window_ns": window_ns,
        "models": models,
        "mode_reason": why,
    }


def header_text(opts: PlanOptions, b: dict) -> str:
    src: Source = b["src"]
    sc = b["scaling"]
    jobs: list[Job] = b["jobs"]
    lines = [
        f"iotape replay plan: {b['mode']} mode",
        f"source: {src.path} ({len(src.records)} requests over {src.duration_ns / 1e9:.3f} s, "
        f"times from {src.timing})",
        "flushes: the submitter's flush (op=flush with its pid) is replayed as fio's `sync`;",
        "  the device flush the kernel issues for it (pid 0) is dropped, since the sync makes",
        "  the kernel issue it again. Writes carrying PREFLUSH get a sync just before them;",
        "  FUA writes run in their own `.fua` job with sync=dsync (fio's iolog has no FUA).",
    ]
    if b["mode"] == "exact":
        lines += [
            "timing: each request at its issue time (what the device saw, after merges).",
            "  iolog v3 timestamps are MICROSECONDS: fio 3.33 reads them so (its docs say ms).",
            "  fio times each iolog request from the one before it, and every wait ends a",
            "  little late, so one long iolog drifts (~3 % here). Each stream's requests",
            f"  are therefore cut into pieces of at most {b['per_segment'] or 'all'} requests,"
            " each its own job",
            "  (NAME.sNNNN), and every piece starts at an absolute time: iolog times are",
            "  us after fio's start (clocksource=cpu: fio's clock starts when fio does),",
            (
                f"  the trace's time 0 at {(b['start_us'] or 0) / 1e6:g} s, so that fio can set "
                "every job up first."
                if len(b["windows"]) == 1
                else "  the trace's time 0 at a stamped base (windows, below)."
            ),
            "  Each log opens with `1 FILE wait 0 0`: fio 3.33 rejects a v3 `wait` (it says",
            "  so once per job on stderr) but takes its time as the reference, so the",
            "  job's first wait counts from fio's start, not from when the job got ready.",
            "  fio sleeps a long wait in 0.5 s steps and never makes up their lateness, so",
            f"  a job that starts later has a startdelay: fio creates it {STARTDELAY_MARGIN_S:g} s"
            " before its first entry, counted from the latest moment fio may finish setting",
            "  up (startdelay counts from then, the iolog times from fio's start).",
            "  No piece inherits the lateness of another. The jobs are in time order.",
            "  Requests that overlapped in the trace go to separate lanes (NAME.lK), since",
            "  a synchronous job issues one at a time. iodepth (async engines) is twice",
            "  the most requests the stream had in flight.",
        ]
        if len(b["windows"]) > 1:
            lines += [
                f"windows: {len(b['jobs'])} pieces > {MAX_JOBS} per fio process, so the trace is",
                f"  replayed by {len(b['windows'])} fio processes (replay.fio, replay.wNNNN.fio)"
                f" of {WINDOW_JOBS} jobs,",
                "  each launched its set-up time before its first piece by `iotape replay run`,",
                "  its jobs without startdelay (fio counts it from a genesis that came seconds",
                "  late in a process started while another replayed). They share",
                "  one clock: clocksource=clock_gettime (CLOCK_MONOTONIC) and iolog times",
                f"  {iolog.MONO_BASE_US} + the trace's us; `replay run` stamps each log's wait",
                "  line with that minus the monotonic us of the trace's 0, so every first wait",
                "  ends at an absolute time. Pieces stay short however long the trace: fio",
                "  times each entry from the previous issue, so a stall delays the rest of a",
                "  piece (fio 3.33 has no absolute time per entry).",
            ]
        lines += [
            "streams: fio's threads all carry fio's name, so a recorder labels the replay",
            "  `other`; `iotape replay run --record` relabels each replayed request with the",
            "  stream of the job whose iolog holds it (plan.json maps jobs to streams).",
        ]
    else:
        lines += [
            f"synthetic: each stream fitted per {b['window_ns'] / 1e9:g} s window, reads and",
            "  writes apart: rate (bytes/s, so a size mix runs at its request rate), bssplit,",
            "  iodepth from the most requests in flight, fsync = writes per flush. Discards",
            "  are not replayed in this mode (fio cannot mix trims into a read/write job).",
            "locality: the request order and offsets are fio's own; what is kept is each",
            "  stream's popularity and reuse (its LRU hit-ratio curve), footprint and",
            "  sequential share. random_distribution is, per stream, whichever of two fio",
            "  distributions reproduced its LRU curve better in a simulation of fio's picks:",
            "  zipf:THETA:0 (hot blocks scattered by fio's hash; centre 0 gives every",
            "  window the same rank -> block map, so the hot set lasts across windows) or",
            "  zoned_abs per window (zones of ~1 % of the window's accesses where they fell,",
            "  0 % zones over untouched stretches: positions kept, a moving hot spot",
            "  followed, uniform inside a zone). bssplit's 0 % entry of the stream's",
            "  smallest size fixes fio's offset block. percentage_random = 100 - the",
            "  window's share of requests that start where the previous one ended (a",
            "  window above 95 % is a sequential job). iotape replay fidelity says how",
            "  close the replay's LRU curve came.",
        ]
        for name, m in sorted(b["models"].items()):
            how = f"zipf theta {m.theta:g}" if m.kind == "zipf" else "zoned_abs"
            how += "" if opts.locality == "auto" else f" (--locality {opts.locality})"
            gaps = ", ".join(f"{k} {v:.1f} pp" for k, v in sorted(m.gap_pp.items()))
            lines.append(f"  {name}: {how}, block {m.gran} (simulated largest LRU gap: {gaps})")
    if b.get("mode_reason"):
        lines.append(b["mode_reason"])
    lines.append(f"time scale: {opts.time_scale:g} (durations x {opts.time_scale:g})")
    lines.append(f"offsets: --remap {opts.remap}, aligned to each target's logical block size")
    if sc:
        lines += [
            f"scaling: {sc.describe()}",
            "  per-database streams go to each database's target; transactional streams",
            "  (db-read, db-write, log-*) at x (N/K)/(N0/K0) of one database's share,",
            "  maintenance (bdm-read) at its per-database rate, replication by extra copies.",
        ]
        for s in sorted({j.stream for j in jobs}):
            lines.append(f"  {s}: x {scale.factor(s, sc):.4g} of the trace's rate per database")
    for (path, db), (base, size) in sorted(b["spans"].items()):
        lines.append(f"target db{db}: {path} bytes {base}..{base + size}")
    lines += [f"note: {n}" for n in src.notes]
    return "".join(f"; {ln}\n" for ln in lines)


def _startdelay_us(job: Job, start_us: int | None, window: Window) -> int:
    """When fio should create the job's thread, or 0 for a job that starts early.

    The iolog's times count from fio's clock zero (its start), but `startdelay`
    counts from fio's genesis, which fio sets only once every job's files are set
    up: up to `start_us` later (the plan budgets that long for set-up). Measured
    on a 60 s trace of 2,000 jobs, genesis came ~1.6 s after the clock's zero, so
    a job created STARTDELAY_MARGIN_S before its first entry by genesis' count
    was created after it, released by fio's 100 ms polls and started 0-200 ms
    late (p99 issue error 102 ms). Counting the margin from the latest genesis
    the plan allows keeps every job created at least the margin before its entry.
    A window's genesis is counted from its own launch the same way."""
    if start_us is None or job.entries is None or not len(job.entries[0]):
        return 0
    if start_us == iolog.MONO_BASE_US:
        return 0  # a window: see WINDOW_JOBS
    first = iolog.first_entry_us(iolog.log_time_us(int(job.entries[0][0]), start_us))
    genesis = start_us + window.launch_us + window.start_us
    return max(0, first - genesis - int(STARTDELAY_MARGIN_S * 1e6))


def jobfile_text(opts: PlanOptions, b: dict, window: Window | None = None) -> str:
    """The job file of one window, or of b["jobs"] (all of them, or one host's)
    timed as the first window."""
    windows: list[Window] = b["windows"]
    window = window or Window(0, b["jobs"], windows[0].start_us, windows[0].launch_us)
    shared = len(windows) > 1
    out = [
        header_text(opts, b),
        f"; window {window.index + 1} of {len(windows)}: {len(window.jobs)} jobs, fio launched"
        f" at {window.launch_us / 1e6:+.3f} s of the trace\n"
        if shared
        else "",
        "\n[global]\n",
        f"ioengine={opts.engine}\n",
        "direct=1\n",
        "thread=1\n",
        f"clocksource={CLOCKSOURCE_SHARED if shared else CLOCKSOURCE}\n",
        # Every target exists before fio starts (`replay run` checks, and creates
        # a --create-file file): a missing one is an error, never a new file.
        "allow_file_create=0\n",
        # fio drops the target's page cache each time a job opens its file, i.e. at
        # every piece's start: BLKFLSBUF on a block device, which syncs the device
        # and drains every CPU's page lists while the other pieces' requests run.
        # With direct I/O there is no cache to drop.
        "invalidate=0\n",
    ]
    # Per-I/O latency logs (log_avg_msec=0 logs every request), beside the results.
    lat = "results/lat" + (f".w{window.index:04d}" if shared else "")
    out += [f"write_lat_log={lat}\n", "log_offset=1\n"]
    for job in window.jobs:
        out.append(f"\n; {job.stream} of db{job.db}: {job.requests} requests\n[{job.name}]\n")
        if job.entries is not None:
            out.append(f"read_iolog=iologs/{job.name}.log\n")
            delay = _startdelay_us(job, b.get("start_us"), window)
            if delay:
                out.append(f"startdelay={delay}us\n")
        out += [f"{k}={v}\n" for k, v in job.options.items()]
    return "".join(out)


def _anchor(b: dict) -> tuple[str, str] | None:
    """fio's own replay of the same requests: every entry in one iolog, run with
    read_iolog defaults (plus direct=1, so the device sees the I/O, not the page cache)."""
    parts = [j for j in b["jobs"] if j.entries is not None]
    if not parts:
        return None
    t = np.concatenate([j.entries[0] for j in parts])
    order = np.argsort(t, kind="stable")
    files = np.concatenate([np.full(len(j.entries[0]), i) for i, j in enumerate(parts)])[order]
    cols = [np.concatenate([j.entries[k] for j in parts])[order] for k in range(4)]
    names = [j.target for j in parts]
    uniq = sorted(set(names))
    head = [iolog.HEADER + "\n"] + [f"1 {p} add\n" for p in uniq] + [f"1 {p} open\n" for p in uniq]
    body = [
        f"{ts + iolog.T0_US} {names[fi]} {iolog.ACTIONS[a]} {o} {n}\n"
        for ts, fi, a, o, n in zip(
            *(c.tolist() for c in [cols[0], files, cols[1], cols[2], cols[3]]), strict=True
        )
    ]
    end = int(cols[0][-1]) + iolog.T0_US
    tail = [f"{end} {p} close\n" for p in uniq]
    job = (
        "; fio's own plain replay of the same requests, the anchor for `iotape replay fidelity`:\n"
        "; one iolog, read_iolog defaults (psync, iodepth 1),\n"
        "; direct=1 so the device sees the I/O.\n"
        "[plain]\nread_iolog=anchor.log\ndirect=1\nallow_file_create=0\n"
    )
    return job, "".join(head + body + tail)


def manifest(opts: PlanOptions, b: dict) -> dict:
    src: Source = b["src"]
    tw: dict[str, bool] = {}
    for j in b["jobs"]:
        tw[j.target] = tw.get(j.target, False) or j.writes
    reach = _reach(b["jobs"])
    return {
        "format": PLAN_FORMAT,
        "version": PLAN_VERSION,
        "trace": str(Path(opts.trace).resolve()),
        "mode": b["mode"],
        "mode_reason": b.get("mode_reason"),
        "jobfile": "replay.fio",
        "anchor": "anchor.fio" if any(j.entries is not None for j in b["jobs"]) else None,
        "duration_s": src.duration_ns / 1e9 * opts.time_scale + b["windows"][0].start_us / 1e6,
        "time_scale": opts.time_scale,
        "requests_per_job": b.get("per_segment") or None,
        "remap": opts.remap,
        "scaling": b["scaling"].__dict__ if b["scaling"] else None,
        "targets": [
            {
                "path": p,
                "kind": t.kind,
                "writes": tw.get(p, False),
                "block_size": t.block,
                "size": t.size,
                "create_bytes": t.create,
                "reach_bytes": reach.get(p, 0),
            }
            for p, t in sorted(b["probed"].items())
        ],
        "windows": [
            {"jobfile": w.jobfile, "launch_us": w.launch_us, "jobs": len(w.jobs)}
            for w in b["windows"]
        ]
        if len(b["windows"]) > 1
        else None,
        "jobs": [
            {
                "name": j.name,
                "target": j.target,
                "stream": j.stream,
                "db": j.db,
                "requests": j.requests,
            }
            for j in b["jobs"]
        ],
    }


def plan(opts: PlanOptions) -> dict:
    """Build the plan and, unless dry_run, write JOBDIR whole (or nothing). Returns
    the manifest, with "jobfile_text" added."""
    b = build(opts)
    texts = {w.jobfile: jobfile_text(opts, b, w) for w in b["windows"]}
    text = "".join(
        (f"\n; ---- {name} ----\n" if k else "") + t for k, (name, t) in enumerate(texts.items())
    )
    man = manifest(opts, b)
    if opts.dry_run:
        return {**man, "jobfile_text": text}
    if opts.jobdir is None:
        raise IotapeError("no job directory: give -o JOBDIR")
    jobdir = Path(opts.jobdir)
    if jobdir.exists():
        if not jobdir.is_dir():
            raise IotapeError(f"{jobdir}: exists and is not a directory")
        if any(jobdir.iterdir()) and not (opts.force and (jobdir / "plan.json").exists()):
            raise IotapeError(f"{jobdir}: not empty; pass --force to replace an earlier plan")
    parent = jobdir.resolve().parent
    if not parent.is_dir():
        raise IotapeError(f"{jobdir}: directory {parent} does not exist")
    tmp = Path(tempfile.mkdtemp(prefix=f".{jobdir.name}.", dir=parent))
    try:
        (tmp / "iologs").mkdir()
        (tmp / "results").mkdir()
        stamped = len(b["windows"]) > 1
        for j in b["jobs"]:
            if j.entries is not None:
                iolog.write(
                    tmp / "iologs" / f"{j.name}.log",
                    hosts.local_path(j.target),
                    *j.entries,
                    start_us=b["start_us"],
                    stamped=stamped,
                )
        if b["hosts"]:
            per_host = {
                h: jobfile_text(opts, {**b, "jobs": hosts.host_jobs(b["jobs"], h)})
                for h in b["hosts"]
            }
            parts = hosts.write_parts(tmp, jobdir.resolve(), b["hosts"], per_host, b)
            man.update(hosts=parts, jobfile=None, anchor=None)
        else:
            for name, t in texts.items():
                (tmp / name).write_text(t)
        anchor = _anchor(b) if not b["hosts"] else None
        if anchor:
            (tmp / "anchor.fio").write_text(anchor[0])
            (tmp / "anchor.log").write_text(anchor[1])
        (tmp / "plan.json").write_text(json.dumps(man, indent=2) + "\n")
        os.chmod(tmp, 0o755)
        if jobdir.exists():
            shutil.rmtree(jobdir)
        os.replace(tmp, jobdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {**man, "jobfile_text": text}
