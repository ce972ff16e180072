"""Think time net of the recording host's run-queue wait (`replay plan --timing
dependent --run-queue net`, the default; docs/replay.md "Run-queue wait").

A recorded think runs from the completion of a thread's previous request to its
next issue. Part of it is the recording host's, not the application's: the time
the woken thread waited runnable on a run queue before a CPU took it (the
kernel's `sched_info.run_delay`). A trace recorded with wake records carries a
sched record beside each request (docs/trace-format.md "Sched records"): the
submitter's run-queue wait, over its life, as it issued. The difference between
a thread's record and its previous one is the run-queue wait since its previous
issue; for a synchronous thread that is the wait after its predecessor
completed (the wake) plus any preemption while it thought, which is inside the
think. A dependent plan replays each think less that wait (where the wait is
shorter than the think: net()): the replay's own lanes wait on the target's run
queues instead.

Why this and not more (measured, docs/benchmarks.md "Think time net of the
run-queue wait"): on the HDD-like disk model the engine's sessions' short
thinks average 110-123 us, of which 63-78 us is run-queue wait (the loop
device's worker that completed the request holds the CPU the woken thread was
queued on; a long tail, median 3 us); the rest is mostly the thread's own CPU
time, 24 us a request against 5 us on the SSD-like device. That excess is not
the application's either: in the SSD-like trace the same threads use 13-40 us
after a sleep over 1 ms and 5 us after one under 1 ms (cold caches after a long
sleep), but a trace whose every sleep was long cannot show the warm figure, so
the CPU time stays as recorded (`--think-scale` scales it where the user knows;
`--think-calibrate` takes it from a short recording on the target: thinkcal.py).

Traces without sched records (before format version 4, imported ones,
`--run-queue recorded`) plan exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from recorder.tracefile import open_trace
from recorder.tracefile.format import SCHED_FIELDS

MODES = ("net", "recorded")


@dataclass
class SchedSplit:
    """Per thread, its sched records' times (sorted) and the run-queue wait since
    the thread's previous record (0 for its first); in `runs`, the times it was
    put on a CPU since then (thinkcal.py: a think with one, its wake-up, held no
    sleep)."""

    threads: dict[int, tuple[np.ndarray, np.ndarray]]
    runs: dict[int, np.ndarray] = field(default_factory=dict)
    # its CPU time since its previous record (cpucycle.py: the CPU a cycle)
    cpu: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, records: np.ndarray) -> SchedSplit:
        """From sched records (the trace's dtype; the reader's iter_sched())."""
        return cls._of(*_columns(records))

    @classmethod
    def _of(
        cls, tid: np.ndarray, ts: np.ndarray, rd: np.ndarray, runs: np.ndarray, cpu: np.ndarray
    ) -> SchedSplit:
        o = np.lexsort((ts, tid))
        tid, ts, rd, runs, cpu = tid[o], ts[o], rd[o], runs[o], cpu[o]
        out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        ran: dict[int, np.ndarray] = {}
        used: dict[int, np.ndarray] = {}
        cuts = np.flatnonzero(np.diff(tid)) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(tid)], strict=True):
            if b > a:
                # counters over the thread's life: never less than before (clamped
                # against a damaged record); runs' low 32 bits may wrap
                out[int(tid[a])] = (ts[a:b], np.maximum(np.diff(rd[a:b], prepend=rd[a]), 0))
                ran[int(tid[a])] = np.diff(runs[a:b], prepend=runs[a]) % (1 << 32)
                used[int(tid[a])] = np.maximum(np.diff(cpu[a:b], prepend=cpu[a]), 0)
        return cls(out, ran, used)

    def _match(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per request: whether a sched record of its thread has its ts_queue_ns,
        that record's run-queue wait since the thread's previous one, its runs
        since then (-1 without a record) and its CPU time since then (0 without)."""
        tid = r["tid"].astype(np.int64)
        ts = r["ts_queue_ns"].astype(np.int64)
        hit = np.zeros(len(r), bool)
        wait = np.zeros(len(r), np.int64)
        runs = np.full(len(r), -1, np.int64)
        cpu = np.zeros(len(r), np.int64)
        for u in np.unique(tid).tolist():
            got = self.threads.get(int(u))
            if got is None:
                continue
            rows = np.flatnonzero(tid == u)
            times, waits = got
            k = np.minimum(np.searchsorted(times, ts[rows]), len(times) - 1)
            ok = times[k] == ts[rows]
            hit[rows[ok]] = True
            wait[rows[ok]] = waits[k[ok]]
            if int(u) in self.runs:
                runs[rows[ok]] = self.runs[int(u)][k[ok]]
            if int(u) in self.cpu:
                cpu[rows[ok]] = self.cpu[int(u)][k[ok]]
        return hit, wait, runs, cpu

    def cpu_ns(self, r: np.ndarray) -> np.ndarray:
        """Each request's thread's CPU time since its previous issue (0 where it
        has no sched record)."""
        return self._match(r)[3]

    def runs_of(self, r: np.ndarray) -> np.ndarray:
        """Each request's times on a CPU since its thread's previous issue (-1
        where it has no sched record)."""
        return self._match(r)[2]

    def run_queue_ns(self, r: np.ndarray) -> np.ndarray:
        """Each request's run-queue wait since its thread's previous issue (0 where
        it has no sched record)."""
        return self._match(r)[1]

    def pairs(self, r: np.ndarray) -> int:
        """How many of the requests `r` have a sched record."""
        return int(self._match(r)[0].sum())


def read_split(path: str) -> SchedSplit | None:
    """The trace's sched records, or None where it has none (a file before
    format version 4, or one whose capture wrote none, or not a trace file: an
    imported log or a store run, as wakeedges.read_wakes)."""
    try:
        t = open_trace(path)
    except Exception:  # not a trace file: no sched records
        return None
    with t:
        if not t.has_sched:
            return None
        # the five columns kept, not the 80-byte records: 40 bytes a request
        parts = [_columns(x) for x in t.iter_sched()]
    if not parts:
        return None
    return SchedSplit._of(*(np.concatenate(c) for c in zip(*parts, strict=True)))


def _columns(
    records: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sched records' thread, time, run-queue wait, runs and CPU time so far (int64)."""
    return (
        records["tid"].astype(np.int64),
        records["ts_queue_ns"].astype(np.int64),
        records[SCHED_FIELDS["run_delay_ns"]].astype(np.int64),
        records[SCHED_FIELDS["runs"]].astype(np.int64),
        records[SCHED_FIELDS["on_cpu_ns"]].astype(np.int64),
    )


def net(think_ns: np.ndarray, wait_ns: np.ndarray) -> np.ndarray:
    """Think times less the run-queue wait inside them. A wait as long as the think
    or longer was not all inside it (the thread was preempted while it submitted
    its previous request, before it slept): that think keeps its time, and no
    think becomes 0, which would zero its job's floor, the runner's bound of the
    recording host's other delay (docs/replay.md "Think time net of the host")."""
    return np.where(wait_ns < think_ns, think_ns - wait_ns, think_ns)


@dataclass
class Tally:
    """A slice's thinks replayed less their run-queue wait: how many, and their
    think time before and after (ns)."""

    thinks: int = 0
    was_ns: int = 0
    now_ns: int = 0

    def net(self, think_ns: np.ndarray, wait_ns: np.ndarray, waits: np.ndarray) -> np.ndarray:
        """`think_ns` less `wait_ns` where the request `waits` for another's
        completion (one issued at its recorded time has no think), counted."""
        now = np.where(waits, net(think_ns, wait_ns), think_ns)
        cut = now < think_ns
        self.thinks += int(cut.sum())
        self.was_ns += int(think_ns[cut].sum())
        self.now_ns += int(now[cut].sum())
        return now

    def summary(self, mode: str, sched: bool) -> dict[str, object]:
        """plan.json's word on them (schemas/documents/plan.py)."""
        return {
            "run_queue": mode,
            "sched_recorded": sched,
            "run_queue_thinks": self.thinks,
            "run_queue_think_s": [round(self.was_ns / 1e9, 4), round(self.now_ns / 1e9, 4)],
        }
