"""Cross-thread edges of a dependent plan from the trace's wake records (`iotape
record --wakes`, docs/trace-format.md "Wake records"), where crossedges.py can only
infer them from timing.

A wake record says that thread T (a submitter of traced I/O) woke thread U (one
too) at time w, from task context: a futex or condition-variable wake, not an I/O
completion or a timer (the recorder leaves those out). A request of U issued at t
whose latest wake before t came from T, after U's own previous completion, and
within PROMPT_NS before t, waited for T: the replay has it wait for T's latest
completion before w (what T had done when it woke U), its think time counted from
the later of that completion and its own predecessor's, as in the trace. A
request whose thread was not woken by another submitter since its own previous
completion, or was issued later than PROMPT_NS after the wake (it waited again
after it: the engine's log writer, woken by a session's lazy commit, sleeps out
its lazy-flush timer before it writes; a timer is no wake record), gets no wake
edge (crossedges.py may still give it one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from replayer.plan.crossedges import LONG_THINK_NS
from replayer.plan.deps import latest_before

# A request issued longer than this after its thread's wake waited for something
# else after it: the long-think threshold (crossedges.py). In an HDD-like engine
# trace the sessions issue 13-63 us after the log writer's wake (p10-p90); the
# log writer 12 us after a session's wake at the median, 12 ms at p90 (its lazy
# flush timer); with them, a dependent plan's critical path (no service time)
# was 1.6x that with the wake edges under 2 ms only (an 8 s trace: 994 ms, 634).
PROMPT_NS = LONG_THINK_NS


@dataclass
class Wakes:
    """A trace's wake records, in time order: when, who was woken, by whom."""

    t_ns: np.ndarray  # int64, the trace's clock (as the requests' times)
    wakee: np.ndarray  # int64 tid
    waker: np.ndarray  # int64 tid

    @staticmethod
    def of(parts: Iterable[np.ndarray]) -> Wakes:
        """From wake records (the trace's dtype; reader's iter_wakes())."""
        t, e, r = [], [], []
        for w in parts:
            t.append(w["ts_complete_ns"].astype(np.int64))
            e.append(w["tid"].astype(np.int64))
            r.append(w["offset"].astype(np.int64))
        if not t:
            z = np.empty(0, np.int64)
            return Wakes(z, z, z)
        tt, ee, rr = np.concatenate(t), np.concatenate(e), np.concatenate(r)
        o = np.argsort(tt, kind="stable")
        return Wakes(tt[o], ee[o], rr[o])

    def __len__(self) -> int:
        return len(self.t_ns)


def read_wakes(trace: str) -> Wakes | None:
    """The wake records of the trace at `trace`, or None where it has none (not
    recorded with --wakes, or not a trace file)."""
    from recorder.tracefile import open_trace

    try:
        t = open_trace(trace)
    except Exception:  # an imported log or a store run: no wake records
        return None
    with t:
        if not t.has_wakes:
            return None
        return Wakes.of(t.iter_wakes())


@dataclass
class WakeEdges:
    """Request i waits for request j of the thread that woke it, `gap_ns` after
    j's completion (its issue minus the later of j's and its own predecessor's
    completion); `wake_ns`: when i's thread was woken."""

    i: np.ndarray
    j: np.ndarray
    gap_ns: np.ndarray
    woken: int  # requests issued promptly after another submitter woke their thread
    wake_ns: np.ndarray | None = None


def latest_wakes(
    start: np.ndarray, thread: np.ndarray, own: np.ndarray, wakes: Wakes
) -> tuple[np.ndarray, np.ndarray]:
    """Each request's latest wake by another submitter after its own predecessor
    completed (without one: after its thread's previous issue) and before its
    issue: (when, the waker's tid), -1 for both where none."""
    big = np.iinfo(np.int64).max
    n = len(start)
    at = np.full(n, -1, np.int64)
    by = np.full(n, -1, np.int64)
    if not n or not len(wakes):
        return at, by
    # Only the wakes within the longest think before an issue can be one's: a
    # trace planned in chunks looks at each chunk's own.
    back = int(np.max(np.where(own < big, own, 0), initial=0)) + PROMPT_NS
    lo = np.searchsorted(wakes.t_ns, int(start.min()) - back, side="left")
    hi = np.searchsorted(wakes.t_ns, int(start.max()), side="right")
    t_ns, wakee, waker = wakes.t_ns[lo:hi], wakes.wakee[lo:hi], wakes.waker[lo:hi]
    for u in np.unique(thread).tolist():
        mine = wakee == u
        if not mine.any():
            continue
        wt, wr = t_ns[mine], waker[mine]
        rows = np.flatnonzero(thread == u)
        rows = rows[np.argsort(start[rows], kind="stable")]
        k = np.searchsorted(wt, start[rows], side="right") - 1
        # after its own predecessor completed, or, without one, after its previous issue
        prev = np.concatenate([[-1], start[rows[:-1]]])
        own_u = own[rows]
        lower = np.where(own_u < big, start[rows] - np.minimum(own_u, big // 2), prev)
        w_at = wt[np.maximum(k, 0)]
        ok = (k >= 0) & (w_at > lower)
        at[rows[ok]] = w_at[ok]
        by[rows[ok]] = wr[k[ok]]
    return at, by


def waker_completions(
    end: np.ndarray, thread: np.ndarray, at: np.ndarray, by: np.ndarray
) -> np.ndarray:
    """For each wake (`at`, by thread `by`; -1: none), the waker's latest completion
    before it (a row), -1 where none."""
    jj = np.full(len(at), -1, np.int64)
    for t in np.unique(by[by >= 0]).tolist():
        m = by == t
        rows = np.flatnonzero(thread == t)
        if len(rows):
            jj[m] = latest_before(end, rows, at[m])
    return jj


def wake_edges(
    start: np.ndarray, end: np.ndarray, thread: np.ndarray, own: np.ndarray, wakes: Wakes
) -> WakeEdges:
    """The wake edges of requests (app-side issue `start`, completion `end`, `thread`,
    `own`: the think time after its own predecessor, int64 max without one). An
    edge points to a completion before the request's issue, so to an earlier
    issue: the plan's ids keep every edge backwards."""
    big = np.iinfo(np.int64).max
    e = np.empty(0, np.int64)
    at, by = latest_wakes(start, thread, own, wakes)
    ii = np.flatnonzero((at >= 0) & (start - at <= PROMPT_NS))
    if not len(ii):
        return WakeEdges(e, e, e, 0)
    tt = at[ii]
    jj = waker_completions(end, thread, tt, by[ii])
    has = (jj >= 0) & (start[np.maximum(jj, 0)] < start[ii])
    i, j = ii[has], jj[has]
    gap = start[i] - np.maximum(end[j], np.where(own[i] < big, start[i] - own[i], end[j]))
    return WakeEdges(i, j, np.maximum(gap, 0), len(ii), tt[has])
