"""The host's CPU over one of the lab's runs, and what it does to the closed loop.

What a run costs the host, measured from outside the engine (no change to it, no
cost to the run): the CPU of the processes the run waited for (the engine and the
recorder's loader: `getrusage(RUSAGE_CHILDREN)` before and after, the kernel adding
each reaped child's own and its reaped children's time), the array servers' own CPU
(their counters' `cpu_s`, which the lab reads already), and the whole host's busy
time from /proc/stat (every CPU: the loop devices' and FUSE's kernel threads, and
whatever else shares the machine) beside the number of cores.

The model: the host's m cores are a station of the closed loop beside the disks.
Every database read brings the run D seconds of CPU (the baseline's engine,
recorder and array servers over its database reads), so at g times the baseline's
reads the run keeps U = g x (the baseline's run cores) / m of the cores busy. The
session threads' own CPU between reads, c a read (the engine's and the recorder's
CPU over the reads: every thread of theirs counted as the sessions', so c leans
high), waits for a core as a job of an M/M/m queue does: its mean time is
c x E(U), E(U) = 1 + C(m, mU) / (m (1 - U)), C the Erlang C formula (the
probability that a job waits; Kleinrock, Queueing Systems vol. 1, 1975, section
3.5). At the baseline's U the trace's time outside reads already holds that
wait; at the configuration's it holds c x (E(U) - E(U_base)) more a read, which
lengthens every session's cycle (each loop's cycle n_k / (rate_k g_k) at its
predicted gain g_k) and so lowers the gain, which lowers U: the fixed point,
bisected. As U -> 1 the wait grows without bound, so the loop never asks the
cores for more than they have (the utilization law of operational analysis,
Denning & Buzen 1978: throughput <= m / D; `max_gain`).

What it leaves out: the rest of the host's load (other processes, kernel threads:
its busy time less the run's, reported as `other_cores`), which on a shared
machine is not the workload's and changes from one minute to the next (0.03 and
1.0-1.2 cores in two measurements of the same baseline an hour apart); and the
run's CPU per read falling with the load (an array server's per request cost at
10x the reads was a third of the baseline's: batching), so U leans high.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzer.lab.slowqueue import erlang_c


def host_busy_s(text: str | None = None) -> tuple[float, float]:
    """(busy, total) CPU seconds of all CPUs since boot, from /proc/stat's `cpu` line
    (busy: everything but idle and iowait; USER_HZ ticks)."""
    if text is None:
        with open("/proc/stat") as f:
            text = f.read()
    first = next(line for line in text.splitlines() if line.startswith("cpu "))
    ticks = [int(x) for x in first.split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    # guest time is counted inside user and nice already (proc(5))
    total = sum(ticks[:8])
    hz = os.sysconf("SC_CLK_TCK")
    return (total - idle) / hz, total / hz


@dataclass(frozen=True)
class Snapshot:
    children_s: float
    busy_s: float
    wall_s: float

    @staticmethod
    def now() -> Snapshot:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy, _ = host_busy_s()
        return Snapshot(ru.ru_utime + ru.ru_stime, busy, time.monotonic())


def since(before: Snapshot, after: Snapshot | None = None) -> dict[str, Any]:
    """The run's CPU between two snapshots: `children_s` (the processes it waited for),
    `host_busy_s` (all of the host's CPUs), `wall_s` and the host's `cores`."""
    a = after or Snapshot.now()
    return {
        "children_s": a.children_s - before.children_s,
        "host_busy_s": a.busy_s - before.busy_s,
        "wall_s": a.wall_s - before.wall_s,
        "cores": os.cpu_count() or 1,
    }


def stretch(m: int, u: float) -> float:
    """E(U): an M/M/m job's mean time in the system over its service (inf at U >= 1)."""
    if u >= 1:
        return float("inf")
    return 1.0 + erlang_c(m, m * u) / (m * (1 - u))


@dataclass(frozen=True)
class Demand:
    """The baseline's CPU as the model takes it (the module's docstring)."""

    cores: int
    run_cores: float  # the run's CPU (engine, recorder, servers) per second of it
    session_s: float  # c: the engine's and recorder's CPU per database read
    per_read_s: float  # D: the run's CPU per database read
    other_cores: float  # the rest of the host's busy cores (reported, not modelled)

    @property
    def max_gain(self) -> float:
        """The utilization law's bound: m / D over the baseline's reads per second."""
        return self.cores / self.run_cores if self.run_cores > 0 else float("inf")

    def extra_s(self, gain: float) -> float:
        """The session's CPU wait a read at `gain` more than at the baseline's."""
        u0 = self.run_cores / self.cores
        return self.session_s * (stretch(self.cores, gain * u0) - stretch(self.cores, u0))


def demand(host: dict[str, Any] | None, server_s: float, reads: int) -> Demand | None:
    """The baseline's `Demand` from its `host` (`since`), its array servers' CPU
    seconds over the same run (0 where there is none) and its database reads; None
    without a measurement."""
    if not host or reads <= 0 or float(host.get("wall_s", 0)) <= 0:
        return None
    engine = float(host["children_s"])
    wall = float(host["wall_s"])
    run = engine + server_s
    if run <= 0:
        return None
    return Demand(
        cores=int(host["cores"]),
        run_cores=run / wall,
        session_s=engine / reads,
        per_read_s=run / reads,
        # never < 0: the two are read at slightly different moments
        other_cores=max(float(host["host_busy_s"]) - run, 0.0) / wall,
    )


ROUNDS = 40  # bisection steps on the CPU wait (each halves its interval)


def bounded(
    d: Demand, gains: np.ndarray, weight: np.ndarray, cycle_s: np.ndarray
) -> dict[str, Any]:
    """Each loop's gain with the cores' wait added to its cycle, at the fixed point:
    `gains` the loops' predicted gains without it, `weight` their baseline reads (the
    total gain is the weighted mean), `cycle_s` each loop's session cycle a read at
    its gain (its threads over its reads per second). The wait e a read gives gains
    g_k / (1 + e / cycle_k); their total G gives the wait d.extra_s(G); e - extra(G(e))
    rises with e, bisected."""

    def at(e: float) -> tuple[np.ndarray, float]:
        g = gains / (1 + e / np.maximum(cycle_s, 1e-12))
        return g, float((weight * g).sum() / weight.sum()) if weight.sum() else 1.0

    g0, total0 = at(0.0)
    out = {
        "unbounded_gain": total0,
        "max_gain": d.max_gain,
        "cores": d.cores,
        "run_cores": d.run_cores,
        "other_cores": d.other_cores,
        "session_cpu_ms_per_read": d.session_s * 1e3,
        "cpu_ms_per_read": d.per_read_s * 1e3,
        "baseline_utilization": d.run_cores / d.cores,
    }
    if d.extra_s(total0) <= 0:  # no more load than the baseline's: no more wait
        u = total0 * d.run_cores / d.cores
        return out | {"read_throughput_gain": total0, "gains": [float(x) for x in g0],
                      "cpu_wait_ms": 0.0, "utilization": u}  # fmt: skip
    finite = cycle_s[np.isfinite(cycle_s)]
    lo, hi = 0.0, max(float(finite.max()) if len(finite) else 0.0, 1e-6)
    while hi - d.extra_s(at(hi)[1]) < 0 and hi < 1e3:
        lo, hi = hi, hi * 2
    for _ in range(ROUNDS):
        mid = (lo + hi) / 2
        if mid - d.extra_s(at(mid)[1]) < 0:
            lo = mid
        else:
            hi = mid
    g, total = at(hi)
    return out | {
        "read_throughput_gain": total,
        "gains": [float(x) for x in g],
        "cpu_wait_ms": hi * 1e3,
        "utilization": total * d.run_cores / d.cores,
    }
