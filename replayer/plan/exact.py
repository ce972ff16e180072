"""Exact mode: each stream's requests as fio iologs, cut into short jobs that each
start at an absolute time, and (with --windows) grouped into fio processes."""

from __future__ import annotations

import itertools

import numpy as np

from base.errors import IotapeError
from replayer.hosts import spec as hosts
from replayer.plan import iolog, lanes
from replayer.plan.model import Entries, Job, Slice, Window
from replayer.plan.options import PlanOptions
from replayer.plan.source import FUA, OP, PREFLUSH, max_in_flight

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
# entry (counted from the latest genesis the plan allows: startdelay_us): its
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


def _entries(r: np.ndarray, t_ns: np.ndarray, off: np.ndarray, b: np.ndarray, ts: float) -> Entries:
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


def _busy_us(r: np.ndarray, t_us: np.ndarray, ts: float) -> np.ndarray:
    """Each entry's latency in the trace (us, scaled), in the order _entries gave
    its entries; a PREFLUSH write's added sync counts as busy as its write."""
    lat = r["ts_complete_ns"].astype(np.int64) - np.maximum(
        r["ts_issue_ns"].astype(np.int64), r["ts_queue_ns"].astype(np.int64)
    )
    lat = np.round(np.maximum(lat, 0) * ts / 1000).astype(np.int64)
    if len(t_us) == len(r):
        return lat
    # _entries added syncs and re-sorted by time: a time's latency is its request's.
    return np.zeros(len(t_us), np.int64)


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


def fold_sync_only(jobs: list[Job]) -> list[Job]:
    """fio refuses an iolog with nothing but syncs; such a job's syncs join the
    busiest job on the same target and database (or group log)."""
    out: list[Job] = []
    lonely: list[Job] = []
    for j in jobs:
        if j.entries is not None and not (j.entries[1] != iolog.SYNC).any():
            lonely.append(j)
        else:
            out.append(j)
    for j in lonely:
        peers = [
            p for p in out if p.entries is not None and p.target == j.target and p.owner == j.owner
        ]
        if not peers:
            continue
        host = max(peers, key=lambda p: p.requests)
        assert host.entries is not None and j.entries is not None  # both filtered on it
        t, action, off, b = (
            np.concatenate([x, y]) for x, y in zip(host.entries, j.entries, strict=True)
        )
        order = np.argsort(t, kind="stable")
        host.entries = (t[order], action[order], off[order], b[order])
        host.requests += j.requests
        host.writes = True
    return out


def segments(jobs: list[Job], per_job: int, windows: bool = False) -> tuple[list[Job], int]:
    """Cut each exact job into pieces of at most `per_job` requests, each its own
    job. fio 3.33 times an iolog request from the one before it, and every wait
    ends a little late (5-20 us here, more when the CPU is busy), so a job's
    lateness grows with its length; a job's first request, though, is timed from
    fio's start (iolog.py), the same zero for every job. A piece's error is
    therefore bounded by its own few requests.
    fio takes at most MAX_JOBS jobs: long traces get longer pieces, or with
    `windows` keep their length and run as windows of fio processes (cut_windows)."""
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
            piece = (t[lo:hi], action[lo:hi], off[lo:hi], b[lo:hi])
            reqs = int((piece[1] != iolog.SYNC).sum())
            out.append(
                Job(
                    f"{j.name}.s{k:04d}",
                    j.target,
                    j.stream,
                    j.owner,
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


def setup_us(n_jobs: int, windowed: bool = False, extra_s: float = 0.0) -> int:
    per_job = WINDOW_PER_JOB_S if windowed else START_PER_JOB_S
    return int((START_S + extra_s + per_job * n_jobs) * 1e6)


def _first_us(job: Job) -> int:
    return int(job.entries[0][0]) if job.entries is not None and len(job.entries[0]) else 0


def cut_windows(jobs: list[Job], windows: bool, extra_s: float = 0.0) -> list[Window]:
    """With `windows` and past MAX_JOBS, cut the time-ordered jobs into windows of
    WINDOW_JOBS, each launched its set-up budget before its first piece's first
    request; otherwise one window of them all."""
    out = []
    windowed = windows and len(jobs) > MAX_JOBS
    size = WINDOW_JOBS if windowed else max(len(jobs), 1)
    for k, lo in enumerate(range(0, max(len(jobs), 1), size)):
        part = jobs[lo : lo + size]
        setup = setup_us(len(part), windowed, extra_s)
        first = min((_first_us(j) for j in part), default=0) if k else 0
        out.append(Window(k, part, setup, first - setup))
    return out


def startdelay_us(job: Job, start_us: int | None, window: Window) -> int:
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


def slice_jobs(s: Slice, timing: str, opts: PlanOptions) -> list[Job]:
    """A slice's jobs: FUA writes apart (sync=dsync), and with a synchronous engine
    one job per lane of requests that never overlapped."""
    r, t_ns = s.records, s.t_ns
    fua = ((r["flags"] & FUA) != 0) & (r["op"] == OP["write"])
    # Lanes (lanes.py) keep overlapping requests apart themselves.
    lane_of = (
        _lanes(r, t_ns)
        if opts.engine in SYNC_ENGINES and timing != "none" and opts.layout != "lanes"
        else np.zeros(len(r), np.int64)
    )
    parts = [
        (
            f"{'.fua' if f else ''}{f'.l{k}' if lane_of.max() else ''}",
            (fua == f) & (lane_of == k),
        )
        for f in (False, True)
        for k in range(int(lane_of.max()) + 1)
    ]
    out = []
    for part, sel in parts:
        if not sel.any():
            continue
        in_flight = 1 if timing == "none" else max_in_flight(r[sel], t_ns[sel])
        depth = min(256, 2 * in_flight)
        depth = max(depth, 2 if timing != "none" else 1)
        # A synchronous engine issues one request at a time per job anyway.
        o = {"iodepth": str(1 if opts.engine in SYNC_ENGINES else depth)}
        if part.startswith(".fua"):
            # fio's iolog has no FUA action; O_DSYNC writes are what the
            # kernel turns into FUA writes (or write + flush without FUA).
            o["sync"] = "dsync"
        ent = _entries(r[sel], t_ns[sel], s.offset[sel] + s.base, s.nbytes[sel], opts.time_scale)
        job = Job(s.name + part, s.target, s.stream, s.owner, o, int(sel.sum()), s.writes, ent)
        if opts.layout == "lanes":
            # An async lane holds ASYNC_DEPTH requests at once: a request blocks
            # it for a share of its latency (a 1 s stall in the original would
            # otherwise ask for a lane per request in flight).
            share = 1 if opts.engine in SYNC_ENGINES else lanes.ASYNC_DEPTH
            job.busy_us = _busy_us(r[sel], ent[0], opts.time_scale) // share
            job.in_flight = in_flight
        out.append(job)
    return out


def resolve_layout(opts: PlanOptions, n_requests: int, multi_host: bool) -> str:
    """ "lanes" (lanes.py) with --layout lanes, or with auto where pieces of
    --segment requests would pass MAX_JOBS (one process's pieces would have to
    grow) and neither --windows nor --host is asked for; else "pieces"."""
    if opts.layout == "lanes":
        if opts.windows or multi_host:
            raise IotapeError("--layout lanes runs one fio process: drop --windows / --host")
        return "lanes"
    if opts.layout == "pieces" or opts.windows or multi_host or opts.segment <= 0:
        return "pieces"
    return "lanes" if -(-n_requests // MAX_JOBS) > opts.segment else "pieces"


def plans_lanes(opts: PlanOptions, n_requests: int, multi_host: bool) -> bool:
    """Whether an exact plan of `n_requests` would be lanes (resolve_layout)."""
    if opts.layout == "lanes":
        return not (opts.windows or multi_host)
    return resolve_layout(opts, n_requests, multi_host) == "lanes"


def arrange(
    jobs: list[Job], opts: PlanOptions, multi_host: bool
) -> tuple[list[Job], int, list[Window], int, str]:
    """(pieces or lanes, requests per piece, windows, the iolog times' zero, the
    layout: "pieces" or "lanes") of exact jobs."""
    jobs = fold_sync_only(jobs)
    if opts.layout == "lanes":
        out = sorted(lanes.split(jobs, lane_io=opts.lane_io), key=_first_us)
        start = lanes.start_us(len(out))
        return out, 0, [Window(0, out, start, 0)], start, "lanes"
    jobs, per_segment = segments(jobs, opts.segment, opts.windows)
    if opts.windows and multi_host:
        raise IotapeError("--windows with --host: windows run on one host; drop one")
    wins = cut_windows(jobs, opts.windows, hosts.START_S if multi_host else 0.0)
    # One process: iolog times count from fio's start, the trace's 0 at its
    # set-up budget. Several: from the stamped monotonic base (iolog.py).
    start_us = wins[0].start_us if len(wins) == 1 else iolog.MONO_BASE_US
    return jobs, per_segment, wins, start_us, "pieces"
