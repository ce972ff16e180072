"""A think's time on a CPU replayed warm (`replay plan --timing dependent
--cpu-think warm`; docs/replay.md "CPU time after a long sleep").

A thread that slept long comes back to cold caches: on this host a fixed piece
of work that touches 8-256 KiB takes several times as long after a sleep of
10 ms as after one of 100 us (bench/cold_cpu.py, docs/benchmarks.md "Cold CPU
after a sleep"), and so does the engine's: its sessions use 21-26 us of CPU a
request after the HDD-like device's 5-20 ms waits, 4-5 us after the SSD-like
device's sub-100 us ones. A trace recorded on a slow device thus carries its
threads' cold CPU time in every think; replayed onto a fast device, where the
thread would have slept briefly and stayed warm, that time is too long.

From the sched records (schedsplit.py), each request's cycle since its thread's
previous issue: its time on a CPU and its time asleep. `warm` replays each
think less the CPU time the sleep added: c - c / COLD(sleep), c the cycle's
CPU time but at most the think (after its run-queue wait: the cycle's also
holds the bit before the thread slept, submitting its previous request; in the
engine's HDD-like trace it is longer than the think in 44-48 % of the
sessions' cycles, which then keep think / COLD), COLD the host's cold-to-warm
ratio by sleep (the table below, normalised to a sleep of 100 us: the warm
figure is a thread woken within that, as on a fast device). `recorded` keeps
the CPU time as recorded; a trace without sched records plans as before
whatever the mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replayer.plan import schedsplit
from replayer.plan.options import PlanOptions

MODES = ("recorded", "warm")

# The host's cold-to-warm ratio by the sleep before (us -> ratio), normalised to a
# 100 us sleep: the median over the memory units (8-256 KiB) of bench/cold_cpu.py
# on this host (docs/benchmarks.md "Cold CPU after a sleep"); between points
# linear in log(sleep), beyond them the end's ratio.
COLD_SLEEP_US = np.array([100.0, 300.0, 1_000.0, 3_000.0, 10_000.0, 30_000.0, 100_000.0])
COLD_RATIO = np.array([1.0, 1.0, 1.16, 4.25, 5.43, 12.5, 12.5])


def cold_ratio(sleep_ns: np.ndarray) -> np.ndarray:
    """COLD at each sleep (ns)."""
    us = np.maximum(np.asarray(sleep_ns, np.float64) / 1000.0, 1.0)
    return np.interp(np.log(us), np.log(COLD_SLEEP_US), COLD_RATIO)


def cut_ns(think_ns: np.ndarray, cpu_ns: np.ndarray, sleep_ns: np.ndarray) -> np.ndarray:
    """The CPU time the sleep before each think added to it: its CPU time (the
    cycle's, at most the think) less its warm figure."""
    c = np.minimum(np.asarray(cpu_ns, np.int64), np.asarray(think_ns, np.int64))
    return c - np.round(c / cold_ratio(sleep_ns)).astype(np.int64)


@dataclass
class Cuts:
    """A chunk's requests' thinks less what the recording host added: the
    run-queue wait (`--run-queue net`), then the cold CPU time (`--cpu-think
    warm`); nothing where a mode keeps it, or the thread has no sched record."""

    run_queue_ns: np.ndarray
    cpu_ns: np.ndarray  # the cycle's CPU time (0 with --cpu-think recorded)
    sleep_ns: np.ndarray

    @classmethod
    def of(
        cls, split: schedsplit.SchedSplit | None, r: np.ndarray, opts: PlanOptions
    ) -> Cuts | None:
        if split is None:
            return None
        zero = np.zeros(len(r), np.int64)
        rq = split.run_queue_ns(r) if opts.run_queue == "net" else zero
        cpu, asleep = split.cpu_sleep_ns(r) if opts.cpu_think == "warm" else (zero, zero)
        return cls(rq, cpu, asleep)

    def apply(
        self, think_ns: np.ndarray, waits: np.ndarray, rq: schedsplit.Tally, cpu: schedsplit.Tally
    ) -> np.ndarray:
        """`think_ns` of the requests that `waits` for another's completion less
        both, each counted in its tally."""
        t = rq.net(think_ns, self.run_queue_ns, waits)
        return cpu.net(t, cut_ns(t, self.cpu_ns, self.sleep_ns), waits)

    def one(self, i: int, think_ns: int) -> int:
        """Request i's think `think_ns` (another way's) less both."""
        t = schedsplit.net(np.array([think_ns]), self.run_queue_ns[i : i + 1])
        k = slice(i, i + 1)
        return int(schedsplit.net(t, cut_ns(t, self.cpu_ns[k], self.sleep_ns[k]))[0])


def summary(
    opts: PlanOptions, rq: schedsplit.Tally, cpu: schedsplit.Tally, sched: bool
) -> dict[str, object]:
    """plan.json's word on a dependent plan's stream's thinks less the host's
    (schemas/documents/plan.py); `sched`: whether the trace had sched records."""
    return {
        **rq.summary(opts.run_queue, sched),
        "cpu_think": opts.cpu_think,
        "cpu_think_thinks": cpu.thinks,
        "cpu_think_s": [round(cpu.was_ns / 1e9, 4), round(cpu.now_ns / 1e9, 4)],
    }
