"""Demand-driven long thinks of a dependent plan (`replay plan --timing dependent
--long-thinks demand`, the default; docs/replay.md "Long thinks on demand").

A think time over LONG_THINK_NS (crossedges.py) of a thread that waits long for
others (crossedges.waits_long: not on its own clock, not the host's rare stalls)
is a wait for another thread's demand. Where a recorded wake says the thread
was woken promptly before it issued (within PROMPT_NS, wakeedges.py), the wait
ended on that wake and a replay keeps it. Otherwise the wait ended on a timer or
a poll, which leaves no wake record: the engine's log writer, woken by a lazy
commit, sleeps out its 3 ms lazy-flush timer before it writes; its page flusher
polls every 5 ms for the sessions' progress. How long such a timer runs is the
recording device's, not the application's: on a device whose requests take
microseconds the demand that ends the wait (a durable commit, the sessions'
dirty pages) comes long before the timer would (the engine on the SSD-like
device commits every ~100 us; its sessions wake the flusher themselves). So the
request is issued when its demand is there plus the thread's own short think
(the median of its think times under LONG_THINK_NS: the CPU between its
requests), never later than its recorded think:

- woken by another, I/O-bound submitter T (crossedges.paces; after its own
  predecessor completed) but issued
  later than PROMPT_NS after the wake (a demand, then a timer): it waits for T's
  latest completion before the wake, the think counted from it being T's time to
  the wake (T's own short think where that was itself over LONG_THINK_NS) plus
  the thread's short think;
- not woken (a timer or a poll with nothing to say what it waited for): its
  anchor stays (its own predecessor, or hfplayer's long-think edge: the latest
  completion of an I/O-bound thread before it), the think becomes its short think;
- woken promptly by T (a wake edge) whose latest completion before the wake was
  more than LONG_THINK_NS before it (T itself waited on a timer in between): the
  think counted from that completion becomes T's short think plus the wake-to-issue.

Never later than recorded, on any target: a think on demand is no longer than
the one it replaces, and where a demand wake's waker takes the place of the
request's recorded anchor (a long-think or wake edge to another request), a
replay may bring that waker's completion later than the anchor, so the plan
keeps the recorded plan's way beside it and the runner takes the earlier of the
two (`or` in the job's log: dependent.py, replayer/src/deps.c). Without it, the
requests so anchored went up to 0.8 ms later than with `--long-thinks
recorded` on the critical path of kept HDD-like traces (docs/benchmarks.md).

A timer's rest. The engine's log writer sets its lazy-flush timer when a lazy
commit comes in while a write is in flight; when the write completes, it sleeps
out what is left of the timer (0-12 ms on the HDD-like device: the timer less the
write's own time), woken by the timer, by no submitter. So a think between the
runner's spin line (thinkcal.LINE_NS) and LONG_THINK_NS of a thread that waits
long is the same timer where nothing but its own predecessor anchors it, no wake
by another submitter came since that completed, and the thread slept again after
its wake-up (its sched record: more than one run on a CPU since its previous
issue; one run is CPU time, kept as recorded): it becomes the thread's short
think, as a poll above. Only with sched records (recorded with the wakes): without
them a sleep and the thread's own CPU time look alike. On a kept 30,000-operation
HDD-like trace the log writer had 673 such thinks, 0.71 s of the calibrated
plan's 1.96 s critical path, where the engine's own run on the SSD-like device
showed 9 (docs/benchmarks.md "A timer's rest").

Only in a trace with wake records (`iotape record --wakes`): without them a wait
that a wake ended and one that a timer ended look alike, and the plan keeps its
long thinks as recorded. Every request still waits for its own predecessor
(the runner counts any issued before it). What it costs: a timer that a slow
target would have run out (the demand taken to come at once), and a genuine
long think (a user's, a rate limiter's) of a thread that waits long often, are
replayed short; `--long-thinks recorded` keeps them as recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replayer.plan import thinkcal
from replayer.plan.crossedges import LONG_THINK_NS, paces, waits_long
from replayer.plan.options import PlanOptions
from replayer.plan.wakeedges import PROMPT_NS, Wakes, latest_wakes, waker_completions

# A think on demand: (was ns, now ns, at a demand wake, the recorded plan's way
# where a demand edge takes the place of its anchor: (the other thread's request
# it waited for and the think after it; -1 for none: its own predecessor's and
# think), else None)
Replaced = tuple[int, int, bool, tuple[int, int] | None]

MODES = ("demand", "recorded")
BIG = np.iinfo(np.int64).max


@dataclass
class Demand:
    """Think times replaced: request i now waits also for request j (-1: no
    other request than before) and thinks think_ns after the latest of what it
    waits for; was_ns its think before."""

    i: np.ndarray
    j: np.ndarray
    think_ns: np.ndarray
    was_ns: np.ndarray
    woken: np.ndarray  # bool per replaced think: a demand wake (then a timer) anchors it


def short_thinks(start: np.ndarray, thread: np.ndarray, own: np.ndarray) -> dict[int, int]:
    """Each thread's short think: the median of its think times under
    LONG_THINK_NS (0 where it has none)."""
    out: dict[int, int] = {}
    for u in np.unique(thread).tolist():
        t = own[(thread == u) & (own <= LONG_THINK_NS)]
        out[int(u)] = int(np.median(t)) if len(t) else 0
    return out


def _per(thread: np.ndarray, value: dict[int, int]) -> np.ndarray:
    """value[t] for each thread t (0 where it has none)."""
    keys, inv = np.unique(thread, return_inverse=True)
    per = np.array([value.get(int(k), 0) for k in keys.tolist()], np.int64)
    return per[inv].reshape(len(thread))


def demand_thinks(
    start: np.ndarray,
    end: np.ndarray,
    thread: np.ndarray,
    own: np.ndarray,
    edge_j: np.ndarray,
    edge_gap: np.ndarray,
    wakes: Wakes,
    runs: np.ndarray | None = None,
) -> Demand:
    """The long thinks replaced (module doc). Per request: `own`, its think after
    its own predecessor (int64 max without one); `edge_j`/`edge_gap`, the
    cross-thread edge it has (-1 for none) and its think after it; `runs`, its
    thread's runs on a CPU since its previous issue (schedsplit.py; -1 where it
    has no sched record; None: no sched records, no timer's rest)."""
    n = len(start)
    think = np.where(edge_j >= 0, edge_gap, own)
    short = short_thinks(start, thread, own)
    sh = _per(thread, short)
    waiting = np.zeros(n, bool)
    pacers: set[int] = set()
    for u in np.unique(thread).tolist():
        rows = np.flatnonzero(thread == u)
        waiting[rows] = waits_long(start[rows], own[rows])
        if paces(start[rows], own[rows]):
            pacers.add(int(u))
    at, by = latest_wakes(start, thread, own, wakes)
    jw = waker_completions(end, thread, at, by)
    # a demand comes from an I/O-bound thread, as the long-think rule's anchors
    # (crossedges.paces): a thread on its own clock (the engine's maintenance
    # reads) or one that mostly thinks long would tie the request to its pace
    paced = np.isin(by, np.fromiter(pacers, np.int64, len(pacers)))
    jw = np.where((jw >= 0) & (start[np.maximum(jw, 0)] < start) & paced, jw, -1)
    prompt = (at >= 0) & (start - at <= PROMPT_NS)
    new_j = np.full(n, -1, np.int64)
    new_t = think.copy()
    woken = np.zeros(n, bool)
    # long: since its own completion (a short edge inferred from timing inside a
    # long wait that no wake ended is a coincidence the wake records rule out)
    long = waiting & ((think > LONG_THINK_NS) | ((own > LONG_THINK_NS) & (own < BIG)))
    sh_by = _per(by, short)
    # woken, then a timer: the demand is the waker's completion before the wake
    d = long & ~prompt & (jw >= 0)
    lead = at - end[np.maximum(jw, 0)]
    lead = np.where(lead > LONG_THINK_NS, sh_by, lead)
    new_j[d] = jw[d]
    new_t[d] = lead[d] + sh[d]
    woken[d] = True
    # not woken promptly and no demand to anchor it: a timer or a poll; its anchor stays
    # (with an anchor: a thread's first request without an edge keeps its recorded time)
    t = long & ~d & ~prompt & ((own < BIG) | (edge_j >= 0))
    new_t[t] = sh[t]
    # woken promptly by a thread that had itself waited long since its completion
    w = waiting & prompt & (edge_j >= 0) & (edge_j == jw) & (think > LONG_THINK_NS)
    w &= at - end[np.maximum(jw, 0)] > LONG_THINK_NS
    new_t[w] = sh_by[w] + (start - at)[w]
    # a timer's rest: slept again after its wake-up, woken by no submitter
    rest = np.zeros(n, bool)
    if runs is not None:
        rest = waiting & ~long & (edge_j < 0) & (at < 0) & (runs >= 2)
        rest &= (own > thinkcal.LINE_NS) & (own <= LONG_THINK_NS)
        new_t[rest] = sh[rest]
    # never later than recorded: the think from the new anchor (a demand wake's
    # waker, else the one it had) as the trace has it
    cap = np.where(d, np.minimum(own, start - end[np.maximum(jw, 0)]), think)
    new_t = np.minimum(new_t, cap)
    done = (d | t | w | rest) & (new_t < cap)
    i = np.flatnonzero(done)
    return Demand(i, new_j[i], new_t[i], cap[i], woken[i])


def or_ways(
    thinks: dict[int, Replaced], base: dict[int, list[int]], own_ns: np.ndarray,
    rq: np.ndarray | None, f: np.ndarray, at: np.ndarray, opts: PlanOptions,
) -> dict[int, str]:  # fmt: skip
    """A demand edge in place of the recorded anchor: `or` the recorded plan's way
    (row -> AFTER THINK), whichever comes first (deps.c), so that waiting for a
    demand that the replay brings later than the recorded anchor never makes the
    request later than the recorded plan would. Its think as the request's own:
    less its run-queue wait (`rq`), a short one x its calibration factor (`f`)."""
    out = {}
    for i, (_, _, _, bound) in thinks.items():
        if bound is None:
            continue
        was = base[i] + ([bound[0]] if bound[0] >= 0 else [])
        gap = bound[1] if bound[0] >= 0 else int(own_ns[i])
        if rq is not None and was and rq[i] < gap:  # as schedsplit.net
            gap -= int(rq[i])
        if was and gap < thinkcal.LINE_NS:  # as thinkcal.Applied.scale
            gap = round(gap * f[i])
        t = round(gap * opts.think_scale * opts.time_scale / 1000)
        out[i] = f"{','.join(map(str, was))} {t}" if was else f"- @{at[i]}"
    return out
