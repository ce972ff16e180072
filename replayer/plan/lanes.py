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
# Requests in flight per lane with an async engine: a device that holds requests
# for up to ASYNC_DEPTH x GAP_US does not hold a lane's issues back.
ASYNC_DEPTH = 4
# At most this many lanes (fio 3.33 refuses more than 4,096 jobs).
MAX_LANES = 2000


class Lanes:
    """Deals requests to lanes, stream piece by stream piece (a stem: NAME of the
    job it came from), as they come in time order, possibly in chunks: each
    request to the stem's lane that has been free longest, if that lane's last
    request is at least gap_us before it and has completed (a synchronous job
    issues one at a time), else to a new lane, up to max_lanes over all stems
    (past it, the lane free soonest: fio takes at most 4,096 jobs)."""

    def __init__(self, gap_us: int = GAP_US, max_lanes: int = MAX_LANES) -> None:
        self.gap_us, self.max_lanes = gap_us, max_lanes
        self.free: dict[str, list[tuple[int, int]]] = {}  # stem -> heap of (free at, lane)
        self.lanes: dict[str, int] = {}
        self.total = 0

    def deal(
        self, stem: str, t_us: np.ndarray, action: np.ndarray, busy_us: np.ndarray
    ) -> np.ndarray:
        """The lane of each entry; a sync goes with the request after it (a
        PREFLUSH write's sync just before its write), trailing syncs with the
        request before them."""
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


def split(jobs: list[Job], gap_us: int = GAP_US) -> list[Job]:
    """Each exact job dealt to its lanes (NAME.gK), every entry exactly once, in
    time order; jobs without entries, or with syncs alone, as they are."""
    out: list[Job] = []
    dealer = Lanes(gap_us)
    largest = largest_request(jobs)
    for j in jobs:
        if j.entries is None or not (j.entries[1] != iolog.SYNC).any():
            out.append(j)
            continue
        busy = j.busy_us if j.busy_us is not None else np.zeros(len(j.entries[0]), np.int64)
        lane = dealer.deal(j.name, j.entries[0], j.entries[1], busy)
        for k in range(dealer.lanes[j.name]):
            sel = lane == k
            t, a, o, b = (c[sel] for c in j.entries)
            out.append(
                Job(f"{j.name}.g{k:03d}", j.target, j.stream, j.owner, lane_options(j),
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


def lane_options(j: Job) -> dict[str, str]:
    """A lane's options: with an async engine, ASYNC_DEPTH in flight, so that a
    lane keeps issuing on time while the device holds its earlier requests (a
    synchronous lane waits for each)."""
    o = dict(j.options)
    o["iodepth"] = "1" if o.get("iodepth", "1") == "1" else str(ASYNC_DEPTH)
    return o


def start_us(n_jobs: int) -> int:
    """Where the trace's 0 falls, in us after fio's genesis."""
    return int((START_S + START_PER_JOB_S * n_jobs) * 1e6)
