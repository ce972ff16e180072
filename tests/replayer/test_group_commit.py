"""Group commit in a dependent replay (issue 34): a log writer's write takes the
writes after it whose committers have already committed (replayer/src/groupcommit.c),
and the plan marks which writes may be taken (replayer/plan/groupcommit.py).
Structural: how many writes went out and with how many bytes, what waited for
what; no timing thresholds. No root: the target is a file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_evloop import _plan as evloop_plan
from test_evloop import _run as evloop_run

from recorder.tracefile.format import RECORD_DTYPE
from replayer.plan import groupcommit
from replayer.plan.source import OP
from replayer.run import runner

MIB = 1 << 20


def _plan(tmp_path: Path, jobs: dict[str, list[str]]) -> None:
    """A dependent plan of hand-written logs, each job iodepth 1 (test_evloop's)."""
    evloop_plan(tmp_path, {name: (1, lines) for name, lines in jobs.items()})


def _run(tmp_path: Path, **env: str) -> dict:
    p = evloop_run(tmp_path, **env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _writes(doc: dict, job: str) -> tuple[int, int]:
    w = next(j for j in doc["jobs"] if j["jobname"] == job)["write"]
    return w["total_ios"], w["io_bytes"]


def _commits(session_at_us: int) -> dict[str, list[str]]:
    """A log writer's two writes, the second following on the first; a session's
    read at `session_at_us`, its commit carried by the second write (the session's
    next read waits for it). The first write goes at 20 ms."""
    return {
        "log": ["0 - @20000 write 0 4096\n", "2 0 10000 write 4096 8192 join 1\n"],
        "session": [f"1 - @{session_at_us} read 65536 4096\n", "3 1,2 0 read 69632 4096\n"],
    }


@pytest.mark.parametrize("evloop", ["0", "1"])
def test_a_write_takes_the_next_whose_committer_has_committed(tmp_path: Path, evloop: str) -> None:
    _plan(tmp_path, _commits(0))  # the session read long before the first write
    doc = _run(tmp_path, IOTAPE_LANES_EVLOOP=evloop)
    assert _writes(doc, "log") == (1, 4096 + 8192)  # one write: both ranges' union
    gc = doc["dependencies"]["group_commit"]
    assert (gc["joinable"], gc["writes_taking_others"], gc["taken"]) == (1, 1, 1)
    assert doc["dependencies"]["issued_before_predecessor"] == 0
    off = _run(tmp_path, IOTAPE_LANES_EVLOOP=evloop, IOTAPE_LANES_GROUP_COMMIT="0")
    assert _writes(off, "log") == (2, 4096 + 8192)
    assert off["dependencies"]["group_commit"]["taken"] == 0


@pytest.mark.parametrize("evloop", ["0", "1"])
def test_a_committer_not_yet_committed_keeps_the_write_apart(tmp_path: Path, evloop: str) -> None:
    _plan(tmp_path, _commits(200_000))  # the session reads 180 ms after the first write
    doc = _run(tmp_path, IOTAPE_LANES_EVLOOP=evloop)
    assert _writes(doc, "log") == (2, 4096 + 8192)
    assert doc["dependencies"]["group_commit"]["taken"] == 0


def _turns(session_at_us: int, first_joins: bool = True) -> dict[str, list[str]]:
    """_commits, with the second turn two writes: its first on the partial segment
    again, its second right where that one ends (`same-turn`)."""
    clause = " join 1" if first_joins else ""
    return {
        "log": [
            "0 - @20000 write 0 4096\n",
            f"2 0 10000 write 0 8192{clause}\n",
            "3 2 0 write 8192 4096 same-turn\n",
        ],
        "session": [f"1 - @{session_at_us} read 65536 4096\n", "4 1,3 0 read 69632 4096\n"],
    }


@pytest.mark.parametrize("evloop", ["0", "1"])
@pytest.mark.parametrize(
    ("session_at_us", "first_joins", "writes", "taken"),
    [(0, True, 1, 2), (200_000, True, 3, 0), (0, False, 3, 0)],
)
def test_a_turns_second_write_goes_only_with_its_first(
    tmp_path: Path, evloop: str, session_at_us: int, first_joins: bool, writes: int, taken: int
) -> None:
    """The committer done before the first write: the next turn, both its writes,
    goes in it (one write of [0, 12 KiB)). Not done yet, or the turn's first write
    not joinable: three writes, the turn's second alone after its first, as the
    engine writes them."""
    _plan(tmp_path, _turns(session_at_us, first_joins))
    doc = _run(tmp_path, IOTAPE_LANES_EVLOOP=evloop)
    got = _writes(doc, "log")
    assert got[0] == writes and got[1] == (12288 if writes == 1 else 4096 + 8192 + 4096)
    gc = doc["dependencies"]["group_commit"]
    assert (gc["taken"], gc["joinable"]) == (taken, 1 if first_joins else 0)
    assert doc["dependencies"]["issued_before_predecessor"] == 0


@pytest.mark.parametrize("evloop", ["0", "1"])
def test_a_turns_second_write_takes_nothing(tmp_path: Path, evloop: str) -> None:
    """A turn gathers its records at its start: a commit made while its first write
    is in flight goes in the next turn, not in its second write. Two turns of two
    writes, the second turn's committer done long before: four writes."""
    jobs = {
        "log": [
            "0 - @20000 write 0 8192\n",
            "2 0 0 write 8192 4096 same-turn\n",
            "3 2 10000 write 8192 8192 join 1\n",
            "4 3 0 write 16384 4096 same-turn\n",
        ],
        "session": ["1 - @0 read 65536 4096\n", "5 1,4 0 read 69632 4096\n"],
    }
    _plan(tmp_path, jobs)
    doc = _run(tmp_path, IOTAPE_LANES_EVLOOP=evloop)
    assert _writes(doc, "log") == (4, 8192 + 4096 + 8192 + 4096)
    assert doc["dependencies"]["group_commit"]["taken"] == 0


def test_a_write_that_does_not_follow_on_stays_apart(tmp_path: Path) -> None:
    jobs = _commits(0)
    jobs["log"][1] = "2 0 10000 write 524288 4096 join 1\n"  # a gap: not the log's next bytes
    _plan(tmp_path, jobs)
    assert _writes(_run(tmp_path), "log") == (2, 8192)


def test_a_malformed_join_is_named(tmp_path: Path) -> None:
    jobs = _commits(0)
    jobs["log"][1] = "2 0 10000 write 4096 8192 join 5\n"  # not before the request's own id
    _plan(tmp_path, jobs)
    p = subprocess.run([str(runner.LANES), "replay.fio"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert p.returncode == 2
    assert "log.log:4: not a dependent log line" in p.stderr


def test_a_malformed_same_turn_is_named(tmp_path: Path) -> None:
    jobs = _turns(0)
    jobs["log"][2] = "3 2 0 write 8192 4096 same-turn 7\n"
    _plan(tmp_path, jobs)
    p = subprocess.run([str(runner.LANES), "replay.fio"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert p.returncode == 2
    assert "log.log:5: not a dependent log line" in p.stderr


def _records(rows: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    """(tid, issue us, 0 read / 1 write, offset, bytes) -> trace records."""
    r = np.zeros(len(rows), RECORD_DTYPE)
    for k, (tid, at, op, off, n) in enumerate(rows):
        r[k]["tid"], r[k]["ts_queue_ns"] = tid, at * 1000
        r[k]["ts_issue_ns"], r[k]["ts_complete_ns"] = at * 1000, at * 1000 + 50_000
        r[k]["op"] = OP["write"] if op else OP["read"]
        r[k]["offset"], r[k]["bytes"], r[k]["dev"] = off, n, 7
    return r


def _joins(rows: list[tuple[int, int, int, int, int]], waits: dict[int, int]) -> dict[int, str]:
    """The plan's clauses for `rows` (one chunk, in issue order: ids = rows), each
    row's own predecessor its thread's request before it, `waits`: row -> the
    row it waits for in another thread."""
    r = _records(rows)
    tid = r["tid"].astype(np.int64)
    pred = np.full(len(r), -1, np.int64)
    for k in range(len(r)):
        before = np.flatnonzero(tid[:k] == tid[k])
        pred[k] = before[-1] if len(before) else -1
    edge = np.full(len(r), -1, np.int64)
    for i, j in waits.items():
        edge[i] = j
    start = r["ts_queue_ns"].astype(np.int64)
    done = r["ts_complete_ns"].astype(np.int64)[np.maximum(pred, 0)]
    own = np.where(pred >= 0, start - done, np.iinfo(np.int64).max)  # as depcross.cross
    return groupcommit.joins(
        groupcommit.State(), [r], start, tid, np.arange(len(r)), pred, edge, own
    )


def test_the_plan_marks_a_log_writers_write_with_its_committers() -> None:
    w, s = 10, 20  # the log writer, a session
    rows = [
        (w, 0, 1, 0, 4096),  # 0: a write
        (s, 10, 0, 1 << 20, 4096),  # 1: the session's read before its commit
        (w, 1000, 1, 4096, 8192),  # 2: follows on 0 (a turn of its own), carries the commit
        (s, 1100, 0, 2 << 20, 4096),  # 3: the session after its commit: waits for 2
        (w, 1200, 1, 8192, 4096),  # 4: the partial sector again; nobody waits for it
    ]
    assert _joins(rows, {3: 2}) == {2: " join 1"}
    fixed = [(t, at, op, off, 4096 if t == w else n) for t, at, op, off, n in rows]
    assert _joins(fixed, {3: 2}) == {}  # a writer of one size: fixed blocks, not a log
    gap = [*rows[:2], (w, 1000, 1, 1 << 30, 8192), *rows[3:]]
    assert _joins(gap, {3: 2}) == {}  # not the log's next bytes


def test_the_plan_marks_a_turns_first_write_and_its_second() -> None:
    """A log writer's turn of two writes (its full segments, then the partial one
    right after, as the engine writes on any device): the committers' clause goes
    on the first, which may go in the write before it; the second goes with it or
    after it, never in it where the first goes alone."""
    w, s = 10, 20
    rows = [
        (w, 0, 1, 0, 8192),  # 0: the turn before: its partial segment at 4 KiB
        (s, 10, 0, 1 << 20, 4096),  # 1: the session's read before its commit
        (w, 1000, 1, 4096, 8192),  # 2: a new turn: the partial segment again, then a full one
        (w, 1060, 1, 12288, 4096),  # 3: 10 us after 2 completed, where it ends: the same turn
        (s, 1200, 0, 2 << 20, 4096),  # 4: the session after its commit: waits for 3
    ]
    assert _joins(rows, {4: 3}) == {2: " join 1", 3: " same-turn"}
    # woken by another thread, or after a long rest: a turn of its own
    assert _joins(rows, {4: 3, 3: 1}) == {3: " join 1"}
    rested = [*rows[:3], (w, 1500, 1, 12288, 4096), (s, 1600, 0, 2 << 20, 4096)]
    assert _joins(rested, {4: 3}) == {3: " join 1"}


def test_the_option_is_checked() -> None:
    from base.errors import IotapeError
    from replayer.plan import timing_options
    from replayer.plan.options import PlanOptions

    timing_options.check(
        PlanOptions(trace=Path("t.iot"), timing="dependent", group_commit="recorded")
    )
    with pytest.raises(IotapeError, match="--group-commit bogus: not join or recorded"):
        timing_options.check(
            PlanOptions(trace=Path("t.iot"), timing="dependent", group_commit="bogus")
        )
    with pytest.raises(IotapeError, match="--group-commit: only with --timing dependent"):
        timing_options.check(PlanOptions(trace=Path("t.iot"), group_commit="recorded"))


@pytest.mark.parametrize("evloop", ["0", "1"])
def test_a_write_takes_a_run_of_writes_overlapping_its_last_sector(
    tmp_path: Path, evloop: str
) -> None:
    jobs = _commits(0)
    # a third write starting inside the second (its partly filled last sector again)
    jobs["log"].append("4 2 10000 write 8192 8192 join 1\n")
    _plan(tmp_path, jobs)
    doc = _run(tmp_path, IOTAPE_LANES_EVLOOP=evloop)
    assert _writes(doc, "log") == (1, 16384)  # [0, 16 KiB): the union, once
    gc = doc["dependencies"]["group_commit"]
    assert (gc["joinable"], gc["writes_taking_others"], gc["taken"]) == (2, 1, 2)


def test_the_plan_carries_a_writers_state_from_chunk_to_chunk() -> None:
    w, s = 10, 20
    st = groupcommit.State()

    def chunk(rows: list[tuple[int, int, int, int, int]], first_id: int, pred: list[int],
              waits: dict[int, int]) -> dict[int, str]:  # fmt: skip
        r = _records(rows)
        edge = np.full(len(r), -1, np.int64)
        for i, j in waits.items():
            edge[i] = j
        tid = r["tid"].astype(np.int64)
        start = r["ts_queue_ns"].astype(np.int64)
        gid = first_id + np.arange(len(r))
        own = np.full(len(r), 1_000_000, np.int64)  # long thinks: each write a turn of its own
        return groupcommit.joins(st, [r], start, tid, gid, np.array(pred, np.int64), edge, own)

    # chunk 1: the writer's two sizes and its write that the next chunk's follows on;
    # a session waits for its first write (the writer is one others wait for)
    one = [(w, 0, 1, 0, 4096), (s, 10, 0, 1 << 20, 4096), (w, 20, 1, 4096, 8192),
           (s, 30, 0, 2 << 20, 4096)]  # fmt: skip
    chunk(one, 0, [-1, -1, 0, 1], {3: 0})
    # chunk 2: the next write follows on the last one of chunk 1; its committer's
    # previous request is id 3
    two = [(w, 100, 1, 12288, 4096), (s, 200, 0, 3 << 20, 4096)]
    assert chunk(two, 4, [2, 3], {1: 0}) == {0: " join 3"}
