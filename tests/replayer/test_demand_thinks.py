"""Long thinks on demand (replayer/plan/demand.py, `replay plan --timing dependent
--long-thinks demand|recorded`): a thread that waits for others and whose long
wait ended on a timer (woken, then issued long after the wake) or a poll (not
woken at all) is replayed at its demand plus its short think; a wait that a
wake ended, and a thread whose long thinks are rare (the host's stalls), keep
their recorded time. No root: synthetic traces, a file target."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_wakeedges import FLUSHER, SESSION, _arrays, _req, _wake, _write
from trace_helpers import DT, header

from base.errors import IotapeError
from recorder.tracefile import write_trace
from recorder.tracefile.format import SCHED_FIELDS, SCHED_OP, WAKE_OP
from replayer.plan import crossedges, demand, wakeedges
from replayer.plan.build import PlanOptions, plan
from replayer.run import runner

MIB = 1 << 20
BIG = np.iinfo(np.int64).max
WRITER = FLUSHER  # the log writer of these traces
LEAD = 50_000  # a session's commit: its wake of the log writer after its read completed
PAIR = 40_000  # the log writer's second write (a partial segment) after its first
TIMER = 3_000_000  # the lazy-commit timer the log writer sleeps out after a lazy commit
# a trace with wake records, none of them of these threads
NO_WAKES = wakeedges.Wakes(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


def _log_writer(n: int = 30) -> tuple[np.ndarray, list[int]]:
    """A session (500, db-read: 0.5 ms reads, 0.2-0.38 ms apart, 6 a cycle) and a
    log writer (501, log-write: 0.3 ms writes, each followed PAIR later by a
    second one). Each cycle the session commits LEAD after its last read
    completed, waking the writer: a durable commit every other cycle (the writer
    writes 20 us after the wake), a lazy one the others (the writer sleeps out
    TIMER after the wake); the writer wakes the session 30 us after the pair
    completed, and its next cycle begins. Returns the records (requests and
    wakes) and the offsets of the lazy cycles' first writes: the long thinks
    that ended on a timer."""
    parts, lazy = [], []
    t, k = 1_000_000, 0
    for c in range(n):
        reads = []
        for _ in range(6):
            parts.append(_req(t, 500_000, SESSION, "db-read", "read", k))
            reads.append(t + 500_000)
            t, k = t + 700_000 + (k % 3) * 90_000, k + 1  # not on a clock
        wake = reads[-1] + LEAD
        parts.append(_wake(wake, SESSION, WRITER))
        w0 = wake + (20_000 if c % 2 == 0 else TIMER)
        if c % 2:
            lazy.append(k * 8192)
        parts.append(_req(w0, 300_000, WRITER, "log-write", "write", k))
        w1 = w0 + 300_000 + PAIR
        parts.append(_req(w1, 300_000, WRITER, "log-write", "write", k + 1))
        k += 2
        # the session's next cycle when the writer wakes it after the pair (its log
        # buffer freed)
        parts.append(_wake(w1 + 300_000 + 30_000, WRITER, SESSION))
        t = max(t, w1 + 300_000 + 40_000)
    r = np.zeros(len(parts), parts[0].dtype)
    for i, x in enumerate(parts):
        r[i] = x[0]
    return r[np.argsort(r["ts_complete_ns"], kind="stable")], lazy


def test_a_wait_woken_by_a_commit_then_ended_by_a_timer_goes_at_its_demand() -> None:
    r, lazy = _log_writer()
    reqs, start, end, tid, own, wakes = _arrays(r)
    assert crossedges.waits_long(start[tid == WRITER], own[tid == WRITER])
    none = np.full(len(reqs), -1, np.int64)
    w = wakeedges.wake_edges(start, end, tid, own, wakes)
    j, gap = none.copy(), np.zeros(len(reqs), np.int64)
    j[w.i], gap[w.i] = w.j, w.gap_ns
    dm = demand.demand_thinks(start, end, tid, own, j, gap, wakes)
    # exactly the lazy cycles' first writes: the durable ones were woken promptly
    assert sorted(reqs["offset"][dm.i].tolist()) == lazy and dm.woken.all()
    # each now waits for the session's read before the wake, LEAD after it plus the
    # writer's short think (its second writes' PAIR), where the trace had the timer
    assert (tid[dm.j] == SESSION).all()
    assert (reqs["offset"][dm.j] == reqs["offset"][dm.i] - 8192).all()
    assert (dm.think_ns == LEAD + PAIR).all()
    assert (dm.was_ns == LEAD + TIMER).all()
    assert demand.short_thinks(start, tid, own)[WRITER] == PAIR


def test_a_poll_with_no_wake_keeps_its_anchor_and_thinks_short() -> None:
    # a poller (thread 2): 8 polls of 5 ms with nothing to do, then a write 0.1 ms
    # after its previous one; its anchor (here its own predecessor) stays
    start = np.array([0, 5_100_000, 5_300_000, 10_400_000, 10_600_000, 15_700_000], np.int64)
    end = start + 100_000
    tid = np.full(6, 2, np.int64)
    own = np.array([BIG, 5_000_000, 100_000, 5_000_000, 100_000, 5_000_000], np.int64)
    none = np.full(6, -1, np.int64)
    dm = demand.demand_thinks(start, end, tid, own, none, np.zeros(6, np.int64), NO_WAKES)
    assert dm.i.tolist() == [1, 3, 5] and (dm.j == -1).all() and not dm.woken.any()
    assert (dm.think_ns == 100_000).all() and (dm.was_ns == 5_000_000).all()


def test_rare_long_thinks_are_the_hosts_stalls_and_keep_their_time() -> None:
    # 50 thinks of 1 ms (a fio job's thinktime), 2 of them stalled to 5 ms
    own = np.full(50, 1_000_000, np.int64)
    own[[10, 30]] = 5_000_000
    own[0] = BIG
    start = np.cumsum(own.clip(max=5_000_000) + 100_000)
    end = start + 100_000
    tid = np.full(50, 3, np.int64)
    assert not crossedges.waits_long(start, own)
    none = np.full(50, -1, np.int64)
    dm = demand.demand_thinks(start, end, tid, own, none, np.zeros(50, np.int64), NO_WAKES)
    assert len(dm.i) == 0


def _rests() -> tuple[np.ndarray, ...]:
    """A log writer (thread 2, 0.3 ms writes): every 5th think 4 ms (it waits
    long), the others 60 us, but for 12 of 0.5-1.8 ms: 4 in which it slept again
    (2 runs on a CPU since its previous issue: a timer's rest), 4 of CPU time (1
    run), 4 it slept in but a session (thread 7) woke it 30 us before its issue."""
    n = 60
    own = np.full(n, 60_000, np.int64)
    own[::5] = 4_000_000
    own[0] = BIG
    runs = np.ones(n, np.int64)
    mid = [1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14]
    own[mid] = np.linspace(500_000, 1_800_000, 12).astype(np.int64)
    runs[mid[:4] + mid[8:]] = 2
    start = 1_000_000 + np.cumsum(np.where(own < BIG, own, 0) + 300_000)
    wakes = wakeedges.Wakes(start[mid[8:]] - 30_000, np.full(4, 2), np.full(4, 7))
    return start, start + 300_000, np.full(n, 2, np.int64), own, runs, wakes, np.array(mid)


def test_a_timers_rest_under_the_long_line_thinks_short_where_the_thread_slept() -> None:
    start, end, tid, own, runs, wakes, mid = _rests()
    assert crossedges.waits_long(start, own)
    none = np.full(len(start), -1, np.int64)
    zero = np.zeros(len(start), np.int64)
    dm = demand.demand_thinks(start, end, tid, own, none, zero, wakes, runs)
    rest = dm.i[own[dm.i] <= crossedges.LONG_THINK_NS]
    # the slept ones no session woke; not the CPU time, not the woken ones
    assert rest.tolist() == mid[:4].tolist()
    short = demand.short_thinks(start, tid, own)[2]
    assert short == 60_000 and (dm.think_ns[np.isin(dm.i, rest)] == short).all()
    assert not dm.woken[np.isin(dm.i, rest)].any() and (dm.j[np.isin(dm.i, rest)] == -1).all()
    # without sched records a sleep and CPU time look alike: kept as recorded
    dm = demand.demand_thinks(start, end, tid, own, none, zero, wakes)
    assert (own[dm.i] > crossedges.LONG_THINK_NS).all()
    # nor in a thread that does not wait long (a fio job's 1 ms thinktime)
    few = np.where(own == 4_000_000, 60_000, own)
    assert not crossedges.waits_long(start, few)
    dm = demand.demand_thinks(start, end, tid, few, none, zero, wakes, runs)
    assert len(dm.i) == 0


def test_a_plan_reads_the_sched_records_for_the_timers_rest(tmp_path: Path) -> None:
    # the same log writer recorded with sched records (its runs on a CPU counted over
    # its life) and its four wakes: a dependent plan thinks short after each timer's rest
    start, _, _, own, runs, wakes, mid = _rests()
    parts = []
    for k in range(len(start)):
        parts.append(_req(int(start[k]), 300_000, WRITER, "log-write", "write", k))
        parts.append(_sched(int(start[k]), WRITER, int(runs[: k + 1].sum())))
    parts += [_wake(int(t), SESSION, WRITER) for t in wakes.t_ns.tolist()]
    r = np.zeros(len(parts), parts[0].dtype)
    for i, x in enumerate(parts):
        r[i] = x[0]
    r = r[np.argsort(r["ts_complete_ns"], kind="stable")]
    h = header()
    h["devices"] = h["devices"][:1]
    write_trace(tmp_path / "t.iot", h, r, wakes=True, sched=True)
    thinks = {}
    for how in ("demand", "recorded"):
        jobdir, _ = _plan(tmp_path, r, how)
        lines = _lines(jobdir).items()
        thinks[how] = {off // 8192: int(t) for off, (_, t) in lines if t[0] != "@"}
    for k in mid[:4].tolist():
        assert thinks["recorded"][k] == round(own[k] / 1000) and thinks["demand"][k] == 60
    for k in mid[4:].tolist():  # CPU time, or woken by the session: as recorded
        assert thinks["demand"][k] == thinks["recorded"][k] == round(own[k] / 1000)


def _sched(t: int, tid: int, runs: int) -> np.ndarray:
    """A sched record of `tid` at its request's queue time `t`: `runs` on a CPU
    over its life, no run-queue wait."""
    x = np.zeros(1, DT)
    x["ts_queue_ns"] = x["ts_issue_ns"] = x["ts_complete_ns"] = t
    x["tid"], x["pid"], x["op"] = tid, 400, SCHED_OP
    x[SCHED_FIELDS["runs"]] = runs
    return x


def test_a_threads_late_start_counts_towards_its_long_thinks() -> None:
    # a pre-formatter: 11 short thinks and one long (1 of 11: under LONG_SHARE), its
    # first request late: with it, 2 of 12
    own = np.full(12, 100_000, np.int64)
    own[0], own[5] = BIG, 40_000_000
    start = 500_000_000 + np.cumsum(np.where(own < BIG, own, 0) + 300_000 * np.arange(12))
    assert np.mean(own[1:] > crossedges.LONG_THINK_NS) < crossedges.LONG_SHARE
    assert not crossedges.periodic(start)
    assert crossedges.waits_long(start, own)


def _plan(tmp_path: Path, r: np.ndarray, long_thinks: str) -> tuple[Path, dict]:
    target = tmp_path / "target.img"
    if not target.exists():
        target.write_bytes(b"\0" * (4 * MIB))
    jobdir = tmp_path / f"jobs-{long_thinks}"
    trace = tmp_path / "t.iot"
    if not trace.exists():
        _write(trace, r)
    opts = PlanOptions(trace=trace, jobdir=jobdir, targets=[f"all={target}"],
                       timing="dependent", long_thinks=long_thinks)  # fmt: skip
    return jobdir, plan(opts)


def _lines(jobdir: Path) -> dict[int, tuple[str, str]]:
    """The log writer's requests: offset -> (AFTER, THINK)."""
    out = {}
    for line in (jobdir / "iologs" / f"db0.log-write.t{WRITER}.log").read_text().splitlines()[2:]:
        f = line.split()
        out[int(f[4])] = (f[1], f[2])
    return out


def test_a_plan_says_which_thinks_went_on_demand_and_the_runner_keeps_the_order(
    tmp_path: Path,
) -> None:
    r, lazy = _log_writer()
    jobdir, man = _plan(tmp_path, r, "demand")
    got = {d["stream"]: d for d in man["dependencies"]}
    lw = got["db0.log-write"]
    assert (lw["long_thinks"], lw["demand_thinks"], lw["demand_woken"]) == ("demand", 15, 15)
    was, now = lw["demand_think_s"]
    assert round(was, 4) == round(15 * (LEAD + TIMER) / 1e9, 4)
    assert round(now, 4) == round(15 * (LEAD + PAIR) / 1e9, 4)
    assert got["db0.db-read"]["demand_thinks"] == 0
    assert "db0.log-write: " in (jobdir / "replay.fio").read_text()
    assert ", 15 long thinks on demand (" in (jobdir / "replay.fio").read_text()
    lines = _lines(jobdir)
    for off in lazy:
        after, think = lines[off]
        assert think == str((LEAD + PAIR) // 1000)
        assert len(after.split(",")) == 2  # its own previous write and the session's read
    out = subprocess.run(
        [str(runner.LANES), "replay.fio"], cwd=jobdir, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["dependencies"]["issued_before_predecessor"] == 0
    # turned off: the same trace keeps the timer in the think time
    jobdir, man = _plan(tmp_path, r, "recorded")
    lw = {d["stream"]: d for d in man["dependencies"]}["db0.log-write"]
    assert (lw["long_thinks"], lw["demand_thinks"]) == ("recorded", 0)
    for off in lazy:
        assert int(_lines(jobdir)[off][1]) > TIMER // 1000


def test_long_thinks_is_refused_where_it_has_no_meaning(tmp_path: Path) -> None:
    r, _ = _log_writer(4)
    for timing, lt, msg in (
        ("afap", "recorded", "--long-thinks: only with --timing dependent"),
        ("recorded", "recorded", "--long-thinks: only with --timing dependent"),
        ("dependent", "later", "--long-thinks later: not demand or recorded"),
    ):
        with pytest.raises(IotapeError, match=msg):
            plan(PlanOptions(trace=_write(tmp_path / "t.iot", r), jobdir=tmp_path / "j",
                             targets=[f"all={tmp_path / 'x.img'}"], timing=timing,
                             long_thinks=lt))  # fmt: skip
    assert not (tmp_path / "j").exists()


def test_without_wake_records_long_thinks_stay_as_recorded(tmp_path: Path) -> None:
    # the same trace without its wakes: a timer and a wake look alike
    r, lazy = _log_writer()
    r = r[r["op"] != WAKE_OP]
    jobdir, man = _plan(tmp_path, r, "demand")
    lw = {d["stream"]: d for d in man["dependencies"]}["db0.log-write"]
    assert (lw["wakes_recorded"], lw["demand_thinks"]) == (False, 0)
    for off in lazy:
        assert int(_lines(jobdir)[off][1]) > TIMER // 1000


def test_the_critical_path_loses_the_timers(tmp_path: Path) -> None:
    """bench/dependent_critical_path.py on the two plans of the same trace: at
    20 us a request the log writer's lazy writes set no pace once on demand."""
    sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
    from dependent_critical_path import critical_path

    r, lazy = _log_writer()
    got = {}
    for lt in ("demand", "recorded"):
        jobdir, _ = _plan(tmp_path, r, lt)
        got[lt] = critical_path(jobdir, 20_000)
    assert got["demand"]["tx_requests"] == got["recorded"]["tx_requests"] == 30 * 6
    # recorded: the session's durable commits wait for pairs issued after the
    # timers; on demand each lazy write goes LEAD + PAIR after its session's read
    assert got["recorded"]["tx_span_ms"] - got["demand"]["tx_span_ms"] > len(lazy) * 2.5


def _clocked(jitter: int) -> demand.Demand:
    """Thread 1 reads every 1 ms (+ `jitter` ns every other read), 0.1 ms each;
    thread 2, woken by thread 1 0.05 ms after every 10th read completed, writes 3 ms
    after the wake (a timer), then once more 0.04 ms after that write."""
    s1 = np.cumsum(np.full(100, 1_000_000) + (np.arange(100) % 2) * jitter)
    e1 = s1 + 100_000
    wt = e1[9::10] + LEAD
    s2 = np.sort(np.concatenate([wt + TIMER, wt + TIMER + 340_000]))
    start = np.concatenate([s1, s2])
    end = np.concatenate([e1, s2 + 300_000])
    tid = np.concatenate([np.full(100, 1), np.full(len(s2), 2)]).astype(np.int64)
    o = np.argsort(start, kind="stable")
    start, end, tid = start[o], end[o], tid[o]
    own = np.full(len(start), BIG)
    for u in (1, 2):
        rows = np.flatnonzero(tid == u)
        own[rows[1:]] = start[rows[1:]] - end[rows[:-1]]
    w = wakeedges.Wakes(wt, np.full(len(wt), 2), np.full(len(wt), 1))
    none = np.full(len(start), -1, np.int64)
    return demand.demand_thinks(start, end, tid, own, none, np.zeros(len(start), np.int64), w)


def test_a_thread_on_its_own_clock_is_no_demand() -> None:
    # a waker that paces (crossedges.paces: I/O-bound, not on a clock) anchors the
    # timer's wait at its completion; one on its own clock paces nobody, and the
    # wait keeps its own anchor, on demand all the same
    paced, clocked = _clocked(137_000), _clocked(0)
    # every timer; clocked, the first (the thread's start, nothing to anchor it) keeps its time
    assert len(paced.i) == 10 and len(clocked.i) == 9
    assert paced.woken.all() and (paced.j >= 0).all()
    assert not clocked.woken.any() and (clocked.j == -1).all()
    assert (clocked.think_ns == 40_000).all()


def _two_sessions() -> tuple[np.ndarray, list[int]]:
    """_log_writer's trace with a second session (thread 502) reading on its own
    through the log writer's timers: the recorded plan anchors each lazy write at
    502's latest read before it (hfplayer's long-think edge), demand at the read
    of the session that woke the writer (500), which completed earlier."""
    r, lazy = _log_writer()
    t_end, t, k, other = int(r["ts_complete_ns"].max()), 1_100_000, 0, []
    while t < t_end:  # 0.4 ms reads, 60-270 us apart: I/O-bound, not on a clock
        other.append(_req(t, 400_000, 502, "db-read", "read", 400 + k % 50))
        t, k = t + 460_000 + (k % 4) * 70_000, k + 1
    x = np.zeros(len(r) + len(other), r.dtype)
    x[: len(r)] = r
    x[len(r) :] = np.concatenate(other)
    return x[np.argsort(x["ts_complete_ns"], kind="stable")], lazy


def _ways(jobdir: Path) -> dict[int, list]:
    """Every request of a plan by id: its ways (bench/dependent_critical_path.py's),
    its `or` way second."""
    sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
    from dependent_critical_path import _jobs

    return {i: [w for w in ways if w] for i, (_, *ways) in _jobs(jobdir)[0].items()}


def _due(ways: list, end: dict[int, int]) -> int:
    """When a request may go, given every request's completion: its earliest way."""
    from dependent_critical_path import _due as due

    return min(due(w, end)[0] for w in ways)


def test_a_demand_never_makes_a_request_later_than_its_recorded_anchor(tmp_path: Path) -> None:
    """Recording 2 of the reference workload replayed slower on demand than with
    its thinks as recorded (docs/benchmarks.md): a demand edge waits for the
    waker's completion, which a replay may bring later than the anchor the
    recorded plan had, and the request went later than the recorded plan's. With
    the recorded plan's way beside it (`or`, the earlier: deps.c), it never does:
    on any completion times, each request may go no later than in the recorded plan."""
    r, lazy = _two_sessions()
    dem, _ = _plan(tmp_path, r, "demand")
    rec, _ = _plan(tmp_path, r, "recorded")
    d, c = _ways(dem), _ways(rec)
    assert d.keys() == c.keys()
    rng = np.random.default_rng(34)
    for _ in range(20):  # completion times a replay might bring, slow threads and fast
        end = dict(zip(d, rng.integers(0, 10**9, len(d)).tolist(), strict=True))
        assert all(_due(d[i], end) <= _due(c[i], end) for i in d)
    # the lazy writes: a demand (the waker 500's read) in place of 502's read, and
    # the recorded plan's way, exactly, beside it
    with_or = [i for i in d if len(d[i]) == 2]
    assert len(with_or) == len(lazy)
    for i in with_or:
        assert d[i][1] == c[i][0] and d[i][0] != c[i][0]


def _lanes(
    tmp_path: Path, logs: dict[str, list[str]], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """iotape-lanes on hand-written dependent logs (job -> lines), each job iodepth 1,
    in `env` (default: this process's)."""
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    (tmp_path / "iologs").mkdir()
    fio = "[global]\nioengine=psync\n"
    for name, lines in logs.items():
        head = f"iotape dependent log 1\nopen {target}\n"
        (tmp_path / "iologs" / f"{name}.log").write_text(head + "".join(lines))
        fio += f"[{name}]\nread_iolog=iologs/{name}.log\niodepth=1\n"
    (tmp_path / "replay.fio").write_text(fio)
    return subprocess.run([str(runner.LANES), "replay.fio"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip


def test_iotape_lanes_takes_the_earlier_way(tmp_path: Path) -> None:
    """A request that waits for a request issued 3 s after the start, `or` 0 us
    after its own predecessor: it goes by the second, long before the first
    completes, and counts as waiting for what it needed (0 early). Order alone
    is asserted: the 3 s request's job issues after the other job has finished."""
    out = _lanes(tmp_path, {
        "late": ["0 - @3000000 read 0 4096\n"],
        "quick": ["1 - @0 read 8192 4096\n", "2 0,1 0 read 16384 4096 or 1 0\n",
                  "3 2 0 read 24576 4096 or - @0\n"],
    })  # fmt: skip
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["dependencies"]["issued_before_predecessor"] == 0
    jobs = {j["jobname"]: j for j in res["jobs"]}
    assert jobs["quick"]["read"]["total_ios"] == 3
    assert jobs["quick"]["last_ns"] < jobs["late"]["first_ns"]


def test_iotape_lanes_refuses_a_malformed_or(tmp_path: Path) -> None:
    out = _lanes(tmp_path, {"a": ["0 - @0 read 0 4096\n", "1 0 0 read 4096 4096 else 0 0\n"]})
    assert out.returncode == 2 and "a.log:4: not a dependent log line" in out.stderr
