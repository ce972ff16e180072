"""Cross-thread edges of a dependent plan (replayer/plan/crossedges.py): a thread
waiting for another thread's completion, independent threads (and threads the
host wakes together) getting none, long think times waiting for an I/O-bound
thread. No root: the target is a file."""

from __future__ import annotations

import heapq
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_replay_dependent import MIB, OP, _write
from trace_helpers import DT, SDA

import schemas
from replayer.plan import crossedges, deps
from replayer.plan.build import PlanOptions, plan
from replayer.run import runner


def _edges(r: np.ndarray, by_stream: bool = False) -> tuple[crossedges.Cross, np.ndarray]:
    """cross_edges over a trace's requests (one stream unless `by_stream`), and
    each request's own think time (int64 max without a predecessor)."""
    start, end = deps.times(r)
    d = deps.infer(r)
    own = np.where(d.pred >= 0, d.think_ns, np.iinfo(np.int64).max)
    stream = r["stream"].astype(np.int64) if by_stream else np.zeros(len(r), np.int64)
    return crossedges.cross_edges(start, end, r["tid"].astype(np.int64), stream, own), own


def _commit_loop(n: int = 40, jitter: int = 60_000) -> np.ndarray:
    """A session (thread 500, db-read) and a log writer (thread 501, log-write): the
    log write 10 us after each read completed, the next read 5 us after the log
    write completed. Each thread's own think time hides the other's I/O in it.
    The read's service time varies (0 to `jitter` ns more), as a device's does: a
    loop paced by its I/O is not on its own clock (crossedges.clocked)."""
    ids = schemas.enum("stream")
    r = np.zeros(2 * n, dtype=DT)
    q = 1_000_000
    for k in range(n):
        read = 300_000 + (k * 7_919) % jitter if jitter else 300_000
        r[2 * k] = r[2 * k + 1] = np.zeros(1, DT)[0]
        for i, (t0, lat, tid, s, op) in enumerate(
            [
                (q, read, 500, "db-read", "read"),
                (q + read + 10_000, 100_000, 501, "log-write", "write"),
            ]
        ):
            x = r[2 * k + i : 2 * k + i + 1]
            x["ts_queue_ns"], x["ts_issue_ns"], x["ts_complete_ns"] = t0, t0 + 1_000, t0 + lat
            x["tid"], x["pid"], x["stream"], x["op"] = tid, 400, ids[s], OP[op]
            x["offset"], x["bytes"], x["dev"] = (2 * k + i) * 8192, 8192, SDA
        q += read + 115_000
    return r


def test_a_thread_waiting_for_another_threads_io_waits_for_it_in_the_plan(tmp_path: Path) -> None:
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    jobdir = tmp_path / "jobs"
    opts = PlanOptions(
        trace=_write(tmp_path / "t.iot", _commit_loop()), jobdir=jobdir,
        targets=[f"all={target}"], timing="dependent",
    )  # fmt: skip
    man = plan(opts)
    got = {d["stream"]: d["cross_edges"] for d in man["dependencies"]}
    assert got == {"db0.db-read": 39, "db0.log-write": 40}
    reads = (jobdir / "iologs" / "db0.db-read.t500.log").read_text().splitlines()[2:]
    ident, after, think = reads[1].split()[:3]
    # its own previous read and the log write between: 5 us after the latter
    assert len(after.split(",")) == 2 and think == "5"
    assert all(int(a) < int(ident) for a in after.split(","))
    out = subprocess.run(
        [str(runner.LANES), "replay.fio"], cwd=jobdir, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["dependencies"]["issued_before_predecessor"] == 0


def test_independent_threads_get_no_cross_thread_edges() -> None:
    """Four synchronous threads with random think times: some requests come soon
    after another thread's completion, about as many as chance gives, none waits."""
    rng = np.random.default_rng(7)
    r = np.zeros(4 * 500, dtype=DT)
    for t in range(4):
        q = 1_000_000 + np.cumsum(100_000 + rng.exponential(300_000, 500)).astype(np.int64)
        s = slice(t * 500, (t + 1) * 500)
        r["ts_queue_ns"][s], r["ts_issue_ns"][s], r["ts_complete_ns"][s] = q, q + 1_000, q + 100_000
        r["tid"][s] = 500 + t
    r = r[np.argsort(r["ts_queue_ns"], kind="stable")]
    c, own = _edges(r)
    candidates, chance, mirror = c.pairs[(0, 0)]
    assert candidates > 50 and candidates < crossedges.CROSS_EVIDENCE * max(chance, mirror)
    # nor a long-think one: a think over 2 ms is rare here (the host's stall)
    assert (own[own < np.iinfo(np.int64).max] > crossedges.LONG_THINK_NS).any()
    assert len(c.i) == 0


def _batched_host(threads: int, seed: int, n: int = 1500) -> np.ndarray:
    """Independent closed-loop threads (1 ms think, 5-110 us of timer overshoot)
    on one FIFO device (15-30 us a request) on a host that runs them in bursts:
    it stalls 0.1-1 ms about every 1 ms, and what falls in a stall (an issue, a
    completion) happens at its end, 0-5 us apart in random order: the wake-up
    batching of a loaded VM (an SSD-like fio trace recorded on it: another
    process's completion within 10 us before an issue 3.8 times as often as
    Poisson gives, and as often just after it)."""
    rng = np.random.default_rng(seed)
    at = np.cumsum(rng.exponential(1_000_000, 40_000)).astype(np.int64)
    stalls = np.stack([at, at + rng.integers(100_000, 1_000_000, len(at))], 1)

    def host(x: int) -> int:
        k = int(np.searchsorted(stalls[:, 0], x, side="right")) - 1
        return int(stalls[k, 1] + rng.integers(0, 5_000)) if k >= 0 and x < stalls[k, 1] else x

    ev = [(host(1_000_000 + t * 333_000), t) for t in range(threads)]
    heapq.heapify(ev)
    free, left, rows = 0, [n] * threads, []
    while ev:
        q, t = heapq.heappop(ev)
        done = host(max(q, free) + int(rng.integers(15_000, 30_000)))
        free = done
        rows.append((q, done, 500 + t))
        left[t] -= 1
        if left[t]:
            heapq.heappush(ev, (host(done + 1_005_000 + int(rng.exponential(45_000))), t))
    a = np.array(rows, np.int64)
    r = np.zeros(len(a), DT)
    r["ts_queue_ns"], r["ts_complete_ns"], r["tid"] = a[:, 0], a[:, 1], a[:, 2]
    r["ts_issue_ns"] = r["ts_queue_ns"]
    r["bytes"], r["dev"], r["op"] = 8192, SDA, OP["read"]
    r["offset"] = rng.integers(0, 64, len(r)) * 8192
    return r[np.argsort(r["ts_queue_ns"], kind="stable")]


@pytest.mark.parametrize(("threads", "seed"), [(2, 0), (2, 1), (4, 0), (4, 1)])
def test_threads_the_host_wakes_together_get_no_cross_thread_edges(threads: int, seed: int) -> None:
    """Co-wakeups are no dependency: the host's batching puts another thread's
    completion just before an issue far more often than Poisson gives, and just
    after it as often (the mirror count), which a wait would not."""
    r = _batched_host(threads, seed)
    c, _ = _edges(r)
    candidates, chance, mirror = c.pairs[(0, 0)]
    # Poisson alone would call them dependent (the rule before the mirror count)
    assert candidates >= crossedges.CROSS_MIN and candidates >= crossedges.CROSS_EVIDENCE * chance
    assert not crossedges.ordered(candidates, mirror)
    assert len(c.i) == 0


def test_a_wait_for_another_threads_commit_shows_no_mirror() -> None:
    """The session's reads after the log writer's completions: none just before
    one (the session waits for it), so the evidence stands."""
    r = _commit_loop(200)
    c, _ = _edges(r, by_stream=True)
    stream = r["stream"][c.i]
    db, log = (schemas.enum("stream")[s] for s in ("db-read", "log-write"))
    candidates, _, mirror = c.pairs[(db, log)]
    assert candidates == 199 and mirror == 0
    assert set(r["tid"][c.i[stream == db]].tolist()) == {500}


def test_a_thread_on_its_own_clock_neither_gives_nor_gets_an_evidence_edge() -> None:
    """The same commit loop to the nanosecond every cycle: each thread issues on
    a steady clock (the engine's maintenance reads), and a request tied to such
    a thread's completions would replay at its recorded pace on any target."""
    steady = _commit_loop(200, jitter=0)
    start, _ = deps.times(steady)
    assert crossedges.clocked(start, steady["tid"].astype(np.int64)).all()
    assert len(_edges(steady, by_stream=True)[0].i) == 0
    assert len(_edges(_commit_loop(200), by_stream=True)[0].i) == 399


def _flusher_loop() -> np.ndarray:
    """An HDD-like trace: a session (sync, 1-9 ms service, 30 us think), a flusher
    whose writes come 0.2-4 ms after one of the session's completions but tens of
    ms after its own (it polls for the session's progress), and a maintenance
    thread reading every 40 ms on its own clock."""
    rng = np.random.default_rng(11)
    rows = []
    t = 1_000_000
    done = []
    for _ in range(400):  # the session
        svc = int(rng.integers(1_000_000, 9_000_000))
        rows.append((t, t + svc, 500, OP["read"]))
        done.append(t + svc)
        t += svc + 30_000
    for k in range(8, 400, 8):  # the flusher: after every 8th session completion
        q = done[k] + int(rng.integers(200_000, 4_000_000))
        rows.append((q, q + 8_000_000, 501, OP["write"]))
    for k in range(45):  # maintenance: a read every 40 ms
        q = 1_500_000 + k * 40_000_000
        rows.append((q, q + 6_000_000, 502, OP["read"]))
    r = np.zeros(len(rows), dtype=DT)
    a = np.array(rows, dtype=np.int64)
    r["ts_queue_ns"], r["ts_complete_ns"], r["tid"], r["op"] = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
    r["ts_issue_ns"] = r["ts_queue_ns"] + 1_000
    r["bytes"], r["dev"] = 8192, SDA
    r["offset"] = rng.integers(0, 64, len(r)) * 8192
    return r[np.argsort(r["ts_queue_ns"], kind="stable")]


def test_a_long_think_waits_for_the_latest_completion_of_an_io_bound_thread() -> None:
    r = _flusher_loop()
    start, end = deps.times(r)
    d = deps.infer(r)
    own = np.where(d.pred >= 0, d.think_ns, np.iinfo(np.int64).max)
    tid = r["tid"].astype(np.int64)
    c = crossedges.cross_edges(start, end, tid, np.zeros(len(r), np.int64), own)
    # every write of the flusher, its first too: without a predecessor, its start
    # (after the session's first 8 reads) is the longest of its waits
    flusher = np.flatnonzero(tid == 501)
    assert d.pred[flusher[0]] < 0
    assert set(c.i.tolist()) == set(flusher.tolist()) and c.long_think.all()
    # each waits for the session's completion before it, the gap its think time
    assert (tid[c.j] == 500).all()
    assert (end[c.j] < start[c.i]).all() and (start[c.i] - end[c.j] == c.gap_ns).all()
    assert (c.gap_ns < 4_000_000).all() and (own[c.i] > 10_000_000).all()
    # the maintenance thread keeps its clock, the session its own chain
    assert crossedges.periodic(start[tid == 502]) and not crossedges.periodic(start[tid == 501])
