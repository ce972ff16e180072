"""A log writer's writes by its own clock, learnt from a recording on the target:
`replay plan --timing dependent --think-calibrate TARGET_TRACE` (with
`--timer-writes target`, the default; docs/replay.md "A log writer's timer").

A log writer writes when a commit waits for it, and also on a timer: a lazy
commit asks for a write within a deadline (ESE's lazy-commit timer, the
engine's --lazy-flush-ms), and at the deadline the writer writes the full log
segments it holds, a write nobody waits for. How many such writes a run makes
is the device's: the engine's log writer on the SSD-like device wrote 1 of 798
log writes by its timer (a durable commit comes within ~100 us and takes every
segment first), on the HDD-like disk model 22 of 130 in a 2.7 s recording (2
spindles). A trace of the fast device holds none of the writes the slow one
makes by the clock, and a dependent replay of it onto the slow device ran +35 %
faster than the engine there at 1 spindle: the timer's writes take the spindle
from the sessions' reads.

In a trace with wake records, a thread's *timer write* is a plain write after
whose completion the thread woke no other submitting thread before its next
request (nobody waited for it) and whose next request does not follow on it
within the runner's spin line (a turn's full segments, then its partial
segment in a write of its own: groupcommit.py's `same-turn`, both of one turn).
A *log writer* is a thread that woke another after at least MIN_WOKE_SHARE of
its writes (committers wait for it; the log file's pre-formatter, which wakes
the writer once a file, is none). Per role (the stream and the thread's name,
or its name with digits aside, as thinkcal.py matches them), where the target
trace's log writer made at least MIN_TIMER_WRITES timer writes, at least
MIN_SHARE of its writes, and more than twice the source trace's share, the
plan's job of that role gets `lazy REST_US`: the median of its timer writes'
rests there (issue minus its own previous completion). iotape-lanes
(replayer/src/lazywrite.c) then writes the job's next full segment each REST_US
its next write still waits. A source that holds the target's timer writes
already (a recording on a device as slow) gets none: they are in its trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replayer.plan import deps, thinkcal
from replayer.plan.source import ACTIONS, lane_action_codes
from replayer.plan.wakeedges import Wakes, read_wakes
from schemas import stream_names

MODES = ("target", "recorded")
MIN_TIMER_WRITES = 5  # a role's timer writes in the target trace needed
MIN_SHARE = 0.02  # of its writes
MIN_WOKE_SHARE = 0.2  # a log writer wakes another after this share of its writes

Role = thinkcal.Role
NOT_A_WRITER = "no log writer of the target trace plays this role"


@dataclass
class Writer:
    """A role's writes in one trace: how many, how many by its timer, and the
    timer writes' rests (ns)."""

    writes: int = 0
    woke: int = 0  # writes after which it woke another submitting thread
    timer: int = 0
    rests: list[np.ndarray] = field(default_factory=list)

    def share(self) -> float:
        return self.timer / self.writes if self.writes else 0.0

    def rest_ns(self) -> int:
        r = np.concatenate(self.rests) if self.rests else np.zeros(0, np.int64)
        return int(np.median(r)) if len(r) else 0

    def is_log_writer(self) -> bool:
        return self.writes > 0 and self.woke >= MIN_WOKE_SHARE * self.writes


def _woke_after(wakes: Wakes, tid: int, done: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """Per write (completion `done`, the thread's next issue `nxt`): whether
    thread `tid` woke another in between."""
    t = wakes.t_ns[(wakes.waker == tid) & (wakes.wakee != tid)]
    return np.searchsorted(t, nxt, "left") > np.searchsorted(t, done, "right")


def writers(r: np.ndarray, wakes: Wakes) -> dict[Role, Writer]:
    """Each role's writes in records `r` with its wake records (module doc)."""
    names = stream_names()
    start, end = deps.times(r)
    plain = lane_action_codes(r)[1] == ACTIONS.index("write")
    out: dict[Role, Writer] = {}
    key = r["stream"].astype(np.int64) << 32 | r["tid"].astype(np.int64)
    for u in np.unique(key[plain & (r["tid"] > 0)]).tolist():
        rows = np.flatnonzero(key == u)
        rows = rows[np.argsort(start[rows], kind="stable")]
        if len(rows) < 2:
            continue
        w = rows[:-1]  # each request but the last, and the thread's next one
        nx = rows[1:]
        done, nxt = end[w], start[nx]
        woke = _woke_after(wakes, u & 0xFFFFFFFF, done, nxt)
        off, size = r["offset"][w].astype(np.int64), r["bytes"][w].astype(np.int64)
        turn = (r["offset"][nx].astype(np.int64) == off + size) & (nxt - done < thinkcal.LINE_NS)
        mine = plain[w]
        timer = mine & ~woke & ~turn
        prev_done = np.r_[0, end[rows[:-2]]] if len(rows) > 2 else np.zeros(1, np.int64)
        rest = start[w] - prev_done
        rest_ok = timer & (np.arange(len(w)) > 0) & (rest > 0)
        comm = bytes(r["comm"][rows[0]]).decode(errors="replace")
        role = (names.get(u >> 32, str(u >> 32)), comm)
        x = out.setdefault(role, Writer())
        x.writes += int(mine.sum())
        x.woke += int((mine & woke).sum())
        x.timer += int(timer.sum())
        x.rests.append(rest[rest_ok])
    return out


def _match(there: dict[Role, Writer], stream: str, comm: str) -> tuple[Writer | None, str]:
    """The role's writer in `there`: by its name, else by its name's pattern
    (pooled), and how."""
    if (stream, comm) in there:
        return there[(stream, comm)], "comm"
    pat = [w for (s, c), w in there.items() if s == stream and thinkcal.pattern(c) ==
           thinkcal.pattern(comm)]  # fmt: skip
    if not pat:
        return None, ""
    pooled = Writer()
    for w in pat:
        pooled.writes += w.writes
        pooled.woke += w.woke
        pooled.timer += w.timer
        pooled.rests += w.rests
    return pooled, "pattern"


@dataclass
class Timer:
    """A job's decision: its role's figures in both traces, its rest or why none."""

    comm: str
    rest_us: int | None
    target: list[float]  # [writes, timer writes, share]
    source: list[float]
    why: str | None = None

    def summary(self) -> dict[str, Any]:
        return {"comm": self.comm, "rest_us": self.rest_us, "why": self.why,
                "target_writes": self.target, "source_writes": self.source}  # fmt: skip


def _figures(w: Writer | None) -> list[float]:
    return [w.writes, w.timer, round(w.share(), 4)] if w is not None else [0, 0, 0.0]


@dataclass
class TimerWrites:
    """The target trace's log writers and the source's, for a plan."""

    target: dict[Role, Writer]
    source: dict[Role, Writer]

    @classmethod
    def read(
        cls, path: str, there: np.ndarray, mine: np.ndarray, source_wakes: Wakes | None
    ) -> TimerWrites | None:
        """From the target trace at `path` (`there`: its head, thinkcal.head) and
        the plan's trace (`mine`: its head); None where either lacks wake records
        (then no write can be told a timer's)."""
        wakes = read_wakes(path)
        if wakes is None or source_wakes is None:
            return None
        return cls(writers(there, wakes), writers(mine, source_wakes))

    def job(self, stream: str, comm: str) -> Timer:
        """The decision for the job of `stream` whose thread is `comm`."""
        there, _ = _match(self.target, stream, comm)
        mine, _ = _match(self.source, stream, comm)
        t = Timer(comm, None, _figures(there), _figures(mine))
        if there is None or not there.is_log_writer():
            t.why = NOT_A_WRITER
        elif there.timer < MIN_TIMER_WRITES or there.share() < MIN_SHARE:
            t.why = f"{there.timer} timer writes of {there.writes} in the target trace"
        elif mine is not None and there.share() <= 2 * mine.share():
            t.why = "the trace holds the target's timer writes already"
        else:
            t.rest_us = max(1, round(there.rest_ns() / 1000))
        return t


def note(d: dict[str, Any]) -> str:
    """A stream's timer writes in a few words (replay.fio's header, `replay plan`)."""
    out = []
    for t in d.get("timer_writes") or []:
        n, k, share = t["target_writes"]
        if t["rest_us"] is not None:
            out.append(f"{t['comm']} every {t['rest_us']} us its next write waits (the target's "
                       f"{k:.0f} of {n:.0f} writes, {share:.0%}; the trace's "
                       f"{t['source_writes'][2]:.0%})")  # fmt: skip
        elif t["why"] != NOT_A_WRITER:
            out.append(f"{t['comm']} none ({t['why']})")
    return f"; timer writes: {', '.join(out)}" if out else ""
