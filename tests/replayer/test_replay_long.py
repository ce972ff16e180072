"""Long traces (issue 23): windows of fio processes on one clock, the stamped iologs,
the wake-up floor beside the replay, and fidelity per time window."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_replay_plan import _targets, _trace
from test_replay_run import _record_fio

from base.errors import IotapeError
from replayer.plan import exact, iolog
from replayer.plan.build import PlanOptions, plan
from replayer.run import execute as runmod
from replayer.run import fidelity, launch, timewindows, wakeup

needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")


def _jobs_of(jobfile: str) -> list[str]:
    return [n for n in re.findall(r"^\[(\S+)\]$", jobfile, re.M) if n != "global"]


@needs_fio
def test_more_pieces_than_one_fio_process_holds_become_windows(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(exact, "MAX_JOBS", 40)
    monkeypatch.setattr(exact, "WINDOW_JOBS", 20)
    t = _trace(tmp_path / "t.iot", seconds=4, rate=200)
    jobdir = tmp_path / "jobs"
    man = plan(PlanOptions(t, jobdir, mode="exact", targets=_targets(tmp_path, 1), windows=True))
    # Pieces keep --segment's length however long the trace (before: fewer, longer).
    assert man["requests_per_job"] == PlanOptions.segment
    wins = man["windows"]
    assert len(wins) == -(-len(man["jobs"]) // 20) > 2
    seen: list[str] = []
    firsts = []
    for w in wins:
        text = (jobdir / w["jobfile"]).read_text()
        names = _jobs_of(text)
        assert len(names) == w["jobs"] <= 20
        # No startdelay: a window's genesis comes whenever its files are set up.
        assert "startdelay" not in text.split("[global]")[1]
        seen += names
        assert "clocksource=clock_gettime" in text and "invalidate=0" in text
        # Each window is its own fio process: stock job files fio accepts.
        p = subprocess.run(
            ["fio", "--parse-only", w["jobfile"]], cwd=jobdir, capture_output=True, text=True
        )
        assert p.returncode == 0, p.stderr
        first = min(
            int((jobdir / "iologs" / f"{n}.log").read_text().split("\n")[4].split()[0])
            for n in names
        )
        firsts.append(first - iolog.MONO_BASE_US - iolog.T0_US)
        # Launched its set-up time before its first piece (window 0: before the trace's 0).
        setup = exact.setup_us(w["jobs"], windowed=True)
        assert w["launch_us"] == (firsts[-1] if w is not wins[0] else 0) - setup
    # Every job in exactly one window, the windows in time order.
    assert sorted(seen) == sorted(j["name"] for j in man["jobs"])
    assert firsts == sorted(firsts)
    assert [w["launch_us"] for w in wins] == sorted(w["launch_us"] for w in wins)
    # The logs leave their wait line's time for `replay run` to stamp.
    log = jobdir / "iologs" / f"{man['jobs'][0]['name']}.log"
    assert log.read_text().split("\n")[1].startswith("0" * iolog.STAMP_WIDTH + " ")


def test_stamp_makes_the_first_wait_absolute_and_refuses_other_logs(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    iolog.write(
        log,
        "/dev/x",
        np.array([0, 500]),
        np.array([0, 1]),
        np.array([0, 4096]),
        np.array([4096, 4096]),
        start_us=iolog.MONO_BASE_US,
        stamped=True,
    )
    before = log.read_text()
    iolog.stamp(log, 123_456_789)
    lines = log.read_text().split("\n")
    wait = int(lines[1].split()[0])
    add = int(lines[2].split()[0])
    # fio's first wait is `add - wait` after CLOCK_MONOTONIC's 0: base + the add's time.
    assert add - wait == 123_456_789 + iolog.T0_US - iolog.LEAD_US
    assert len(log.read_text()) == len(before)
    iolog.stamp(log, 5)  # a second run re-stamps
    assert int(log.read_text().split("\n")[1].split()[0]) == iolog.MONO_BASE_US - 5
    plain = tmp_path / "p.log"
    iolog.write(
        plain, "/dev/x", np.array([0]), np.array([0]), np.array([0]), np.array([4096]), start_us=0
    )
    with pytest.raises(IotapeError, match="not a stamped"):
        iolog.stamp(plain, 5)


@needs_fio
def test_fio_waits_for_the_stamped_absolute_time(tmp_path: Path) -> None:
    """fio 3.33 with clocksource=clock_gettime: a job's first wait ends at the
    stamped monotonic time, whenever fio started (the windows rely on it)."""
    f = tmp_path / "f.img"
    f.write_bytes(b"\0" * (1 << 20))
    log = tmp_path / "a.log"
    iolog.write(
        log,
        str(f),
        np.array([0, 300_000]),
        np.array([0, 0]),
        np.array([0, 4096]),
        np.array([4096, 4096]),
        start_us=iolog.MONO_BASE_US,
        stamped=True,
    )
    base = time.monotonic_ns() // 1000 + 1_500_000
    iolog.stamp(log, base)
    (tmp_path / "a.fio").write_text(f"[a]\nthread=1\nclocksource=clock_gettime\nread_iolog={log}\n")
    p = subprocess.run(
        ["fio", "--output-format=json", "a.fio"], cwd=tmp_path, capture_output=True, text=True
    )
    end = time.monotonic_ns() // 1000
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout[p.stdout.index("{") :])["jobs"][0]["read"]["total_ios"] == 2
    # Not before the last request's absolute time (base + 300 ms).
    assert end >= base + 300_000


def test_windows_report_error_per_window_beside_the_floor() -> None:
    to = np.arange(0, 10_000_000_000, 1_000_000, dtype=np.int64)  # 10 s, 1000 IOPS
    tr = to.copy()
    tr[9900:] += 50_000_000  # the last 100 requests 50 ms late: past the end
    pairs = np.arange(len(to))
    floor = {
        "overall": {"p99_ms": 0.2},
        "seconds": [
            {"mono_s": 100 + s, "wakeups": 2000, "p99_ms": 0.2, "max_ms": 1.0} for s in range(10)
        ],
    }
    rows = timewindows.windows(to, tr, pairs, pairs, int(to[-1]), floor, 100 * 10**9)
    assert [r["from_s"] for r in rows] == [0.0, 5.0]
    assert rows[0]["issue_max_ms"] == 0 and rows[1]["issue_max_ms"] == 50.0
    assert rows[0]["floor_p99_ms"] == rows[1]["floor_p99_ms"] == 0.2
    assert rows[1]["requests"] == [5000, 4950]  # 50 of them pushed past 10 s
    v = timewindows.verdict(0.1, floor, rows)
    assert v["p99_over_floor"] == 0.5 and not v["meets_goal"]
    assert v["worst_window_over_floor"] == rows[1]["p99_over_floor"] > 5


def test_wakeup_probe_summarises_per_second() -> None:
    stop = [False]
    res: dict = {}
    th = threading.Thread(target=lambda: res.update(wakeup.probe(stop)))
    th.start()
    time.sleep(1.2)
    stop[0] = True
    th.join()
    assert res["overall"]["wakeups"] > 100
    assert sum(s["wakeups"] for s in res["seconds"]) == res["overall"]["wakeups"]
    assert all(s["p99_ms"] >= s["p50_ms"] >= 0 for s in res["seconds"])


@pytest.mark.kernel
def test_windowed_replay_runs_every_request_on_one_clock(
    loop_factory, tmp_path: Path, monkeypatch
) -> None:
    src, dst = loop_factory(256), loop_factory(256)
    orig = _record_fio(src.path, tmp_path / "orig.iot", seconds=3)
    monkeypatch.setattr(exact, "MAX_JOBS", 60)
    monkeypatch.setattr(exact, "WINDOW_JOBS", 30)
    jobs = tmp_path / "jobs"
    man = plan(PlanOptions(orig, jobs, mode="exact", targets=[f"all={dst.path}"], windows=True))
    assert len(man["windows"]) > 1
    runmod.run(jobs, tmp_path / "rep.iot", [])
    # One fio JSON per window, merged: every job ran.
    merged = json.loads((jobs / "results" / "fio.json").read_text())
    assert sorted(j["jobname"] for j in merged["jobs"]) == sorted(j["name"] for j in man["jobs"])
    for k in range(len(man["windows"])):
        assert (jobs / launch.window_output(k)).exists()
    c = fidelity.compare(orig, tmp_path / "rep.iot")
    assert c["overall"]["match_share"] >= 0.99
    # The floor measured during the run, and the error per window beside it.
    assert c["wakeup_floor"]["wakeups"] > 1000
    assert len(c["windows"]) == 1 and c["windows"][0]["requests"][0] > 0
    assert "floor_p99_ms" in c["windows"][0]
    assert set(c["floor_goal"]) >= {"p99_over_floor", "worst_window_over_floor", "meets_goal"}


def test_without_windows_a_long_trace_fits_one_fio_process(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(exact, "MAX_JOBS", 40)
    monkeypatch.setattr(exact, "WINDOW_JOBS", 20)
    t = _trace(tmp_path / "t.iot", seconds=4, rate=200)
    opts = PlanOptions(t, tmp_path / "jobs", mode="exact", targets=_targets(tmp_path, 1))
    opts.layout = "pieces"  # auto plans lanes here (test_replay_lanes.py)
    man = plan(opts)
    # Pieces: one fio process (fio's own clock), its pieces longer than --segment.
    # MAX_JOBS is a target: each stream's last piece is shorter (fio takes 4096), and
    # going past it must not cut the plan into windows (a 10 min trace's 2,004 were).
    assert 40 < len(man["jobs"]) <= 2 * 40
    assert man["windows"] is None
    assert man["requests_per_job"] > PlanOptions.segment
    assert "clocksource=cpu" in (tmp_path / "jobs" / "replay.fio").read_text()
