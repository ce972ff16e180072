"""A thread's CPU a cycle, spent by the replay (`replay plan --timing dependent
--think-calibrate TARGET --cycle-cpu target`, replayer/plan/cpucycle.py and
replayer/src/cpubudget.c): the job's `cpu US` line (the target's mean CPU a cycle
for its role), its thinks less their CPU (0 without a sleep, the sleep beyond the
source's CPU a cycle with one), the jobs it leaves, the one-line errors; and
iotape-lanes spending it: each cycle's thread CPU at least the line's, counted,
the switch, a bad line. No root: synthetic traces, a file target."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_evloop import _plan as _lanes_plan
from test_evloop import _run
from test_schedsplit import _sched
from test_wakeedges import _req
from trace_helpers import write_parts

from base.errors import IotapeError
from iotape.commands.replay.plan import _print
from recorder.tracefile.format import SCHED_FIELDS
from replayer.plan.build import PlanOptions, plan
from replayer.run import runner

MIB = 1 << 20
SESSION, WRITER = 500, 502
SERVICE = 500_000
N = 40
SRC_CPU = 30_000  # the source's CPU a cycle (ns), all of it in a think without a sleep
TGT_CPU = 12_000  # the target's
SLEEP = 400_000  # every 4th think (k % 4 == 3) also sleeps this long


def _trace(path: Path, cpu: int, sched: bool = True, comm: bytes = b"fio-0") -> Path:
    """A synchronous reader (db-read, `comm`) whose every cycle spends `cpu` of CPU,
    thinking that after each completion (every 4th also SLEEP asleep: runs 2), and
    an asynchronous writer (3 in flight); sched records for the reader where
    `sched`."""
    parts, t, used, runs = [], 1_000_000, 0, 0
    for k in range(N):
        x = _req(t, SERVICE, SESSION, "db-read", "read", k)
        x["comm"] = comm
        parts.append(x)
        if sched:
            s = _sched(t, SESSION, 0, used)
            s[SCHED_FIELDS["runs"]] = runs
            parts.append(s)
        slept = k % 4 == 3
        used += cpu
        runs += 2 if slept else 1  # the next request's record counts this think's runs
        t += SERVICE + cpu + (SLEEP if slept else 0)
    for k in range(12):
        x = _req(1_000_000 + (k // 3) * 2_000_000 + (k % 3) * 1_000, 1_500_000, WRITER,
                 "log-write", "write", 100 + k)  # fmt: skip
        x["comm"] = b"ese-log-0"
        parts.append(x)
    return write_parts(path, parts, wakes=sched, sched=sched)


def _plan(tmp_path: Path, name: str, cal: Path | None, source_sched: bool = True, **kw):
    source = tmp_path / f"source{int(source_sched)}.iot"
    if not source.exists():
        _trace(source, SRC_CPU, sched=source_sched)
    target = tmp_path / "target.img"
    if not target.exists():
        target.write_bytes(b"\0" * (4 * MIB))
    jobdir = tmp_path / name
    opts = PlanOptions(trace=source, jobdir=jobdir, targets=[f"all={target}"],
                       think_calibrate=cal, **{"timing": "dependent", **kw})  # fmt: skip
    return jobdir, plan(opts)


def _lines(jobdir: Path, job: str) -> list[str]:
    return (jobdir / "iologs" / f"{job}.log").read_text().splitlines()


def test_a_synchronous_job_spends_the_targets_cpu_and_keeps_only_its_sleeps(
    tmp_path: Path,
) -> None:
    cal = _trace(tmp_path / "cal.iot", TGT_CPU)
    jobdir, man = _plan(tmp_path, "cyc", cal, cycle_cpu="target")
    plain, _ = _plan(tmp_path, "plain", cal)  # --cycle-cpu recorded: the plan of before
    session = f"db0.db-read.t{SESSION}"
    got, was = _lines(jobdir, session), _lines(plain, session)
    assert got[2] == f"cpu {TGT_CPU / 1000:.3f}" and not any(x.startswith("cpu") for x in was)
    thinks = [x.split()[2] for x in got[4:]]  # after the header, open, cpu and the first
    assert len(thinks) == N - 1
    for k, th in enumerate(thinks):
        # think k follows request k: with a sleep, its time beyond the source's CPU
        # a cycle, else none
        assert th == (str(SLEEP // 1000) if k % 4 == 3 else "0"), k
    d = {x["stream"]: x for x in man["dependencies"]}
    (s,) = d["db0.db-read"]["think_calibration"]
    assert s["cpu_us"] == TGT_CPU / 1000 and s["factor"] is None and s["why"] is None
    # every cycle of its (a thread's first has none before it)
    assert s["target_cycle_cpu_us"][:2] == [N - 1, TGT_CPU / 1000]
    assert s["source_cycle_cpu_us"][:2] == [N - 1, SRC_CPU / 1000]
    assert (s["thinks"], s["thinks_slept"]) == (N - 1, sum(k % 4 == 3 for k in range(N - 1)))
    # the asynchronous writer is not a cycle: no line, its thinks as before
    (w,) = d["db0.log-write"]["think_calibration"]
    assert w["cpu_us"] is None and "asynchronous" in w["why"]
    writer = f"db0.log-write.t{WRITER}"
    assert _lines(jobdir, writer) == _lines(plain, writer)
    assert (
        "fio-0 spends 12 us CPU a cycle (comm; the source's 30 us"
        in (jobdir / "replay.fio").read_text()
    )


def test_replay_plan_prints_the_cpu_a_cycle(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cal = _trace(tmp_path / "cal.iot", TGT_CPU, comm=b"fio-7")  # matched digits aside
    jobdir, man = _plan(tmp_path, "cyc", cal, cycle_cpu="target")
    _print(man, jobdir, False, False)
    assert "fio-0 spends 12 us CPU a cycle (pattern;" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("what", "kw", "match"),
    [
        ("source", {"cycle_cpu": "target"}, r"--cycle-cpu target: the trace .*source0.iot has "
         r"no sched records \(record it with --wakes\)"),
        ("nocal", {"cycle_cpu": "target"}, "--cycle-cpu: only with --think-calibrate"),
        ("bad", {"cycle_cpu": "cpu"}, "--cycle-cpu cpu: not target or recorded"),
    ],
)  # fmt: skip
def test_bad_cycle_cpu_input_is_one_line(tmp_path: Path, what: str, kw: dict, match: str) -> None:
    cal = None if what == "nocal" else _trace(tmp_path / "cal.iot", TGT_CPU)
    with pytest.raises(IotapeError, match=match) as e:
        _plan(tmp_path, "cyc", cal, source_sched=what != "source", **kw)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "cyc").exists()


def _spender(cpu_us: int, n: int = 20) -> dict[str, tuple[int, list[str]]]:
    """A job of n reads one after another, no think, spending `cpu_us` a cycle."""
    lines = [f"cpu {cpu_us}\n", "0 - @0 read 0 4096\n"]
    lines += [f"{k} {k - 1} 0 read {k * 4096} 4096\n" for k in range(1, n)]
    return {"reader": (1, lines)}


def test_iotape_lanes_spends_the_cpu_a_cycle_before_each_request(tmp_path: Path) -> None:
    assert runner.LANES.exists(), f"{runner.LANES}: run `make native`"
    _lanes_plan(tmp_path, _spender(3000))
    p = _run(tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    (job,) = doc["dependencies"]["cpu_cycle"]["jobs"].values()
    assert doc["dependencies"]["cpu_cycle"]["on"] is True
    assert job["cpu_us"] == 3000.0 and job["cycles"] == 19
    # each cycle after the first issue spent at least 3 ms of its thread's CPU
    assert job["thread_cpu_ms"] >= 19 * 3.0 and job["burned_ms"] > 0
    assert doc["dependencies"]["issued_before_predecessor"] == 0
    assert doc.get("evloop", {}).get("jobs", 0) == 0  # a thread of its own


def test_the_switch_turns_it_off(tmp_path: Path) -> None:
    _lanes_plan(tmp_path, _spender(3000))
    p = _run(tmp_path, IOTAPE_LANES_CPU="0")
    assert p.returncode == 0, p.stderr
    cyc = json.loads(p.stdout)["dependencies"]["cpu_cycle"]
    assert cyc["on"] is False
    assert (cyc["jobs"]["reader"]["cycles"], cyc["jobs"]["reader"]["burned_ms"]) == (0, 0.0)


@pytest.mark.parametrize("line", ["cpu 0\n", "cpu -4\n", "cpu x\n", "cpu 5 6\n", "cpu 2e6\n"])
def test_a_bad_cpu_line_is_one_line(tmp_path: Path, line: str) -> None:
    jobs = _spender(10, 2)
    jobs["reader"][1][0] = line
    _lanes_plan(tmp_path, jobs)
    p = _run(tmp_path)
    assert p.returncode == 2
    assert "not `cpu US (over 0, to 1000000)`" in p.stderr and len(p.stderr.splitlines()) == 1


def test_a_spending_plan_runs_in_order(tmp_path: Path) -> None:
    cal = _trace(tmp_path / "cal.iot", TGT_CPU)
    jobdir, _ = _plan(tmp_path, "cyc", cal, cycle_cpu="target")
    out = subprocess.run(
        [str(runner.LANES), "replay.fio"], cwd=jobdir, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["dependencies"]["issued_before_predecessor"] == 0
    (job,) = res["dependencies"]["cpu_cycle"]["jobs"].values()
    assert job["cycles"] == N - 1 and job["thread_cpu_ms"] >= (N - 1) * TGT_CPU / 1e6
