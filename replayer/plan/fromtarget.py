"""What a recording of the application on the target (`replay plan --timing
dependent --think-calibrate TARGET_TRACE`) tells a dependent plan beyond its
threads' CPU per cycle (thinkcal.py): the I/O the application makes by its own
clock there, which a trace of another device holds too little or none of. A log
writer's timer writes (timerwrites.py, `--timer-writes`) and threads on a clock
(clockjobs.py, `--clock-jobs`), decided per job as the plan makes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replayer.plan import clockjobs, timerwrites
from replayer.plan.options import PlanOptions
from replayer.plan.wakeedges import Wakes


@dataclass
class JobClock:
    """A job's lines from the target: `lazy REST_US`, `clock PERIOD_US LO HI`."""

    lazy_us: int | None = None
    clock_us: int | None = None
    clock_lo: int = 0

    def head(self) -> str:
        """What goes after its log's `open` line."""
        return f"lazy {self.lazy_us}\n" if self.lazy_us is not None else ""

    def tail(self, hi: int) -> str:
        """What goes at its log's end, `hi` the furthest byte the plan reaches on
        its target."""
        if self.clock_us is None or hi <= self.clock_lo:
            return ""
        return f"clock {self.clock_us} {self.clock_lo} {hi}\n"


@dataclass
class FromTarget:
    timer: timerwrites.TimerWrites | None
    clock: clockjobs.ClockJobs | None
    # per slice (its name), per submitter: what was decided (plan.json)
    timers: dict[str, dict[int, timerwrites.Timer]] = field(default_factory=dict)
    clocks: dict[str, dict[int, clockjobs.Decision]] = field(default_factory=dict)

    @classmethod
    def read(
        cls, opts: PlanOptions, wakes: Wakes | None, there: np.ndarray, mine: np.ndarray
    ) -> FromTarget | None:
        """From the --think-calibrate trace's head `there` and the plan's trace's
        `mine` (thinkcal.head: read once for the calibration and for this)."""
        if opts.think_calibrate is None or opts.timing != "dependent":
            return None
        timer = None
        if opts.timer_writes == "target":
            timer = timerwrites.TimerWrites.read(str(opts.think_calibrate), there, mine, wakes)
        clock = None
        if opts.clock_jobs == "target":
            clock = clockjobs.ClockJobs(clockjobs.clocks(there))
        return cls(timer, clock)

    def _clock(self, name: str, stream: str, who: int, comm: str) -> clockjobs.Decision | None:
        """The clock of slice `name`'s submitter `who` (decided once)."""
        mine = self.clocks.setdefault(name, {})
        if who not in mine and self.clock is not None:
            c = self.clock.job(stream, comm)
            if c is None:
                return None
            mine[who] = c
        return mine.get(who)

    def clocked_rows(self, name: str, stream: str, who: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Per row of slice `name`'s records `r` (their submitters `who`), whether its
        submitter goes on a clock."""
        out = np.zeros(len(r), bool)
        if self.clock is None:
            return out
        for u in np.unique(who).tolist():
            rows = who == u
            comm = bytes(r["comm"][np.flatnonzero(rows)[0]]).decode(errors="replace")
            c = self._clock(name, stream, int(u), comm)
            out[rows] = c is not None and c.period_us is not None
        return out

    def job(self, name: str, stream: str, who: int, comm: str, first_offset: int) -> JobClock:
        """A new job's lines (of slice `name`, of `stream`, its submitter `who`, its
        thread `comm`, its first request at `first_offset`)."""
        out = JobClock(clock_lo=first_offset)
        if self.timer is not None:
            t = self.timers.setdefault(name, {})[who] = self.timer.job(stream, comm)
            out.lazy_us = t.rest_us
        c = self._clock(name, stream, who, comm)
        out.clock_us = c.period_us if c is not None else None
        return out

    def summary(self, name: str) -> dict[str, Any]:
        """plan.json's keys for slice `name`."""
        out: dict[str, Any] = {}
        if self.timer is not None:
            out["timer_writes"] = [t.summary() for t in self.timers.get(name, {}).values()]
        if self.clock is not None:
            out["clock_jobs"] = [c.summary() for c in self.clocks.get(name, {}).values()]
        return out


def note(d: dict[str, Any]) -> str:
    return timerwrites.note(d) + clockjobs.note(d)
