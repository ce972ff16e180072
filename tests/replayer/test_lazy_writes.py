"""A log writer's timer writes in a dependent replay (issue 34,
replayer/src/lazywrite.c): a job whose log says `lazy REST_US`, while its next write
(a turn) waits, writes the turn's full segments the sessions have filled (as the
plan's requests between the writer's last request and the turn complete), no more
than the turn holds, and none where the turn is ready first or holds only a partial
segment; the turn then writes what they left; the switch; a bad line. What
iotape-lanes reports, counts and writes; the sessions' steps are 30 ms against a
0.5 ms look and rests of 5 ms or 10 s, far from any timing edge. No root: the
target is a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_evloop import _plan, _run

SEG = 4096
LOG = 65536  # where the log writer writes
READS = 8  # the session's, between the writer's first write and its turn
STEP_US = 30_000  # the session's think between them


def _jobs(lazy: str, turn_bytes: int, late: bool = False) -> dict[str, tuple[int, list[str]]]:
    """A session (READS reads, STEP_US apart: ids 2 ..) and a log writer whose first
    write (id 1) goes at once and whose turn (`turn_bytes`, then its partial segment
    in a write of its own right where it ends) waits for the session's last read.
    `late`: another read among the requests before the turn, issued long after it
    (1 s in): the turn fills no further than the session's share."""
    session = ["2 - @0 read 0 4096\n"]
    for k in range(1, READS):
        session.append(f"{2 + k} {1 + k} {STEP_US} read {k * SEG} {SEG}\n")
    turn, q = LOG + SEG, 2 + READS + late
    log = [
        lazy,
        f"1 - @0 write {LOG} {SEG}\n",
        f"{q} 1,{1 + READS} 5 write {turn} {turn_bytes}\n",
        f"{q + 1} {q} 5 write {turn + turn_bytes} {SEG}\n",
    ]
    jobs = {"session": (1, session), "log": (1, log)}
    if late:
        jobs["late"] = (1, [f"{2 + READS} - @1000000 read {64 * SEG} {SEG}\n"])
    return jobs


def _doc(tmp_path: Path, jobs: dict[str, tuple[int, list[str]]], **env: str) -> dict:
    _plan(tmp_path, jobs)
    p = _run(tmp_path, **env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _writes(doc: dict, job: str) -> int:
    return next(j["write"]["total_ios"] for j in doc["jobs"] if j["jobname"] == job)


def _log(doc: dict) -> dict:
    return next(j for j in doc["jobs"] if j["jobname"] == "log")["write"]


def test_a_waiting_turn_has_its_full_segments_written_as_they_fill(tmp_path: Path) -> None:
    # 2 full segments: the first full after 4 of the 8 reads, the second after 7 (of
    # 2.5 segments, the partial counted half); the turn waits for the 8th: the timer
    # writes both, one each, and the turn's write of them goes as nothing
    doc = _doc(tmp_path, _jobs("lazy 5000\n", 2 * SEG))
    lazy = doc["dependencies"]["lazy_writes"]
    assert lazy["on"] is True and (lazy["writes"], lazy["took"]) == (2, 1)
    assert lazy["jobs"] == {"log": {"rest_us": 5000.0, "writes": 2, "took": 1}}
    assert _log(doc)["total_ios"] == 1 + 2 + 1  # its first, the timer's two, the partial
    assert _log(doc)["io_bytes"] == 4 * SEG
    assert doc["dependencies"]["issued_before_predecessor"] == 0


def test_the_turn_writes_what_the_timer_left(tmp_path: Path) -> None:
    # 3 full segments, but a request before the turn goes only after it: by the turn
    # 7 of the 9 in between have completed, 7 x 3.5 / 9: 2 segments filled
    doc = _doc(tmp_path, _jobs("lazy 5000\n", 3 * SEG, late=True))
    lazy = doc["dependencies"]["lazy_writes"]
    assert lazy["writes"] in (1, 2) and lazy["took"] == 0
    # the first, the timer's 2 segments, the turn's last, the partial
    assert _log(doc)["io_bytes"] == SEG + 2 * SEG + SEG + SEG
    assert _log(doc)["total_ios"] == 1 + lazy["writes"] + 1 + 1


@pytest.mark.parametrize(
    ("why", "lazy", "turn"),
    [
        ("ready before the rest", "lazy 10000000\n", 2 * SEG),
        ("a turn of a partial segment only", "lazy 5000\n", 0),
    ],
)
def test_no_timer_write_where_the_application_would_make_none(
    tmp_path: Path, why: str, lazy: str, turn: int
) -> None:
    jobs = _jobs(lazy, turn or SEG)
    if not turn:  # the turn's write is its partial segment: the next starts elsewhere
        q = 2 + READS
        jobs["log"][1][3] = f"{q + 1} {q} 5 write {LOG + 16 * SEG} {SEG}\n"
    doc = _doc(tmp_path, jobs)
    assert doc["dependencies"]["lazy_writes"]["writes"] == 0, why
    assert _writes(doc, "log") == 3


def test_the_switch_writes_only_the_logged_writes(tmp_path: Path) -> None:
    doc = _doc(tmp_path, _jobs("lazy 5000\n", 2 * SEG), IOTAPE_LANES_LAZY="0")
    assert doc["dependencies"]["lazy_writes"] == {
        "on": False, "writes": 0, "took": 0,
        "jobs": {"log": {"rest_us": 5000.0, "writes": 0, "took": 0}},
    }  # fmt: skip
    assert _writes(doc, "log") == 3


def test_a_plan_without_a_timer_reports_none(tmp_path: Path) -> None:
    doc = _doc(tmp_path, _jobs("", SEG))
    assert "lazy_writes" not in doc["dependencies"]


@pytest.mark.parametrize("line", ["lazy 0\n", "lazy 12ms\n", "lazy\n"])
def test_a_bad_lazy_line_is_one_line_naming_it(tmp_path: Path, line: str) -> None:
    _plan(tmp_path, _jobs(line, SEG))
    p = _run(tmp_path)
    assert p.returncode == 2
    assert "log.log:3:" in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_a_bad_switch_is_one_line(tmp_path: Path) -> None:
    _plan(tmp_path, _jobs("lazy 5000\n", SEG))
    p = _run(tmp_path, IOTAPE_LANES_LAZY="yes")
    assert p.returncode == 2 and "IOTAPE_LANES_LAZY=yes: 1 (" in p.stderr, p.stderr


def test_a_flush_of_no_bytes_is_issued_beside_a_timer(tmp_path: Path) -> None:
    # a request of 0 bytes (a flush: `sync 0 0`) is issued as the plan says, with
    # or without a timer on its job, on the job's thread or in the event loop: the
    # timer's writes take only what they wrote (they once took the flush too)
    for lazy, loop in (("", "1"), ("", "0"), ("lazy 5000\n", "1")):
        jobs = _jobs(lazy, 2 * SEG)
        jobs["log"][1].append(f"{4 + READS} {3 + READS} 5 sync 0 0\n")
        d = tmp_path / f"flush{len(lazy)}{loop}"
        d.mkdir()
        doc = _doc(d, jobs, IOTAPE_LANES_EVLOOP=loop)
        sync = next(j for j in doc["jobs"] if j["jobname"] == "log")["sync"]
        assert sync["total_ios"] == 1, lazy
