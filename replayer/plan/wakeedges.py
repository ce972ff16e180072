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


def wake_edges(
    start: np.ndarray, end: np.ndarray, thread: np.ndarray, own: np.ndarray, wakes: Wakes
) -> WakeEdges:
    """The wake edges of requests (app-side issue `start`, completion `end`, `thread`,
    `own`: the think time after its own predecessor, int64 max without one). An
    edge points to a completion before the request's issue, so to an earlier
    issue: the plan's ids keep every edge backwards."""
    big = np.iinfo(np.int64).max
    e = np.empty(0, np.int64)
    n = len(start)
    if not n or not len(wakes):
        return WakeEdges(e, e, e, 0)
    # Only the wakes PROMPT_NS or less before an issue of these requests can be what
    # one waited for: a trace planned in chunks looks at each chunk's own.
    lo = np.searchsorted(wakes.t_ns, int(start.min()) - PROMPT_NS, side="left")
    hi = np.searchsorted(wakes.t_ns, int(start.max()), side="right")
    t_ns, wakee, waker = wakes.t_ns[lo:hi], wakes.wakee[lo:hi], wakes.waker[lo:hi]
    cand_i, cand_w, cand_t = [], [], []
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
        ok = (k >= 0) & (w_at > lower) & (start[rows] - w_at <= PROMPT_NS)
        cand_i.append(rows[ok])
        cand_w.append(wr[k[ok]])
        cand_t.append(wt[k[ok]])
    if not cand_i:
        return WakeEdges(e, e, e, 0)
    ii, ww, tt = np.concatenate(cand_i), np.concatenate(cand_w), np.concatenate(cand_t)
    jj = np.full(len(ii), -1, np.int64)
    for t in np.unique(ww).tolist():
        m = ww == t
        rows = np.flatnonzero(thread == t)
        if len(rows):
            jj[m] = latest_before(end, rows, tt[m])
    has = (jj >= 0) & (start[np.maximum(jj, 0)] < start[ii])
    i, j = ii[has], jj[has]
    gap = start[i] - np.maximum(end[j], np.where(own[i] < big, start[i] - own[i], end[j]))
    return WakeEdges(i, j, np.maximum(gap, 0), len(ii), tt[has])
