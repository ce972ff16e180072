"""Threads on their own clock, learnt from a recording on the target: `replay plan
--timing dependent --think-calibrate TARGET_TRACE` (with `--clock-jobs target`, the
default; docs/replay.md "Threads on their own clock").

Some I/O comes because time passed: the engine's database maintenance reads its
database front to back, 256 KiB 23.6 times a second on an absolute schedule,
whatever the device. A trace holds as many of those requests as its run's length
made, and a dependent replay issues the trace's requests: the engine's SSD-like
trace (0.1 s) holds 2, and its replay onto the HDD-like disk model runs ~45 s at 1
spindle, where the engine's own run there read 1,132 times, each a seek away from
the sessions' pages.

A role (the stream and the thread's name, or its name with digits aside, as
thinkcal.py matches them) is on a clock in the target trace where one thread of it
made at least MIN_REQUESTS plain reads or writes, at a regular period
(crossedges.periodic: the gaps' interquartile range under 0.05 of their median)
while its thinks (issue minus its previous completion) are not regular (the
device's service varied, and the issues kept their beat: a clock's, where a
closed loop's thinks stay and its issues move; a thread whose service and
thinks are both steady, a fio job's on the SSD-like device, shows no clock) and
each (of at least SEQUENTIAL of them) where the one before ended. The plan's
job of that role gets `clock PERIOD_US LO HI`: the median gap there, and where
its requests go on: from the job's first request's offset (LO) to the furthest
byte the plan reaches on its target (HI). iotape-lanes
(replayer/src/clockjob.c) then goes on after the job's last logged request, at
that period, each request where the one before ended, until every other job has
finished. A role on a clock whose requests jump about (not sequential) gets none:
where its next requests would go is not in either trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from replayer.plan import deps, thinkcal
from replayer.plan.crossedges import PERIODIC_CV, periodic
from replayer.plan.source import ACTIONS, lane_action_codes
from schemas import stream_names

MODES = ("target", "recorded")
MIN_REQUESTS = 10
SEQUENTIAL = 0.9

Role = thinkcal.Role


@dataclass
class Clock:
    """A role's clock in the target trace: its period, requests, sequential share."""

    period_ns: int
    requests: int
    sequential: float


def clocks(r: np.ndarray) -> dict[Role, Clock]:
    """The roles of records `r` with a thread on a clock (module doc; of a role's
    threads, the one with the most requests)."""
    names = stream_names()
    start, end = deps.times(r)
    codes = lane_action_codes(r)[1]
    plain = np.isin(codes, [ACTIONS.index("read"), ACTIONS.index("write")])
    key = r["stream"].astype(np.int64) << 32 | r["tid"].astype(np.int64)
    out: dict[Role, Clock] = {}
    for u in np.unique(key[plain & (r["tid"] > 0)]).tolist():
        rows = np.flatnonzero((key == u) & plain)
        if len(rows) < MIN_REQUESTS:
            continue
        rows = rows[np.argsort(start[rows], kind="stable")]
        if not periodic(start[rows]) or _steady(start[rows][1:] - end[rows][:-1]):
            continue
        off = r["offset"][rows].astype(np.int64)
        ends = off + r["bytes"][rows].astype(np.int64)
        seq = float(np.mean(off[1:] == ends[:-1]))
        gaps = np.diff(start[rows])
        comm = bytes(r["comm"][rows[0]]).decode(errors="replace")
        role = (names.get(u >> 32, str(u >> 32)), comm)
        c = Clock(int(np.median(gaps)), len(rows), round(seq, 4))
        if role not in out or out[role].requests < c.requests:
            out[role] = c
    return out


def _steady(thinks: np.ndarray) -> bool:
    """Whether a thread's thinks are regular as a clock's gaps are (periodic's
    rule), or not all after their completions: no evidence of a clock."""
    if not len(thinks) or (thinks <= 0).any():
        return True
    q1, q2, q3 = np.percentile(thinks, [25, 50, 75])
    return bool(q3 - q1 < PERIODIC_CV * q2)


@dataclass
class Decision:
    """A job's clock, or why none."""

    comm: str
    period_us: int | None
    why: str | None
    target: Clock | None

    def summary(self) -> dict[str, Any]:
        t = self.target
        return {"comm": self.comm, "period_us": self.period_us, "why": self.why,
                "target_requests": t.requests if t else 0,
                "target_sequential": t.sequential if t else None}  # fmt: skip


@dataclass
class ClockJobs:
    """The target trace's clocked roles, for a plan."""

    target: dict[Role, Clock]

    def job(self, stream: str, comm: str) -> Decision | None:
        """The clock of the job of `stream` whose thread is `comm`; None where no
        thread of the target trace in its role is on a clock."""
        c = self.target.get((stream, comm))
        if c is None:
            pat = [v for (s, n), v in self.target.items() if s == stream and thinkcal.pattern(n) ==
                   thinkcal.pattern(comm)]  # fmt: skip
            c = max(pat, key=lambda v: v.requests) if pat else None
        if c is None:
            return None
        if c.sequential < SEQUENTIAL:
            return Decision(comm, None, f"not sequential ({c.sequential:.0%})", c)
        return Decision(comm, max(1, round(c.period_ns / 1000)), None, c)


def note(d: dict[str, Any]) -> str:
    """A stream's clocked jobs in a few words (replay.fio's header, `replay plan`)."""
    out = []
    for c in d.get("clock_jobs") or []:
        if c["period_us"] is not None:
            out.append(f"{c['comm']} every {c['period_us']} us until the others finish (the "
                       f"target's {c['target_requests']} on a clock)")  # fmt: skip
        else:
            out.append(f"{c['comm']} only as logged ({c['why']})")
    return f"; on its own clock: {', '.join(out)}" if out else ""
