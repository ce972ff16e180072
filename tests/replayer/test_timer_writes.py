"""A log writer's timer writes learnt from the target's recording (`replay plan
--timing dependent --think-calibrate TARGET_TRACE`, replayer/plan/timerwrites.py):
which writes are a timer's (nobody woken after them, not a turn's first of two),
which job gets `lazy REST_US` and why another does not, `--timer-writes recorded`,
and iotape-lanes running the plan in order. No root: synthetic traces, a file
target."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_schedsplit import _sched
from test_wakeedges import _req, _wake
from trace_helpers import write_parts

from base.errors import IotapeError
from iotape.commands.replay.plan import _print
from recorder.tracefile import open_trace
from recorder.tracefile.format import SCHED_FIELDS
from replayer.plan import timerwrites
from replayer.plan.build import PlanOptions, plan
from replayer.plan.wakeedges import read_wakes
from replayer.run import runner

MIB = 1 << 20
SESSION, WRITER = 500, 502
SEG = 4096
LAT = 1_000_000  # every write's service
REST = 3_000_000  # the target's timer: its rest after the turn's last write
CYCLES = 12


def _writer(timers: bool) -> tuple[list[np.ndarray], int]:
    """The log writer's turns: its full segments, then its partial segment right
    where they end (20 us later: one turn), after which it wakes the session (a
    durable commit). With `timers`, after each turn a write of the partial segment,
    now full, REST after the turn and nobody woken (its timer), and the next turn
    where that ends 1 ms later; without, the next turn on the partial segment
    again. Also the end of the last write."""
    parts, t, off = [], 1_000_000, 0
    for _ in range(CYCLES):
        full = _req(t, LAT, WRITER, "log-write", "write", 0)
        full["offset"], full["bytes"] = off, 2 * SEG
        t += LAT + 20_000
        part = _req(t, LAT, WRITER, "log-write", "write", 0)
        part["offset"], part["bytes"] = off + 2 * SEG, SEG
        t += LAT
        parts += [full, part, _wake(t + 10_000, WRITER, SESSION)]
        off += 2 * SEG
        if timers:
            t += REST
            lazy = _req(t, LAT, WRITER, "log-write", "write", 0)
            lazy["offset"], lazy["bytes"] = off, SEG
            parts.append(lazy)
            t += LAT + 1_000_000
            off += SEG
        else:
            t += 1_000_000
    for x in parts:
        if x["tid"][0] == WRITER:
            x["comm"] = b"ese-log-0"
    return parts, t


def _trace(
    path: Path, timers: bool, think: int = 40_000, extra: list[np.ndarray] | None = None
) -> Path:
    """The log writer (above) and a synchronous session thinking `think` after each
    read, with sched records (what --think-calibrate needs), and wake records; and
    the records `extra`."""
    parts, end = _writer(timers)
    parts += extra or []
    t, k = 1_000_000, 0
    while t < end:
        x = _req(t, 500_000, SESSION, "db-read", "read", 100 + k)
        x["comm"] = b"ese-user-0-0"
        s = _sched(t, SESSION, 0, 0)
        s[SCHED_FIELDS["runs"]] = k
        parts += [x, s]
        t += 500_000 + think
        k += 1
    return write_parts(path, parts, wakes=True, sched=True)


def _plan(tmp_path: Path, source_timers: bool, target_timers: bool, **kw) -> tuple[Path, dict]:
    source = _trace(tmp_path / "source.iot", source_timers)
    cal = _trace(tmp_path / "cal.iot", target_timers, think=10_000)
    return plan_onto_file(tmp_path, source, cal, **kw)


def plan_onto_file(tmp_path: Path, source: Path, cal: Path, **kw) -> tuple[Path, dict]:
    """`source` planned dependent onto a 4 MiB file, calibrated by `cal`."""
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * (4 * MIB))
    jobdir = tmp_path / "jobs"
    opts = PlanOptions(trace=source, jobdir=jobdir, targets=[f"all={target}"],
                       timing="dependent", think_calibrate=cal, **kw)  # fmt: skip
    return jobdir, plan(opts)


def _log(jobdir: Path, job: str) -> list[str]:
    return (jobdir / "iologs" / f"{job}.log").read_text().splitlines()


def _timers(man: dict) -> dict[str, dict]:
    return {d["stream"]: d.get("timer_writes") for d in man["dependencies"]}


def test_timer_writes_are_those_nobody_waited_for_outside_a_turn(tmp_path: Path) -> None:
    path = _trace(tmp_path / "t.iot", timers=True)
    with open_trace(path) as t:
        r = t.read_all()
    w = timerwrites.writers(r, read_wakes(str(path)))[("log-write", "ese-log-0")]
    # each cycle: a turn's first write (a turn), its last (woke the session), a timer's;
    # the last write has no next request to tell it by
    assert (w.writes, w.woke, w.timer) == (3 * CYCLES - 1, CYCLES, CYCLES - 1)
    assert w.rest_ns() == REST and w.is_log_writer()
    assert ("db-read", "ese-user-0-0") not in timerwrites.writers(r, read_wakes(str(path)))


def test_a_fast_trace_replayed_on_a_slow_target_gets_its_writers_timer(tmp_path: Path) -> None:
    jobdir, man = _plan(tmp_path, source_timers=False, target_timers=True)
    log = _log(jobdir, f"db0.log-write.t{WRITER}")
    assert log[2] == f"lazy {REST // 1000}"
    assert not any(x.startswith("lazy") for x in _log(jobdir, f"db0.db-read.t{SESSION}"))
    (t,) = _timers(man)["db0.log-write"]
    assert t["rest_us"] == REST // 1000 and t["why"] is None
    assert t["target_writes"][:2] == [3 * CYCLES - 1, CYCLES - 1]
    assert t["source_writes"][1] == 0
    assert "timer writes: ese-log-0 every 3000 us" in (jobdir / "replay.fio").read_text()
    out = subprocess.run([str(runner.LANES), "replay.fio"], cwd=jobdir, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    deps = json.loads(out.stdout)["dependencies"]
    assert deps["issued_before_predecessor"] == 0
    assert deps["lazy_writes"]["jobs"][f"db0.log-write.t{WRITER}"]["rest_us"] == REST / 1000


@pytest.mark.parametrize(
    ("source", "target", "why"),
    [
        (True, True, "the trace holds the target's timer writes already"),
        (False, False, "0 timer writes of"),
    ],
)
def test_no_timer_where_the_trace_has_them_or_the_target_none(
    tmp_path: Path, source: bool, target: bool, why: str
) -> None:
    jobdir, man = _plan(tmp_path, source_timers=source, target_timers=target)
    (t,) = _timers(man)["db0.log-write"]
    assert t["rest_us"] is None and t["why"].startswith(why)
    assert not any(x.startswith("lazy") for x in _log(jobdir, f"db0.log-write.t{WRITER}"))


def test_timer_writes_recorded_keeps_only_the_traces(tmp_path: Path, capsys) -> None:
    jobdir, man = _plan(tmp_path, False, True, timer_writes="recorded")
    assert all(v is None for v in _timers(man).values())
    assert not any(x.startswith("lazy") for x in _log(jobdir, f"db0.log-write.t{WRITER}"))
    _print(man, jobdir, False, False)
    assert "timer writes" not in capsys.readouterr().out


def test_replay_plan_says_which_writer_has_a_timer(tmp_path: Path, capsys) -> None:
    jobdir, man = _plan(tmp_path, False, True)
    _print(man, jobdir, False, False)
    out = capsys.readouterr().out
    said = "; timer writes: ese-log-0 every 3000 us its next write waits (the target's 11 of 35"
    assert said in out


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"timer_writes": "always"}, "--timer-writes always: not target or recorded"),
        ({"timer_writes": "recorded", "think_calibrate": None}, "--timer-writes: only with "
         "--think-calibrate"),
    ],
)  # fmt: skip
def test_bad_timer_writes_is_one_line(tmp_path: Path, kw: dict, match: str) -> None:
    source = _trace(tmp_path / "source.iot", False)
    cal = _trace(tmp_path / "cal.iot", True)
    opts = {"think_calibrate": cal, **kw}
    with pytest.raises(IotapeError, match=match):
        target = f"all={tmp_path / 'x.img'}"
        plan(PlanOptions(trace=source, jobdir=tmp_path / "jobs", timing="dependent",
                         targets=[target], create_file=MIB, **opts))  # fmt: skip
    assert not (tmp_path / "jobs").exists()
