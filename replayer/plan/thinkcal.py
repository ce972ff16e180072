"""Short thinks at the target's CPU per cycle: `replay plan --timing dependent
--think-calibrate TARGET_TRACE` (docs/replay.md "Calibrating short thinks").

A synchronous thread's short think (under LINE_NS, the runner's spin line: on the
engine's recordings 88-100 % of them held no sleep) is the application's CPU
between a completion and its next request, and that CPU is the recording's: on
the HDD-like disk model the engine's sessions use 22-23 us (median) there, after
a 10 ms wait with cold caches, against 5-6 us on the SSD-like device
(docs/benchmarks.md "Cold CPU after a sleep"). The source trace cannot tell the
warm figure (every wait in it is long; its thinks do not fall towards it as the
wait shortens), so a short recording of the same application on the target
gives it.

Per role, a (stream, comm) pair (the submitting thread's name: the same
application names its threads alike on any device; where no thread of the
target trace has the comm, one whose comm matches with every digit run taken as
one, "ese-user-0-1" as "ese-user-#-#", pooled), each trace's *CPU thinks*: a
synchronous thread's think after its own previous request's completion (issue
minus completion), less the run-queue wait in it (schedsplit.py), where it held
no sleep (its sched record's runs since the previous issue: at most one, the
wake-up at the completion; a think with a sleep in it waited for something
else: another thread, a lock) and under LINE_NS. The role's factor is the mean
of the target's over the mean of the source's, and every relative think of the
role's jobs under LINE_NS (its own, a wake edge's gap, a think on demand, an
`or` way's) is replayed times it; a think at or over the line (the
application's waits and pacing) stays as recorded, and so does every think of
an asynchronous job (depth over one: its think is not a cycle's CPU) or of a
role the target trace lacks or has under MIN_THINKS of. The target trace needs
sched records (recorded with --wakes): without, a sleep in a think cannot be
told from CPU. Each trace's figures come from its first MAX_REQUESTS requests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from base.errors import IotapeError
from recorder.tracefile import open_trace
from replayer.plan import cpucycle, deps, schedsplit
from schemas import stream_names

LINE_NS = 200_000  # iotape-lanes' spin line (IOTAPE_LANES_SPIN_THINK_US's default)
MIN_THINKS = 20  # a role's CPU thinks in the target trace needed for a factor
MAX_REQUESTS = 2_000_000  # each trace's figures from its first this many requests

Role = tuple[str, str]  # (stream, comm)


def pattern(comm: str) -> str:
    """A thread name with each run of digits as '#': the same role in a run with
    other numbers (a session 0-1 of a run against 0-3 of another)."""
    return re.sub(r"\d+", "#", comm)


def head(path: str, option: str) -> np.ndarray:
    """The trace's first MAX_REQUESTS requests; one line naming `path` if it is
    not a trace."""
    try:
        with open_trace(path) as t:
            parts, n = [], 0
            for c in t.iter_chunks():
                parts.append(c)
                n += len(c)
                if n >= MAX_REQUESTS:
                    break
    except IotapeError as e:
        raise IotapeError(f"{option} {path}: {e}") from None
    except OSError as e:
        raise IotapeError(f"{option} {path}: {e.strerror or e}") from None
    if not parts:
        return np.zeros(0)
    out = np.empty(sum(len(p) for p in parts), parts[0].dtype)
    k = 0
    for p in parts:
        out[k : k + len(p)] = p
        k += len(p)
    return out[:MAX_REQUESTS]


def _pairs(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Records `r` by (stream, thread) then issue: the order, whether each row
    and the next are of one thread and stream (and the first's completion seen),
    whether the first completed
    before the next's issue, and each row's (stream, thread) key."""
    start, end = deps.times(r)
    key = r["stream"].astype(np.int64) << 32 | r["tid"].astype(np.int64)
    o = np.lexsort((start, key))
    # a completion the kernel never reported (deps.UNSEEN: stamped late) pairs with none
    same = (key[o][1:] == key[o][:-1]) & ((r["flags"][o][:-1] & deps.UNSEEN) == 0)
    return o, same, end[o][:-1] <= start[o][1:], key


def asynchronous(r: np.ndarray) -> set[tuple[str, int]]:
    """The (stream, thread) pairs of records `r` with more than one request in
    flight at over DEPTH_SHARE of their issues (deps.depth_of's rule)."""
    names = stream_names()
    o, same, done, key = _pairs(r)
    out = set()
    k = key[o][1:]
    for u in np.unique(k[same]).tolist():
        m = same & (k == u)
        if (~done[m]).sum() > max(1, deps.DEPTH_SHARE * m.sum()):
            out.add((names.get(u >> 32, str(u >> 32)), u & 0xFFFFFFFF))
    return out


def cpu_thinks(r: np.ndarray, split: schedsplit.SchedSplit | None) -> dict[Role, np.ndarray]:
    """Each role's CPU thinks in records `r` (ns; module doc): a synchronous
    thread's think after its own previous request of the stream, less its
    run-queue wait, with no sleep in it where `split` tells, under LINE_NS."""
    names = stream_names()
    start, end = deps.times(r)
    o, same, done, _ = _pairs(r)
    # a pair of a synchronous thread's requests: the first completed before the next
    sync = same & done
    rows = o[1:][sync]
    think = start[rows] - end[o][:-1][sync]
    if split is not None:
        sub = r[rows]
        think = schedsplit.net(think, split.run_queue_ns(sub))
        runs = split.runs_of(sub)
        keep = runs <= 1  # -1: no sched record for it, taken as it is
    else:
        keep = np.ones(len(rows), bool)
    keep &= think < LINE_NS
    rows, think = rows[keep], think[keep]
    out: dict[Role, list[np.ndarray]] = {}
    sid, comm = r["stream"][rows], r["comm"][rows]
    for s, c in {(int(a), bytes(b)) for a, b in zip(sid.tolist(), comm.tolist(), strict=True)}:
        m = (sid == s) & (comm == c)
        role = (names.get(s, str(s)), c.decode(errors="replace"))
        out.setdefault(role, []).append(think[m])
    return {k: np.concatenate(v) for k, v in out.items()}


@dataclass
class Applied:
    """A job's calibration: what it matched, its factor, and the thinks it
    scaled (counted as the plan goes)."""

    comm: str
    matched: str | None  # "comm", "pattern" or None (why: `why`)
    factor: float | None
    source: list[float]  # the source's CPU thinks: [count, mean us, p50 us]
    target: list[float]  # the target's
    why: str | None = None
    thinks: int = 0
    was_ns: int = 0
    now_ns: int = 0
    kept: int = 0  # thinks at or over the line, as recorded
    # --cycle-cpu target: its CPU a cycle, spent (cpucycle.py), in place of the factor
    cycle: cpucycle.Cycle | None = None
    cycles: tuple[list[float], list[float]] | None = None  # [count, mean, p50]: target, source

    def scale(
        self, think_ns: np.ndarray, rel: np.ndarray, runs: np.ndarray | None = None
    ) -> np.ndarray:
        """`think_ns` with each relative (`rel`) think under LINE_NS times the
        factor, counted; with a CPU a cycle, each its time beyond the CPU (`runs`:
        its thread's runs since its previous issue, -1 unknown)."""
        if self.cycle is not None:
            now = self.cycle.apply(think_ns, rel, runs if runs is not None else
                                   np.full(len(think_ns), -1))  # fmt: skip
            self.thinks += int(rel.sum())
            self.was_ns += int(think_ns[rel].sum())
            self.now_ns += int(now[rel].sum())
            return now
        if self.factor is None:
            return think_ns
        short = rel & (think_ns < LINE_NS)
        now = np.where(short, np.round(think_ns * self.factor).astype(np.int64), think_ns)
        self.thinks += int(short.sum())
        self.was_ns += int(think_ns[short].sum())
        self.now_ns += int(now[short].sum())
        self.kept += int((rel & ~short).sum())
        return now

    def summary(self) -> dict[str, Any]:
        c = self.cycle
        spent = {} if self.cycles is None else {
            "target_cycle_cpu_us": self.cycles[0],
            "source_cycle_cpu_us": self.cycles[1],
            "cpu_us": None if c is None else round(c.target_ns / 1000, 3),
            "thinks_slept": None if c is None else c.slept,
        }  # fmt: skip
        return spent | {
            "comm": self.comm,
            "matched": self.matched,
            "why": self.why,
            "factor": None if self.factor is None else round(self.factor, 4),
            "source_cpu_think_us": self.source,
            "target_cpu_think_us": self.target,
            "thinks": self.thinks,
            "think_s": [round(self.was_ns / 1e9, 4), round(self.now_ns / 1e9, 4)],
            "long_thinks_kept": self.kept,
        }


def _stats(x: np.ndarray | None) -> list[float]:
    if x is None or not len(x):
        return [0, 0.0, 0.0]
    return [len(x), round(float(x.mean()) / 1000, 2), round(float(np.median(x)) / 1000, 2)]


@dataclass
class Calibration:
    """The target trace's CPU thinks by role, and the source's, for a plan."""

    path: str
    target: dict[Role, np.ndarray]
    source: dict[Role, np.ndarray]
    asynchronous: set[tuple[str, int]]  # the source's (stream, thread) of depth over one
    jobs: list[Applied] = field(default_factory=list)
    # --cycle-cpu target (cpucycle.py): each trace's CPU a cycle by role, and the
    # source's sched records (a think's runs)
    cycles: tuple[dict[Role, np.ndarray], dict[Role, np.ndarray]] | None = None
    source_split: schedsplit.SchedSplit | None = None

    @classmethod
    def read(
        cls, path: str, source: str, target_head: np.ndarray | None = None,
        source_head: np.ndarray | None = None, spend: bool = False,
        source_split: schedsplit.SchedSplit | None = None,
    ) -> Calibration:  # fmt: skip
        """From the target trace at `path` and the plan's trace `source` (their
        heads, and the source's sched records, where the plan has read them
        already); `spend`: each role's CPU a cycle too (--cycle-cpu target)."""
        opt = "--think-calibrate"
        r = head(path, opt) if target_head is None else target_head
        if not len(r):
            raise IotapeError(f"{opt} {path}: no requests")
        if not (r["tid"] > 0).any():
            raise IotapeError(f"{opt} {path}: no submitting threads (an imported trace?)")
        split = schedsplit.read_split(path)
        if split is None:
            raise IotapeError(
                f"{opt} {path}: no sched records (record it with --wakes): a sleep in "
                "a think cannot be told from CPU"
            )
        src = head(source, "trace") if source_head is None else source_head
        if not len(src):  # nothing to calibrate: check() says so
            return cls(path, cpu_thinks(r, split), {}, set())
        src_split = source_split or schedsplit.read_split(source)
        mine = cpu_thinks(src, src_split)
        out = cls(path, cpu_thinks(r, split), mine, asynchronous(src))
        if spend:
            if src_split is None:
                raise IotapeError(
                    f"--cycle-cpu target: the trace {source} has no sched records (record "
                    "it with --wakes): a think's CPU cannot be told from its sleep"
                )
            out.cycles = (cpucycle.cycles(r, split, asynchronous(r)),
                          cpucycle.cycles(src, src_split, out.asynchronous))  # fmt: skip
            out.source_split = src_split
        return out

    def _there(self, d: dict[Role, np.ndarray], stream: str, comm: str) -> tuple[
            np.ndarray | None, str]:  # fmt: skip
        """The role's figures in the target's `d` by its thread's name, else by its
        pattern (pooled); how matched."""
        if (stream, comm) in d:
            return d[(stream, comm)], "comm"
        pat = [v for (s, c), v in d.items() if s == stream and pattern(c) == pattern(comm)]
        return (np.concatenate(pat), "pattern") if pat else (None, "")

    def job(self, stream: str, comm: str, tid: int) -> Applied:
        """The calibration of the job of `stream` whose thread `tid` is `comm`."""
        mine = self.source.get((stream, comm))
        there, how = self._there(self.target, stream, comm)
        a = Applied(comm, how or None, None, _stats(mine), _stats(there))
        if (stream, tid) in self.asynchronous:
            a.why = "asynchronous (more than one in flight): its thinks are not a cycle's CPU"
        elif there is None:
            a.why = "no thread of the target trace plays this role"
        elif len(there) < MIN_THINKS:
            a.why = f"{len(there)} CPU thinks in the target trace, under {MIN_THINKS}"
        elif mine is None or not len(mine) or float(mine.mean()) <= 0:
            a.why = "no CPU thinks in the source trace"
        else:
            a.factor = float(there.mean()) / float(mine.mean())
        if self.cycles is not None:
            self._cycle(a, stream, comm, tid)
        if a.cycle is not None:  # its CPU spent, in place of a factor
            a.why, a.factor = None, None
        elif a.why is not None:
            a.matched = None
        self.jobs.append(a)
        return a

    def _cycle(self, a: Applied, stream: str, comm: str, tid: int) -> None:
        """The job's CPU a cycle, where its role has one in both traces."""
        assert self.cycles is not None
        there, how = self._there(self.cycles[0], stream, comm)
        mine = self.cycles[1].get((stream, comm))
        a.cycles = (_stats(there), _stats(mine))
        if (stream, tid) in self.asynchronous or there is None or len(there) < cpucycle.MIN_CYCLES:
            return
        if mine is None or not len(mine):
            return
        a.cycle = cpucycle.Cycle(float(there.mean()), float(mine.mean()))
        a.matched = how

    def check(self) -> None:
        """After planning: at least one job calibrated, else the trace matched
        nothing (a different application's?), one line."""
        if any(a.factor is not None or a.cycle is not None for a in self.jobs):
            return
        have = sorted({f"{s}/{c}" for s, c in self.target})
        want = sorted({f"{a.comm}" for a in self.jobs})
        raise IotapeError(
            f"--think-calibrate {self.path}: no job could be calibrated: its roles "
            f"(stream/thread) {', '.join(have[:8]) or 'none'} against the trace's threads "
            f"{', '.join(want[:8]) or 'none'} (synchronous, with CPU thinks)"
        )


def scale_slice(
    cal: Calibration, mine: dict[int, Applied], stream: str, r: np.ndarray, sub: np.ndarray,
    think_ns: np.ndarray, rel: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """A chunk of a slice's thinks (`think_ns`, `rel`: relative ones) with each
    submitter's (`sub`, its job's calibration in `mine`, made on its first
    request) short ones scaled; and each row's factor (1 where none)."""
    out, f = think_ns.copy(), np.ones(len(think_ns))
    runs = cal.source_split.runs_of(r) if cal.source_split is not None else None
    for who in np.unique(sub).tolist():
        m = sub == who
        a = mine.get(who)
        if a is None:
            comm = bytes(r["comm"][np.flatnonzero(m)[0]]).decode(errors="replace")
            a = mine[who] = cal.job(stream, comm, who)
        out[m] = a.scale(think_ns[m], rel[m], runs[m] if runs is not None else None)
        f[m] = a.factor if a.factor is not None and a.cycle is None else 1.0
    return out, f


def note(d: dict[str, Any]) -> str:
    """A stream's calibration in a few words (replay.fio's header, `replay plan`)."""
    out = []
    for a in d.get("think_calibration") or []:
        if a.get("cpu_us") is not None:
            was, now = a["think_s"]
            out.append(
                f"{a['comm']} spends {a['cpu_us']:g} us CPU a cycle ({a['matched']}; the "
                f"source's {a['source_cycle_cpu_us'][1]:g} us; {a['thinks']} thinks "
                f"{was:g} s -> {now:g} s beyond it, {a['thinks_slept']} slept)"
            )
            continue
        if a["factor"] is None:
            out.append(f"{a['comm']} as recorded ({a['why']})")
            continue
        was, now = a["think_s"]
        out.append(
            f"{a['comm']} x{a['factor']:.3g} ({a['matched']}: CPU think mean "
            f"{a['source_cpu_think_us'][1]:g} -> {a['target_cpu_think_us'][1]:g} us; "
            f"{a['thinks']} thinks {was:g} s -> {now:g} s, {a['long_thinks_kept']} kept)"
        )
    return f"; short thinks at the target's CPU: {', '.join(out)}" if out else ""
