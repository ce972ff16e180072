"""The application's CPU a cycle, spent by the replay: `replay plan --timing
dependent --think-calibrate TARGET_TRACE --cycle-cpu target` (docs/replay.md
"The CPU a cycle").

A synchronous thread's cycle, from one issue to its next, is the request's
service, then the thread's run-queue wait, its CPU (the application's work, its
system calls) and any sleep (a pacing timer, a wait for another thread). A
dependent plan replays the think (the completion to the next issue) as a time.
Where the target's device is served by the host's CPUs (a loop device's worker,
a FUSE disk model) or the application's threads outnumber the CPUs, the
application's CPU decides how fast the requests go and how long each is served,
and a think replayed as a time holds none of it: fio's 8 processes with 100 us
thinks fill this VM's 2 vCPUs and the replay ran x1.23-1.56 fio's IOPS; fio's 2
processes without a think keep both busy beside the loop device's worker and the
replay read in half fio's time (docs/benchmarks.md "The CPU a cycle").

So, per role (thinkcal.py's: the stream and the thread's name), the target
trace's *CPU a cycle*: the mean, over the role's synchronous threads' requests,
of the thread's CPU time since its previous issue (its sched records'
`on_cpu_ns`; the first of each thread has none). A job of the role gets the log
line `cpu US` (before each request iotape-lanes burns its thread's CPU up to US a
cycle since its first: replayer/src/cpubudget.c), and each of its relative
thinks becomes what of it was not CPU: 0 where the think held no sleep (its
sched record's runs since the previous issue: at most one, the wake-up at the
completion), else the think less the source's CPU a cycle for the role (the
sleep; never under 0). Both traces need sched records (recorded with --wakes):
without, a think's CPU cannot be told from its sleep. An asynchronous job (more
than one in flight) and one whose role the target trace has under MIN_CYCLES
cycles of keep thinkcal.py's way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replayer.plan import schedsplit
from schemas import stream_names

MODES = ("target", "recorded")
MIN_CYCLES = 20  # a role's cycles in the target trace needed for its CPU a cycle

Role = tuple[str, str]  # (stream, comm), as thinkcal.Role


def cycles(
    r: np.ndarray, split: schedsplit.SchedSplit, asynchronous: set[tuple[str, int]]
) -> dict[Role, np.ndarray]:
    """Each role's CPU a cycle in records `r` (ns, one per request of a synchronous
    thread with a sched record after its thread's first)."""
    names = stream_names()
    cpu = split.cpu_ns(r)
    sid, tid = r["stream"], r["tid"]
    keep = cpu > 0  # no record, or its thread's first (no cycle before it)
    number = {v: k for k, v in names.items()}
    for name, t in asynchronous:
        n = number.get(name, int(name) if name.isdigit() else -1)
        keep &= ~((tid == t) & (sid == n))
    rows = np.flatnonzero(keep)
    out: dict[Role, np.ndarray] = {}
    sid, comm = sid[rows], r["comm"][rows]
    for s, c in {(int(a), bytes(b)) for a, b in zip(sid.tolist(), comm.tolist(), strict=True)}:
        m = (sid == s) & (comm == c)
        out[(names.get(s, str(s)), c.decode(errors="replace"))] = cpu[rows[m]]
    return out


@dataclass
class Cycle:
    """A job's CPU a cycle: the target's (its `cpu` line) and the source's (taken
    out of its slept thinks), and how many of its thinks kept a sleep (counted as
    the plan goes; thinkcal.Applied counts them all)."""

    target_ns: float
    source_ns: float
    slept: int = 0

    def apply(self, think_ns: np.ndarray, rel: np.ndarray, runs: np.ndarray) -> np.ndarray:
        """`think_ns` with each relative (`rel`) one its time beyond the CPU: 0
        where it held no sleep (`runs`, its thread's runs since its previous issue,
        at most 1), else less the source's CPU a cycle."""
        beyond = np.maximum(think_ns - np.int64(round(self.source_ns)), 0)
        now = np.where(rel, np.where((runs >= 0) & (runs <= 1), 0, beyond), think_ns)
        self.slept += int((rel & (now > 0)).sum())
        return now

    def line(self) -> str:
        """The job's log line (iotape-lanes' cpubudget.c)."""
        return f"cpu {self.target_ns / 1000:.3f}\n"
