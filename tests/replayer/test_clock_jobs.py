"""Threads on their own clock (issue 34): the plan gives a job whose role runs on a
clock in the target's recording `clock PERIOD_US LO HI` (replayer/plan/clockjobs.py),
and iotape-lanes goes on with it after its log, at its period, each request where
the one before ended, from LO again past HI, until the other jobs finish
(replayer/src/clockjob.c); a role on a clock that jumps about gets none;
`--clock-jobs recorded`; the switch; a bad line. Counts bounded by the run's own
span, no timing thresholds. No root: synthetic traces, a file target."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_evloop import _plan as _lanes_plan
from test_evloop import _run
from test_timer_writes import _trace, plan_onto_file
from test_wakeedges import _req

from base.errors import IotapeError
from iotape.commands.replay.plan import _print
from recorder.tracefile import open_trace
from replayer.plan import clockjobs
from replayer.plan.build import PlanOptions, plan
from replayer.run import runner

MIB = 1 << 20
BDM = 503
BLOCK = 8192
PERIOD = 40_000_000  # the target's maintenance reads: every 40 ms


def _doc(tmp_path: Path, jobs: dict[str, tuple[int, list[str]]], **env: str) -> dict:
    _lanes_plan(tmp_path, jobs)
    p = _run(tmp_path, **env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _jobs(clock: str, fg_us: int = 200_000) -> dict[str, tuple[int, list[str]]]:
    """A clocked reader (one logged read of BLOCK, then `clock`) and a foreground
    job of two reads `fg_us` apart."""
    return {
        "bdm": (1, ["0 - @0 read 0 8192\n", clock]),
        "fg": (1, ["1 - @0 read 524288 4096\n", f"2 1 {fg_us} read 528384 4096\n"]),
    }


def _span_ns(doc: dict, job: str) -> int:
    j = next(x for x in doc["jobs"] if x["jobname"] == job)
    return j["last_ns"] - j["first_ns"]


def test_a_clocked_job_goes_on_until_the_others_finish(tmp_path: Path) -> None:
    # every 1 ms, 8 KiB each, from 0 again past 32 KiB: without the wrap its reads
    # would pass the 1 MiB target's end within ~130 of them
    doc = _doc(tmp_path, _jobs("clock 1000 0 32768\n"))
    ck = doc["dependencies"]["clock_jobs"]
    n = ck["jobs"]["bdm"]["requests"]
    assert ck["on"] is True and ck["requests"] == n and ck["jobs"]["bdm"]["period_us"] == 1000.0
    # at most one a period over the others' run (and its start), and some
    assert 1 <= n <= _span_ns(doc, "fg") // 1_000_000 + 2
    bdm = next(x for x in doc["jobs"] if x["jobname"] == "bdm")["read"]
    assert (bdm["total_ios"], bdm["io_bytes"]) == (1 + n, (1 + n) * BLOCK)
    assert doc["dependencies"]["issued_before_predecessor"] == 0


def test_the_switch_and_a_plan_of_clocked_jobs_alone_stop_at_the_log(tmp_path: Path) -> None:
    doc = _doc(tmp_path, _jobs("clock 1000 0 32768\n"), IOTAPE_LANES_CLOCK="0")
    assert doc["dependencies"]["clock_jobs"]["on"] is False
    assert doc["dependencies"]["clock_jobs"]["requests"] == 0
    alone = tmp_path / "alone"
    alone.mkdir()
    jobs = _jobs("clock 1000 0 32768\n")
    del jobs["fg"]
    doc = _doc(alone, jobs)  # nothing to outlive: it ends with its log
    assert doc["dependencies"]["clock_jobs"]["requests"] == 0


@pytest.mark.parametrize("line", ["clock 0 0 4096\n", "clock 1000 4096 4096\n", "clock 1000\n"])
def test_a_bad_clock_line_is_one_line_naming_it(tmp_path: Path, line: str) -> None:
    _lanes_plan(tmp_path, _jobs(line))
    p = _run(tmp_path)
    assert p.returncode == 2 and "bdm.log:4:" in p.stderr and p.stderr.count("\n") == 1, p.stderr


def _with_bdm(path: Path, n: int, sequential: bool = True, timers: bool = False) -> Path:
    """test_timer_writes' trace (a session, a log writer) and a maintenance reader
    (bdm-read, ese-bdm-0): `n` reads PERIOD apart, each where the one before ended
    unless not `sequential`."""
    parts = []
    for k in range(n):
        # its service varies (a seek), its beat does not: a clock's
        x = _req(2_000_000 + k * PERIOD, 3_000_000 + (k % 5) * 2_000_000, BDM, "bdm-read",
                 "read", 0)  # fmt: skip
        x["offset"] = (k if sequential else (k * 7919) % 97) * BLOCK
        x["bytes"], x["comm"] = BLOCK, b"ese-bdm-0"
        parts.append(x)
    return _trace(path, timers, extra=parts)


def _plan(tmp_path: Path, sequential: bool = True, **kw) -> tuple[Path, dict]:
    source = _with_bdm(tmp_path / "source.iot", 2)
    cal = _with_bdm(tmp_path / "cal.iot", 20, sequential, timers=True)
    return plan_onto_file(tmp_path, source, cal, **kw)


def _bdm_log(jobdir: Path) -> list[str]:
    return (jobdir / "iologs" / f"db0.bdm-read.t{BDM}.log").read_text().splitlines()


def _clocks(man: dict) -> list[dict] | None:
    return next(d for d in man["dependencies"] if d["stream"] == "db0.bdm-read").get("clock_jobs")


def test_a_role_on_the_targets_clock_goes_on_after_the_trace(tmp_path: Path, capsys) -> None:
    jobdir, man = _plan(tmp_path)
    log = _bdm_log(jobdir)
    hi = max(t["reach_bytes"] for t in man["targets"])
    assert log[-1] == f"clock {PERIOD // 1000} 0 {hi}"
    assert sum(x.startswith("clock") for x in log) == 1
    # its logged requests wait for nothing: at their recorded times, as a clock's
    assert [x.split()[1] for x in log[2:-1]] == ["-", "-"]
    assert not any(" or " in x or " join " in x for x in log)
    (c,) = _clocks(man)
    assert (c["period_us"], c["why"], c["target_requests"], c["target_sequential"]) == (
        PERIOD // 1000, None, 20, 1.0
    )  # fmt: skip
    _print(man, jobdir, False, False)
    assert "; on its own clock: ese-bdm-0 every 40000 us until the others finish" in (
        capsys.readouterr().out
    )  # fmt: skip
    out = subprocess.run([str(runner.LANES), "replay.fio"], cwd=jobdir, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["dependencies"]["issued_before_predecessor"] == 0


def test_a_clock_that_jumps_about_and_clock_jobs_recorded_get_none(tmp_path: Path) -> None:
    jobdir, man = _plan(tmp_path, sequential=False)
    (c,) = _clocks(man)
    assert c["period_us"] is None and c["why"].startswith("not sequential")
    assert not any(x.startswith("clock") for x in _bdm_log(jobdir))
    other = tmp_path / "recorded"
    other.mkdir()
    jobdir, man = _plan(other, clock_jobs="recorded")
    assert _clocks(man) is None
    assert not any(x.startswith("clock") for x in _bdm_log(jobdir))


def test_clocks_are_periodic_sequential_threads(tmp_path: Path) -> None:
    with open_trace(_with_bdm(tmp_path / "t.iot", 20)) as t:
        got = clockjobs.clocks(t.read_all())
    assert got == {("bdm-read", "ese-bdm-0"): clockjobs.Clock(PERIOD, 20, 1.0)}
    with open_trace(_with_bdm(tmp_path / "few.iot", clockjobs.MIN_REQUESTS - 1)) as t:
        assert clockjobs.clocks(t.read_all()) == {}


def test_bad_clock_jobs_is_one_line(tmp_path: Path) -> None:
    source = _with_bdm(tmp_path / "source.iot", 2)
    with pytest.raises(IotapeError, match="--clock-jobs: only with --think-calibrate"):
        plan(PlanOptions(trace=source, jobdir=tmp_path / "jobs", timing="dependent",
                         targets=[f"all={tmp_path / 'x.img'}"], create_file=MIB,
                         clock_jobs="recorded"))  # fmt: skip
    assert not (tmp_path / "jobs").exists()
