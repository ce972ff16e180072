"""Short thinks at the target's CPU (`replay plan --timing dependent
--think-calibrate TARGET_TRACE`, replayer/plan/thinkcal.py): which thinks a
calibration scales and by what, which it keeps, and the one-line errors. No root:
synthetic traces, a file target; iotape-lanes runs the calibrated plan."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_schedsplit import _sched
from test_wakeedges import _req
from trace_helpers import write_parts

from base.errors import IotapeError
from iotape.commands.replay.plan import _print
from recorder.tracefile.format import SCHED_FIELDS
from replayer.plan import thinkcal
from replayer.plan.build import PlanOptions, plan
from replayer.run import runner

MIB = 1 << 20
SESSION, WRITER = 500, 502
SERVICE = 500_000
N = 40
SHORT = 40_000  # the source's short think: its CPU between requests
LONG = 600_000  # every 8th think: a wait over the spin line (application pacing)
WARM = 10_000  # the target's short think
SLEPT = 150_000  # a target think with a sleep in it (runs 3): a wait, not CPU


def _trace(
    path: Path, think: int, comm: bytes = b"ese-user-0-0", slept: bool = False,
    sched: bool = False, long: bool = True, stream: str = "db-read",
) -> Path:  # fmt: skip
    """A synchronous session (db-read, `comm`) thinking `think` after each read's
    completion (every 8th LONG where `long`; every 5th SLEPT with a sleep in it
    where `slept`), and a log writer (log-write, ese-log-0) with 3 or more
    requests in flight; sched records for the session where `sched`."""
    parts, t = [], 1_000_000
    runs = 0
    for k in range(N):
        x = _req(t, SERVICE, SESSION, stream, "read", k)
        x["comm"] = comm
        parts.append(x)
        gap = LONG if long and k % 8 == 7 else think
        asleep = slept and k % 5 == 4
        if sched:
            s = _sched(t, SESSION, 0, 0)
            s[SCHED_FIELDS["runs"]] = runs
            parts.append(s)
        # the next request's record counts the runs in this think
        runs += 3 if asleep else 1
        t += SERVICE + (SLEPT if asleep else gap)
    for k in range(12):  # three writes in flight at a time: asynchronous
        x = _req(1_000_000 + (k // 3) * 2_000_000 + (k % 3) * 1_000, 1_500_000, WRITER,
                 "log-write", "write", 100 + k)  # fmt: skip
        x["comm"] = b"ese-log-0"
        parts.append(x)
    return write_parts(path, parts, wakes=sched, sched=sched)


def _plan(tmp_path: Path, name: str, cal: Path | None, **kw) -> tuple[Path, dict]:
    source = tmp_path / "source.iot"
    if not source.exists():
        _trace(source, SHORT)
    target = tmp_path / "target.img"
    if not target.exists():
        target.write_bytes(b"\0" * (4 * MIB))
    jobdir = tmp_path / name
    opts = PlanOptions(trace=source, jobdir=jobdir, targets=[f"all={target}"],
                       think_calibrate=cal, **{"timing": "dependent", **kw})  # fmt: skip
    return jobdir, plan(opts)


def _thinks(jobdir: Path, job: str) -> list[str]:
    log = jobdir / "iologs" / f"{job}.log"
    return [x.split()[2] for x in log.read_text().splitlines()[2:]]


def test_short_thinks_take_the_targets_cpu_and_long_ones_stay(tmp_path: Path) -> None:
    cal = _trace(tmp_path / "cal.iot", WARM, slept=True, sched=True, long=False)
    jobdir, man = _plan(tmp_path, "cal", cal)
    plain, bare = _plan(tmp_path, "plain", None)
    # without a calibration, none of its keys (the plan of before)
    assert "think_calibration" not in json.loads((plain / "plan.json").read_text())
    assert all("think_calibration" not in d for d in bare["dependencies"])
    session = f"db0.db-read.t{SESSION}"
    got, was = _thinks(jobdir, session), _thinks(plain, session)
    assert was[0].startswith("@") and got[0] == was[0]  # no predecessor: its time
    assert sorted(set(was[1:])) == [str(SHORT // 1000), str(LONG // 1000)]
    for a, b in zip(got[1:], was[1:], strict=True):
        # under the spin line: the target's CPU think (its sleeps left out of the
        # factor); over it: as recorded
        assert a == (b if int(b) * 1000 >= thinkcal.LINE_NS else str(WARM // 1000))
    d = {x["stream"]: x for x in man["dependencies"]}
    (s,) = d["db0.db-read"]["think_calibration"]
    assert s["matched"] == "comm" and s["factor"] == pytest.approx(WARM / SHORT)
    longs = sum(k % 8 == 7 for k in range(N - 1))
    assert (s["thinks"], s["long_thinks_kept"]) == (N - 1 - longs, longs)
    assert s["target_cpu_think_us"][0] == N - 1 - (N - 1) // 5  # the slept ones left out
    # an asynchronous job keeps its thinks, and says why
    (w,) = d["db0.log-write"]["think_calibration"]
    assert w["factor"] is None and "asynchronous" in w["why"]
    assert _thinks(jobdir, f"db0.log-write.t{WRITER}") == _thinks(plain, f"db0.log-write.t{WRITER}")
    assert man["think_calibration"] == str(cal)
    assert (
        "short thinks at the target's CPU: ese-user-0-0 x0.25"
        in (jobdir / "replay.fio").read_text()
    )


def test_replay_plan_says_what_it_applied(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cal = _trace(tmp_path / "cal.iot", WARM, sched=True, long=False)
    jobdir, man = _plan(tmp_path, "cal", cal)
    _print(man, jobdir, False, False)
    out = capsys.readouterr().out
    assert "short thinks at the target's CPU: ese-user-0-0 x0.25 (comm:" in out
    assert "ese-log-0 as recorded (asynchronous" in out


def test_a_role_is_matched_by_its_name_digits_aside(tmp_path: Path) -> None:
    cal = _trace(tmp_path / "cal.iot", WARM, comm=b"ese-user-3-7", sched=True, long=False)
    _, man = _plan(tmp_path, "cal", cal)
    (s,) = {x["stream"]: x for x in man["dependencies"]}["db0.db-read"]["think_calibration"]
    assert s["matched"] == "pattern" and s["factor"] == pytest.approx(WARM / SHORT)


@pytest.mark.parametrize(
    ("comm", "stream", "role"),
    [(b"postgres", "db-read", "db-read/postgres"), (b"ese-user-0-0", "bdm-read", "bdm-read/ese")],
)
def test_a_calibration_of_other_roles_is_one_line_and_writes_nothing(
    tmp_path: Path, comm: bytes, stream: str, role: str
) -> None:
    # another application's threads, or the same thread name doing another stream
    cal = _trace(tmp_path / "cal.iot", WARM, comm=comm, sched=True, stream=stream)
    with pytest.raises(IotapeError, match=rf"--think-calibrate .*cal.iot: no job could be "
                       rf"calibrated: its roles \(stream/thread\) {role}"):  # fmt: skip
        _plan(tmp_path, "cal", cal)
    assert not (tmp_path / "cal").exists()


@pytest.mark.parametrize(
    ("what", "match"),
    [
        ("nosched", "no sched records \\(record it with --wakes\\)"),
        ("notrace", "--think-calibrate .*cal.iot: "),
        ("afap", "--think-calibrate: only with --timing dependent"),
    ],
)
def test_bad_calibration_input_is_one_line(tmp_path: Path, what: str, match: str) -> None:
    cal = tmp_path / "cal.iot"
    if what == "notrace":
        cal.write_text("not a trace\n")
    else:
        _trace(cal, WARM, sched=what != "nosched")
    kw = {"timing": "afap"} if what == "afap" else {}
    with pytest.raises(IotapeError, match=match) as e:
        _plan(tmp_path, "cal", cal, **kw)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "cal").exists()


def test_iotape_lanes_runs_a_calibrated_plan_in_order(tmp_path: Path) -> None:
    assert runner.LANES.exists(), f"{runner.LANES}: run `make native`"
    cal = _trace(tmp_path / "cal.iot", WARM, sched=True, long=False)
    jobdir, _ = _plan(tmp_path, "cal", cal)
    out = subprocess.run(
        [str(runner.LANES), "replay.fio"], cwd=jobdir, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["dependencies"]["issued_before_predecessor"] == 0
    assert sum(j[d]["total_ios"] for j in res["jobs"] for d in ("read", "write")) == N + 12


def test_cpu_thinks_are_a_synchronous_threads_without_a_sleep(tmp_path: Path) -> None:
    from recorder.tracefile import open_trace
    from replayer.plan import schedsplit

    path = _trace(tmp_path / "t.iot", WARM, slept=True, sched=True, long=False)
    with open_trace(path) as t:
        r = t.read_all()
    got = thinkcal.cpu_thinks(r, schedsplit.read_split(str(path)))
    assert set(got) == {("db-read", "ese-user-0-0")}  # the log writer is asynchronous
    assert set(got[("db-read", "ese-user-0-0")].tolist()) == {WARM}
    assert thinkcal.asynchronous(r) == {("log-write", WRITER)}
    assert thinkcal.pattern("ese-user-0-12") == "ese-user-#-#"
