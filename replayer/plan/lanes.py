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

A stream's requests are dealt round-robin to just enough lanes that a lane's
consecutive requests are at least GAP_US apart: a slow request (a synchronous
job waits for it) or a stall then makes at most the lane's next request late.
"""

from __future__ import annotations

import numpy as np

from replayer.plan import iolog
from replayer.plan.model import Job

# The least time between a lane's consecutive requests (see the module doc).
GAP_US = 20_000
# The trace's 0 this long after fio's genesis (+ LANE_START_PER_JOB_S a lane):
# genesis comes before fio creates its jobs, each then setting itself up.
START_S = 0.5
START_PER_JOB_S = 0.002


def lane_count(t_us: np.ndarray, gap_us: int = GAP_US) -> int:
    """The fewest lanes that keep round-robin neighbours gap_us apart: the most
    requests in any half-open span of gap_us (request i and i+L then never fall
    in one span)."""
    if not len(t_us):
        return 1
    t = np.sort(np.asarray(t_us, np.int64))
    ahead = np.searchsorted(t, t + gap_us, side="left") - np.arange(len(t))
    return max(1, int(ahead.max()))


def split(jobs: list[Job], gap_us: int = GAP_US) -> list[Job]:
    """Each exact job dealt to its lanes (NAME.gK), every entry exactly once, in
    time order; jobs without entries as they are."""
    out: list[Job] = []
    for j in jobs:
        if j.entries is None:
            out.append(j)
            continue
        t, action = j.entries[0], j.entries[1]
        data = action != iolog.SYNC
        if not data.any():
            out.append(j)
            continue
        # A sync goes with the request after it (a PREFLUSH write's sync just
        # before its write), syncs after the last request with that one.
        nth = np.minimum(np.cumsum(data) - data, int(data.sum()) - 1)
        n = lane_count(t[data], gap_us)
        lane = nth % n
        for k in range(n):
            sel = lane == k
            piece = tuple(c[sel] for c in j.entries)
            reqs = int((piece[1] != iolog.SYNC).sum())
            o = dict(j.options)
            out.append(
                Job(f"{j.name}.g{k:03d}", j.target, j.stream, j.owner, o, reqs, j.writes,
                    (piece[0], piece[1], piece[2], piece[3]), k)
            )  # fmt: skip
    return out


def start_us(n_jobs: int) -> int:
    """Where the trace's 0 falls, in us after fio's genesis."""
    return int((START_S + START_PER_JOB_S * n_jobs) * 1e6)
