"""Exact mode's layout for long traces: lanes, each a fio job for the whole
trace whose every request waits until an absolute time.

fio 3.33 times a version-3 iolog entry from the previous issue, and its
catch-up (`time_offset`) compares a sleep with the whole gap rather than with
what it asked to sleep, so a long v3 job drifts by ~10 us a request and never
wins back a stall (measured: a lane of 80 requests/s was 3 ms late after 5 s).
Pieces of 32 requests each started at an absolute time (exact.segments) bound
that, but fio takes at most 4,096 jobs, so past MAX_JOBS pieces the pieces
grow with the trace. A lane's log is version 2 instead, whose `wait` sleeps
until a millisecond since fio's genesis (iolog.lines_v2): no lateness carries
over from one request to the next, however long the trace, and the job count
no longer grows with it. What it costs: fio wakes at the millisecond plus the
sub-millisecond phase the job had reached, so each request is issued within
~1 ms of its time (uniformly) where a short piece hits it within tens of us.

A stream's requests are dealt to just enough lanes that a lane's consecutive
requests are at least GAP_US apart and never overlapped in the trace (Lanes):
a slow request (a synchronous job waits for it) or a stall then makes at most
the lane's next request late.

An asynchronous submitter (it kept more than one request in flight) that is
busier than ASYNC_MIN_IOPS goes to one async lane instead (NAME.aK,
ioengine=io_uring): iotape-lanes runs it as one thread and one io_uring that
submits each request at its time without waiting for the ones before it, up to
ASYNC_HEADROOM x the most the submitter had in flight (replayer/src/async.c).
Synchronous lanes 20 ms apart would take 8,000 threads for a 400k-IOPS
submitter (capped at MAX_LANES: 2,000 threads on 2 vCPUs replayed 92k of 398k
IOPS); the async lane is one thread, as the recorded application's was. Once a
stream piece is async it stays so for the rest of the trace (a plan read in
chunks decides chunk by chunk). --lanes sync|async forces either. Dependent
plans (--timing dependent/afap: dependent.py, deps.c) are not lanes: each
request waits for its predecessors' completion on a thread of its own.
"""

from __future__ import annotations

import heapq

import numpy as np

from replayer.plan import iolog
from replayer.plan.model import Job

# The least time between a lane's consecutive requests (see the module doc).
GAP_US = 20_000
# The trace's 0 this long after fio's genesis (+ LANE_START_PER_JOB_S a lane):
# genesis comes before fio creates its jobs, each then setting itself up.
START_S = 0.5
START_PER_JOB_S = 0.002
# iotape-lanes needs far less than fio before the trace's 0: it creates its
# threads, each opening its log and target, and then sleeps to the first time.
# Measured here (2 vCPUs; bench/lanes_start.py: plans of N lanes, each's first
# request at 0, the latest first issue): 2,000 sync lanes 67 ms, 2,000 x 4
# threads 335 ms (~40 us a thread), 2,000 async lanes of depth 96 322 ms (an
# io_uring each). Its start budget: LANES_START_S, then LANES_START_PER_THREAD_S
# a thread, five times the cost measured, so that a loaded machine still makes it.
LANES_START_S = 0.2
LANES_START_PER_THREAD_S = 0.0002
# Requests in flight per lane with an async engine: a device that holds requests
# for up to ASYNC_DEPTH x GAP_US does not hold a lane's issues back.
ASYNC_DEPTH = 4
# At most this many lanes (fio 3.33 refuses more than 4,096 jobs).
MAX_LANES = 2000
# --lanes auto: a stream piece goes to an async lane when it had more than one
# request in flight and ran faster than this (synchronous lanes GAP_US apart
# would take more than 40 threads for it).
ASYNC_MIN_IOPS = 2_000
# An async lane's iodepth: this many times the most its submitter had in flight,
# so that a replay device a little slower than the recorded one does not hold
# the lane's issues back; the lane reports the most it had (max_in_flight).
ASYNC_HEADROOM = 2
# iotape-lanes' limit on an async lane's depth (MAX_ASYNC_DEPTH in lanes.h).
MAX_ASYNC_DEPTH = 4096


class Lanes:
    """Deals requests to lanes, stream piece by stream piece (a stem: NAME of the
    job it came from), as they come in time order, possibly in chunks: each
    request to the stem's lane that has been free longest, if that lane's last
    request is at least gap_us before it and has completed (a synchronous job
    issues one at a time), else to a new lane, up to max_lanes over all stems
    (past it, the lane free soonest: fio takes at most 4,096 jobs)."""

    def __init__(
        self, gap_us: int = GAP_US, max_lanes: int = MAX_LANES, lane_io: str = "auto"
    ) -> None:
        self.gap_us, self.max_lanes, self.lane_io = gap_us, max_lanes, lane_io
        self.free: dict[str, list[tuple[int, int]]] = {}  # stem -> heap of (free at, lane)
        self.lanes: dict[str, int] = {}
        self.total = 0
        # Stems dealt to their async lane from now on: the lane's iodepth.
        self.async_depth: dict[str, int] = {}

    def goes_async(self, stem: str, t_us: np.ndarray, in_flight: int) -> bool:
        """Whether `stem`'s entries (times `t_us`; its submitter had at most
        `in_flight` requests outstanding) go to its async lane: --lanes async,
        or auto and a busy asynchronous submitter (the module doc); once async,
        always."""
        if stem not in self.async_depth and len(t_us):
            span_s = max(int(t_us[-1]) - int(t_us[0]), 1) / 1e6
            busy = in_flight > 1 and len(t_us) / span_s > ASYNC_MIN_IOPS
            if self.lane_io == "async" or (self.lane_io == "auto" and busy):
                self.async_depth[stem] = 0
                self.total += 1
        if stem in self.async_depth:
            depth = min(MAX_ASYNC_DEPTH, ASYNC_HEADROOM * max(in_flight, 1))
            self.async_depth[stem] = max(self.async_depth[stem], depth)
            return True
        return False

    def lane_name(self, stem: str, k: int) -> str:
        """A lane's job name: NAME.gK (synchronous), NAME.aK (async)."""
        return f"{stem}.a{-k - 1:03d}" if k < 0 else f"{stem}.g{k:03d}"

    def deal(
        self,
        stem: str,
        t_us: np.ndarray,
        action: np.ndarray,
        busy_us: np.ndarray,
        in_flight: int = 1,
    ) -> np.ndarray:
        """The lane of each entry: -1 for the stem's async lane (goes_async),
        else its synchronous lane; a sync goes with the request after it (a
        PREFLUSH write's sync just before its write), trailing syncs with the
        request before them."""
        if self.goes_async(stem, t_us, in_flight):
            return np.full(len(t_us), -1, np.int64)
        heap = self.free.setdefault(stem, [])
        lane = np.zeros(len(t_us), np.int64)
        data = action != iolog.SYNC
        for i in np.flatnonzero(data).tolist():
            t = int(t_us[i])
            if heap and (heap[0][0] <= t or self.total >= self.max_lanes):
                k = heapq.heappop(heap)[1]
            else:
                k = self.lanes.get(stem, 0)
                self.lanes[stem] = k + 1
                self.total += 1
            lane[i] = k
            heapq.heappush(heap, (max(t + self.gap_us, t + int(busy_us[i])), k))
        if data.any() and not data.all():
            idx = np.flatnonzero(data)
            nxt = np.minimum(np.searchsorted(idx, np.arange(len(t_us))), len(idx) - 1)
            lane[~data] = lane[idx[nxt]][~data]
        return lane


def split(jobs: list[Job], gap_us: int = GAP_US, lane_io: str = "auto") -> list[Job]:
    """Each exact job dealt to its lanes (NAME.gK, or its async lane NAME.a000),
    every entry exactly once, in time order; jobs without entries, or with syncs
    alone, as they are."""
    out: list[Job] = []
    dealer = Lanes(gap_us, lane_io=lane_io)
    largest = largest_request(jobs)
    for j in jobs:
        if j.entries is None or not (j.entries[1] != iolog.SYNC).any():
            out.append(j)
            continue
        busy = j.busy_us if j.busy_us is not None else np.zeros(len(j.entries[0]), np.int64)
        lane = dealer.deal(j.name, j.entries[0], j.entries[1], busy, j.in_flight)
        for k in np.unique(lane).tolist():
            sel = lane == k
            t, a, o, b = (c[sel] for c in j.entries)
            out.append(
                Job(dealer.lane_name(j.name, k), j.target, j.stream, j.owner,
                    lane_options(j, dealer.async_depth.get(j.name) if k < 0 else None),
                    int((a != iolog.SYNC).sum()), j.writes, (t, a, o, b), k)
            )  # fmt: skip
    set_buffer_size(out, largest)
    return out


def set_buffer_size(jobs: list[Job], largest: int) -> None:
    """`bs` of every lane: the plan's largest request. fio sizes a job's buffers by
    its `bs` and, reading a log in chunks (read_iolog_chunked), frees and
    reallocates them when a larger request turns up, under the requests in
    flight (fio 3.33 aborted with a corrupted heap on a libaio replay)."""
    for j in jobs:
        if j.entries is not None:
            j.options["bs"] = str(max(largest, 512))


def largest_request(jobs: list[Job]) -> int:
    return max((int(j.entries[3].max(initial=0)) for j in jobs if j.entries is not None), default=0)


def lane_options(j: Job, async_depth: int | None = None) -> dict[str, str]:
    """A lane's options: an async lane (`async_depth`) io_uring at that depth;
    else with an async engine ASYNC_DEPTH in flight, so that a lane keeps issuing
    on time while the device holds its earlier requests (a synchronous lane
    waits for each)."""
    o = dict(j.options)
    if async_depth is not None:
        o["ioengine"] = "io_uring"
        o["iodepth"] = str(async_depth)
        return o
    o["iodepth"] = "1" if o.get("iodepth", "1") == "1" else str(ASYNC_DEPTH)
    return o


def start_us(n_jobs: int) -> int:
    """Where the trace's 0 falls, in us after fio's genesis."""
    return int((START_S + START_PER_JOB_S * n_jobs) * 1e6)


def threads(j: Job) -> int:
    """iotape-lanes' threads for lane `j`: one for an async lane (one io_uring),
    else one per request in flight."""
    if j.options.get("ioengine") in ("io_uring", "libaio"):
        return 1
    return int(j.options.get("iodepth", "1"))


def lanes_start_us(jobs: list[Job], fio_start_us: int) -> int:
    """Where iotape-lanes puts the trace's 0, in us after its start (plan.json's
    lanes_start_us): its set-up budget for these lanes, never later than fio's."""
    n = sum(threads(j) for j in jobs)
    return min(fio_start_us, int((LANES_START_S + LANES_START_PER_THREAD_S * n) * 1e6))
