"""iotape-lanes (replayer/src/lanes.c): a plan of lanes replayed at each request's
microsecond from the same job file and iologs fio reads."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from base.errors import IotapeError
from replayer.plan import iolog
from replayer.plan.model import Manifest
from replayer.run import runner
from replayer.run.summarize import summarize

MIB = 1 << 20


def _lanes(tmp_path: Path, target: Path, logs: dict[str, list], extra: str = "") -> Path:
    """A job file of one lane per log: each log (t_us, action, offset, length) rows,
    its trace 0 at 200 ms after genesis."""
    text = "[global]\nioengine=psync\ndirect=1\nthread=1\nread_iolog_chunked=1\n" + extra
    for name, rows in logs.items():
        t, a, o, n = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
        iolog.write_v2(tmp_path / f"{name}.log", str(target), t, a, o, n, start_us=200_000)
        text += f"\n[{name}]\nread_iolog={name}.log\niodepth=1\nbs=65536\n"
    (tmp_path / "replay.fio").write_text(text)
    return tmp_path / "replay.fio"


def _run(tmp_path: Path, jobfile: str = "replay.fio") -> subprocess.CompletedProcess:
    assert runner.LANES.exists(), f"{runner.LANES}: run `make native`"
    return subprocess.run(
        [str(runner.LANES), jobfile], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


def _target(tmp_path: Path) -> Path:
    f = tmp_path / "target.img"
    f.write_bytes(b"\x01" * MIB)
    return f


R, W, T, S = iolog.READ, iolog.WRITE, iolog.TRIM, iolog.SYNC


def test_elapsed_is_the_runs_span_across_its_jobs(tmp_path: Path) -> None:
    """Two lanes 10 ms long each, the second 200 ms after the first: each job's
    runtime is its own span, the run's elapsed_ms (what the store takes as the
    replay's duration) spans both."""
    f = _target(tmp_path)
    _lanes(
        tmp_path,
        f,
        {
            "a": [(0, R, 0, 4096), (10_000, R, 4096, 4096)],
            "b": [(200_000, R, 8192, 4096), (210_000, R, 12288, 4096)],
        },
    )
    p = _run(tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    jobs = {j["jobname"]: j for j in doc["jobs"]}
    # Each job's runtime is its own span, from its first issue, not the run's; the
    # run's elapsed the span of all. Structural, not a bound a loaded host could
    # miss (how late a's first issue comes against b's last completion is the
    # host's: 0.2 ms against 0.19 ms once under the whole suite's load).
    for j in jobs.values():
        assert j["job_runtime"] == (j["last_ns"] - j["first_ns"]) // 1_000_000
    # never early: the trace's 0 is 200 ms after genesis (_lanes), b's first at 200 ms
    assert jobs["a"]["first_ns"] >= 200_000_000 and jobs["b"]["first_ns"] >= 400_000_000
    first = min(j["first_ns"] for j in jobs.values())
    last = max(j["last_ns"] for j in jobs.values())
    assert doc["elapsed_ms"] == (last - first) // 1_000_000


def test_every_request_is_issued_as_the_iolog_says(tmp_path: Path) -> None:
    """Reads, writes, a trim and a sync, over two lanes: each counted once in fio's
    JSON shape, the writes on the file, the trim's range zeroed, and the last
    request not before its microsecond (200 ms + 300.999 ms after the start)."""
    f = _target(tmp_path)
    _lanes(
        tmp_path,
        f,
        {
            "a": [(0, W, 0, 8192), (20_500, R, 0, 4096), (300_999, T, 65536, 4096)],
            "b": [(1_250, W, 131072, 65536), (40_000, S, 0, 0), (60_001, R, 131072, 65536)],
        },
    )
    t0 = time.monotonic()
    p = _run(tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["fio version"] == "iotape-lanes"
    jobs = {j["jobname"]: j for j in doc["jobs"]}
    assert [jobs["a"][d]["total_ios"] for d in ("read", "write", "trim", "sync")] == [1, 1, 1, 0]
    assert [jobs["b"][d]["total_ios"] for d in ("read", "write", "trim", "sync")] == [1, 1, 0, 1]
    assert jobs["b"]["write"]["io_bytes"] == 65536
    assert doc["issue_late_ns"]["requests"] == 6
    data = f.read_bytes()
    assert data[:8192] != b"\x01" * 8192  # written over
    assert data[65536 : 65536 + 4096] == b"\0" * 4096  # trimmed: a hole in a file
    assert data[69632:131072] == b"\x01" * (131072 - 69632)  # untouched between
    assert took >= 0.500999
    # What `replay run` keeps of it: fio's summary shape.
    rows = {r.job: r for r in summarize(doc)}
    assert rows["b"].write is not None and rows["b"].write.ios == 1 and rows["a"].trim is not None


def _one_line_error(p: subprocess.CompletedProcess, code: int, *parts: str) -> None:
    assert p.returncode == code, p.stderr
    err = p.stderr.strip()
    assert "\n" not in err and err.startswith("iotape-lanes: "), err
    for part in parts:
        assert part in err, err


@pytest.mark.parametrize(
    ("extra", "code", "parts"),
    [
        ("rate_iops=100\n", 2, ("replay.fio:6", "option rate_iops")),
        ("direct=0\n", 2, ("replay.fio:6", "direct=0")),
        ("iodepth=x\n", 2, ("replay.fio:6", "iodepth=x")),
        ("sync=sync\n", 2, ("sync=sync",)),
    ],
)
def test_an_option_it_does_not_replay_is_refused(tmp_path, extra, code, parts) -> None:
    _lanes(tmp_path, _target(tmp_path), {"a": [(0, R, 0, 4096)]}, extra)
    _one_line_error(_run(tmp_path), code, *parts)


def test_a_bad_iolog_line_names_the_log_and_line(tmp_path: Path) -> None:
    f = _target(tmp_path)
    _lanes(tmp_path, f, {"a": [(0, R, 0, 4096), (30_000, R, 4096, 4096)]})
    log = tmp_path / "a.log"
    lines = log.read_text().splitlines()
    lines[4] = f"{f} read 4096"
    log.write_text("\n".join(lines) + "\n")
    _one_line_error(_run(tmp_path), 1, "job a:", "a.log:5:", "not an iolog v2 line")


def test_a_version_3_log_is_refused(tmp_path: Path) -> None:
    f = _target(tmp_path)
    iolog.write(tmp_path / "a.log", str(f), *(np.array([x]) for x in (0, R, 0, 4096)))
    (tmp_path / "replay.fio").write_text("[a]\nread_iolog=a.log\n")
    _one_line_error(_run(tmp_path), 1, "a.log: not a version-2 iolog")


def test_a_missing_target_and_an_io_error_stop_the_run(tmp_path: Path) -> None:
    f = _target(tmp_path)
    _lanes(tmp_path, f, {"a": [(0, R, 0, 4096)]})
    f.unlink()
    _one_line_error(_run(tmp_path), 1, "job a:", "target.img: No such file")
    f.write_bytes(b"\0" * 4096)
    _lanes(tmp_path, f, {"a": [(0, R, 1000, 4096)]})  # unaligned for O_DIRECT
    _one_line_error(_run(tmp_path), 1, "read of 4096 bytes at 1000", "Invalid argument")


def test_sigterm_stops_a_long_wait_at_once(tmp_path: Path) -> None:
    _lanes(tmp_path, _target(tmp_path), {"a": [(0, R, 0, 4096), (60_000_000, R, 0, 4096)]})
    p = subprocess.Popen(
        [str(runner.LANES), "replay.fio"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10)
    finally:
        p.kill()
    assert p.returncode == 130 and "interrupted" in err
    assert json.loads(out)["issue_late_ns"]["requests"] == 1


def _man(layout: str | None) -> Manifest:
    return Manifest.model_construct(mode="exact", jobs=[], targets=[], exact_layout=layout)


def test_auto_runs_lanes_with_iotape_lanes_and_pieces_with_fio(tmp_path: Path) -> None:
    assert runner.choose("auto", _man("lanes"), tmp_path) == "lanes"
    assert runner.choose("auto", _man(None), tmp_path) == "fio"
    assert runner.choose("fio", _man("lanes"), tmp_path) == "fio"
    with pytest.raises(IotapeError, match="not a plan of lanes"):
        runner.choose("lanes", _man(None), tmp_path)
    with pytest.raises(IotapeError, match="--runner spdk: expected one of"):
        runner.choose("spdk", _man("lanes"), tmp_path)


def test_ahead_us_starts_the_logs_times_that_much_sooner(tmp_path: Path) -> None:
    """--ahead-us N: the logs' times count from N us before the start. A request
    at the trace's 3 s (3.2 s in the log) goes out ~0.2 s after launch with
    --ahead-us 3000000; its first_ns stays on the plan's clock. Bounds are
    generous: 3.2 s of the log's time, 2.5 s of wall time."""
    f = _target(tmp_path)
    _lanes(tmp_path, f, {"a": [(3_000_000, R, 0, 4096), (3_010_000, R, 4096, 4096)]})
    t0 = time.monotonic()
    p = subprocess.run(
        [str(runner.LANES), "--ahead-us", "3000000", "replay.fio"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    job = json.loads(p.stdout)["jobs"][0]
    assert job["read"]["total_ios"] == 2
    assert job["first_ns"] >= 3_200_000_000
    assert took < 2.5


@pytest.mark.parametrize("bad", ["-1", "x", ""])
def test_a_bad_ahead_us_is_refused(tmp_path: Path, bad: str) -> None:
    _lanes(tmp_path, _target(tmp_path), {"a": [(0, R, 0, 4096)]})
    p = subprocess.run(
        [str(runner.LANES), "--ahead-us", bad, "replay.fio"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 2
    assert f"--ahead-us {bad}: expected a whole number of microseconds" in p.stderr


def test_the_runner_runs_a_plan_of_lanes_ahead_by_the_difference_of_its_starts(
    tmp_path: Path,
) -> None:
    """plan.json's start_us (fio's budget) less lanes_start_us (iotape-lanes'):
    what iotape-lanes is told; none for a plan without them."""
    man = _man("lanes").model_copy(update={"start_us": 4_500_000, "lanes_start_us": 200_400})
    assert runner.ahead_us(man) == 4_299_600
    cmd = runner.lanes_cmd(tmp_path, "replay.fio", "o", 4_299_600)[2]
    assert "--ahead-us 4299600 replay.fio" in cmd
    assert runner.ahead_us(_man("lanes")) == 0
    assert "--ahead-us" not in runner.lanes_cmd(tmp_path, "replay.fio", "o")[2]


def test_lanes_start_budget_counts_threads_and_never_passes_fios() -> None:
    """A sync lane is a thread per request in flight, an async lane one thread."""
    from replayer.plan import lanes
    from replayer.plan.model import Job
    from replayer.plan.targetmap import Owner

    def job(**o: str) -> Job:
        return Job("j", "/dev/x", "s", Owner("db", 0), o, 0, False)

    jobs = [job(iodepth="4"), job(iodepth="96", ioengine="io_uring"), job()]
    assert [lanes.threads(j) for j in jobs] == [4, 1, 1]
    want = int((lanes.LANES_START_S + 6 * lanes.LANES_START_PER_THREAD_S) * 1e6)
    assert lanes.lanes_start_us(jobs, 4_500_000) == want
    assert lanes.lanes_start_us(jobs, 100_000) == 100_000
