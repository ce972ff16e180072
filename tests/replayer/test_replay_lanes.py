"""Lanes (issue 23): exact plans past fio's job limit run as long jobs whose every
request waits for an absolute millisecond (version-2 iologs), read in chunks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from test_replay_plan import _iolog_counts, _targets, _trace
from test_replay_run import _record_fio

from base.errors import IotapeError
from recorder.tracefile import TraceWriter, open_trace
from replayer.plan import exact, iolog, lanes, sources, stream
from replayer.plan.build import PlanOptions, plan
from replayer.plan.model import Job
from replayer.plan.targetmap import Owner
from replayer.run import execute as runmod
from replayer.run import fidelity

needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")


def _lane_entries(log: Path) -> list[tuple[int, list[str]]]:
    lines = log.read_text().splitlines()
    assert lines[0] == iolog.HEADER_V2
    return iolog.entry_times_us(lines[1:])


@needs_fio
def test_past_the_job_limit_auto_plans_lanes_each_request_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(exact, "MAX_JOBS", 40)
    t = _trace(tmp_path / "t.iot", seconds=4, rate=200)
    targets = _targets(tmp_path, 1)
    pieces = plan(PlanOptions(t, tmp_path / "p", mode="exact", targets=targets, layout="pieces"))
    man = plan(PlanOptions(t, tmp_path / "jobs", mode="exact", targets=targets))
    jobdir = tmp_path / "jobs"
    assert man["exact_layout"] == "lanes" and "exact_layout" not in pieces
    # Every request planned exactly once, the same as the pieces carry.
    assert _iolog_counts(jobdir) == _iolog_counts(tmp_path / "p")
    assert sum(j["requests"] for j in man["jobs"]) == sum(j["requests"] for j in pieces["jobs"])
    text = (jobdir / "replay.fio").read_text()
    assert "read_iolog_chunked=1" in text and "startdelay" not in text.split("[global]")[1]
    # Every lane's buffers fit the largest request (256 KiB bdm-read): fio never
    # reallocates them under requests in flight while reading in chunks.
    assert text.count("\nbs=262144\n") == len(man["jobs"])
    start = lanes.start_us(len(man["jobs"]))
    for j in man["jobs"]:
        log = jobdir / "iologs" / f"{j['name']}.log"
        raw = log.read_text().splitlines()
        ents = _lane_entries(log)
        data = [(u, f) for u, f in ents if f[2] != "sync"]
        assert len(data) == j["requests"]
        # A lane's consecutive requests are at least GAP_US apart.
        times = np.array([u for u, _f in data])
        assert (np.diff(times) >= lanes.GAP_US).all()
        # The first request's line follows an absolute wait: trace time + start.
        k = next(i for i, x in enumerate(raw) if re.search(r" (read|write) ", x))
        ms, us = map(int, raw[k - 1].split()[2:4])
        assert raw[k - 1].split()[1] == "wait" and ms * 1000 + us == times[0] >= start
    # A sync (an app's fsync) stays in the lane of the request after it.
    assert any(f[2] == "sync" for j in man["jobs"] for _u, f in _lane_entries(
        jobdir / "iologs" / f"{j['name']}.log"))  # fmt: skip
    p = subprocess.run(["fio", "--parse-only", "replay.fio"], cwd=jobdir, capture_output=True)
    assert p.returncode == 0, p.stderr


def test_lanes_keep_a_lanes_requests_apart_and_never_overlapping() -> None:
    rng = np.random.default_rng(3)
    t = np.sort(rng.integers(0, 10_000_000, 40_000))  # 4,000/s
    t[1000:1200] = t[1000]  # 200 at one instant
    busy = np.where(rng.random(len(t)) < 0.01, 50_000, 100)  # 1 % take 50 ms
    dealer = lanes.Lanes(20_000)
    half = len(t) // 2  # dealt in two chunks, as a streamed plan does
    lane = np.concatenate(
        [
            dealer.deal("s", t[:half], np.zeros(half, np.int64), busy[:half]),
            dealer.deal("s", t[half:], np.zeros(len(t) - half, np.int64), busy[half:]),
        ]
    )
    assert dealer.lanes["s"] == dealer.total >= 200
    for k in range(dealer.total):
        i = np.flatnonzero(lane == k)
        assert (np.diff(t[i]) >= np.maximum(20_000, busy[i][:-1])).all()
    capped = lanes.Lanes(20_000, max_lanes=50)
    capped.deal("s", t, np.zeros(len(t), np.int64), busy)
    assert capped.total == 50


def test_split_sends_a_sync_with_the_request_after_it() -> None:
    t = np.array([0, 10, 10, 20, 30, 40, 50])
    act = np.array([iolog.READ, iolog.READ, iolog.SYNC, iolog.WRITE, iolog.READ, iolog.READ,
                    iolog.SYNC])  # fmt: skip
    z = np.zeros(7, np.int64)
    job = Job("db0.x", "/d", "db-read", Owner("db", 0), {}, 5, True, (t, act, z, z))
    out = lanes.split([job], gap_us=15)
    got = sorted(int(x) for j in out for x in j.entries[0])  # type: ignore[index]
    assert got == sorted(t.tolist())  # each entry exactly once
    for j in out:
        tt, a = j.entries[0], j.entries[1]  # type: ignore[index]
        for i in np.flatnonzero(a == iolog.SYNC):
            # The sync before a write goes with it; the trailing one with the last.
            assert i + 1 < len(a) or tt[i] == 50
        assert j.requests == int((a != iolog.SYNC).sum())


def test_lanes_refuse_windows_and_hosts(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot", seconds=1, rate=50)
    opts = PlanOptions(t, None, mode="exact", targets=_targets(tmp_path, 1), dry_run=True,
                       layout="lanes", windows=True)  # fmt: skip
    with pytest.raises(IotapeError, match="--layout lanes"):
        plan(opts)


def test_v2_entry_times_and_v3_alike() -> None:
    v2 = ["/d add", "/d open", "/d wait 1500 250", "/d read 4096 512", "/d sync 0 0",
          "/d write 0 4096", "/d close"]  # fmt: skip
    assert iolog.entry_times_us(v2) == [
        (1_500_250, ["1500250", "/d", "read", "4096", "512"]),
        (1_500_250, ["1500250", "/d", "sync", "0", "0"]),
        (1_500_250, ["1500250", "/d", "write", "0", "4096"]),
    ]
    assert iolog.entry_times_us(["7 /d read 0 512", "8 /d close"]) == [
        (7, ["7", "/d", "read", "0", "512"])
    ]


@needs_fio
def test_fio_waits_for_a_v2_lanes_absolute_millisecond(tmp_path: Path) -> None:
    """fio 3.33 reads a v2 `wait MS X` as a sleep until MS ms after genesis,
    chunked reading included: the last request goes out no sooner than that."""
    f = tmp_path / "f.img"
    f.write_bytes(b"\0" * (1 << 20))
    log = tmp_path / "a.log"
    t = np.array([0, 150_000, 300_000])
    z = np.zeros(3, np.int64)
    iolog.write_v2(log, str(f), t, z + iolog.READ, z, z + 4096, start_us=200_000)
    (tmp_path / "a.fio").write_text(f"[a]\nthread=1\nread_iolog={log}\nread_iolog_chunked=1\n")
    t0 = time.monotonic()
    p = subprocess.run(
        ["fio", "--output-format=json", "a.fio"], cwd=tmp_path, capture_output=True, text=True
    )
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout[p.stdout.index("{") :])["jobs"][0]["read"]["total_ios"] == 3
    assert took >= 0.5  # genesis + 200 ms + 300 ms


@pytest.mark.kernel
@pytest.mark.parametrize("runner", ["fio", "auto"])
def test_lanes_replay_every_request_relabelled(loop_factory, tmp_path: Path, runner: str) -> None:
    """By fio, and by iotape-lanes (auto, for a plan of lanes)."""
    src, dst = loop_factory(256), loop_factory(256)
    orig = _record_fio(src.path, tmp_path / "orig.iot", seconds=3)
    jobs = tmp_path / "jobs"
    man = plan(PlanOptions(orig, jobs, mode="exact", targets=[f"all={dst.path}"], layout="lanes"))
    assert man["exact_layout"] == "lanes"
    summary = runmod.run(jobs, tmp_path / "rep.iot", [], runner=runner)
    assert summary.runner == ("fio" if runner == "fio" else "iotape-lanes")
    # Every iolog entry issued once (a PREFLUSH write's sync is an entry of its own).
    planned = sum(len(_lane_entries(log)) for log in (jobs / "iologs").glob("*.log"))
    done = sum(s.ios for r in summary.jobs for s in (r.read, r.write, r.sync) if s)
    assert done == planned
    c = fidelity.compare(orig, tmp_path / "rep.iot")
    assert c["overall"]["match_share"] >= 0.99
    # No lateness carried from request to request: within a few ms of the original.
    assert c["overall"]["issue_error"]["p50_ms"] < 5


def _rechunk(path: Path, n: int) -> Path:
    """The same trace written in file chunks of `n` records (as a recorder does)."""
    with open_trace(path) as t:
        header, r = t.header, t.read_all()
    with TraceWriter(path, header, chunk_records=n) as w:
        w.write(r)
        w.close({})
    return path


def _strip_waits(log: Path) -> list[str]:
    return [x for x in log.read_text().splitlines() if " wait " not in x]


@needs_fio
def test_a_streamed_plan_is_the_whole_plan_read_in_chunks(tmp_path: Path, monkeypatch) -> None:
    """Past STREAM_ABOVE the plan reads the trace in time-ordered chunks (small
    here) and appends to the logs: the same lanes, entries and anchor as the plan
    of the whole trace; only the trace's 0 (the start) differs."""
    t = _rechunk(_trace(tmp_path / "t.iot", seconds=4, rate=200), 64)
    targets = _targets(tmp_path, 1)
    whole = plan(PlanOptions(t, tmp_path / "m", mode="exact", targets=targets, layout="lanes"))
    monkeypatch.setattr(sources, "STREAM_ABOVE", 10)
    monkeypatch.setattr(stream, "CHUNK", 97)
    calls = []
    real = stream.sorted_chunks
    monkeypatch.setattr(stream, "sorted_chunks", lambda s: calls.append(1) or real(s, 97))
    man = plan(PlanOptions(t, tmp_path / "s", mode="exact", targets=targets))
    assert len(calls) == 1 and man["exact_layout"] == "lanes"
    assert sum(1 for _ in real(stream.scan(t), 97)) > 10
    assert sorted(map(str, man["jobs"])) == sorted(map(str, whole["jobs"]))
    for j in man["jobs"]:
        name = f"{j['name']}.log"
        assert _strip_waits(tmp_path / "s" / "iologs" / name) == _strip_waits(
            tmp_path / "m" / "iologs" / name
        )
    assert (tmp_path / "s" / "anchor.log").read_text() == (
        tmp_path / "m" / "anchor.log"
    ).read_text()
    assert man["targets"] == whole["targets"]
    text = (tmp_path / "s" / "replay.fio").read_text()
    assert text.count("\nbs=262144\n") == len(man["jobs"])
    p = subprocess.run(
        ["fio", "--parse-only", "replay.fio"], cwd=tmp_path / "s", capture_output=True
    )
    assert p.returncode == 0, p.stderr


def test_a_streamed_plan_run_by_iotape_lanes_starts_soon_after_launch(
    tmp_path: Path, monkeypatch
) -> None:
    """A streamed plan's logs put the trace's 0 at fio's set-up budget for the most
    lanes it could have (4.5 s); iotape-lanes needs only to start its threads, so
    plan.json declares its own start (lanes_start_us) and `replay run` runs it
    that far ahead. The run's first issue after launch is well before the old
    budget (a generous margin: the plan declares ~0.2 s, the bound is 4.5 s)."""
    t = _rechunk(_trace(tmp_path / "t.iot", seconds=1, rate=200), 64)
    targets = _targets(tmp_path, 1)
    monkeypatch.setattr(sources, "STREAM_ABOVE", 10)
    jobs = tmp_path / "s"
    man = plan(PlanOptions(t, jobs, mode="exact", targets=targets))
    assert man["exact_layout"] == "lanes"
    old = lanes.start_us(lanes.MAX_LANES)
    assert man["start_us"] == old  # fio's budget: the logs' times as they were
    assert man["lanes_start_us"] < old / 4
    summary = runmod.run(jobs, None, [p.split("=", 1)[1] for p in targets])
    assert summary.runner == "iotape-lanes"
    doc = json.loads((jobs / "results" / "fio.json").read_text())
    ahead = man["start_us"] - man["lanes_start_us"]
    first_us = min(j["first_ns"] for j in doc["jobs"] if "first_ns" in j) / 1000 - ahead
    assert 0 < first_us < old


def test_sorted_chunks_put_late_completions_back_in_time_order(tmp_path: Path) -> None:
    # Written in completion order: a request comes after later ones by its latency.
    t = _rechunk(_trace(tmp_path / "t.iot", seconds=2, rate=300), 40)
    s = stream.scan(t)
    got = [c for c in stream.sorted_chunks(s, 50)]
    assert len(got) > 5
    times = np.concatenate([c.t_ns for c in got])
    assert (np.diff(times) >= 0).all() and times[0] == 0
    assert len(times) == s.requests


def test_auto_past_the_exact_limit_stays_exact_where_the_plan_is_lanes(
    tmp_path: Path, monkeypatch
) -> None:
    """fio reads a lane's log in chunks, so --exact-limit (fio holding every entry of
    pieces) sends auto to synthetic mode only where the exact plan would be pieces."""
    monkeypatch.setattr(exact, "MAX_JOBS", 20)
    t = _trace(tmp_path / "t.iot", seconds=4, rate=200)
    targets = _targets(tmp_path, 1)
    man = plan(PlanOptions(t, tmp_path / "a", targets=targets, exact_limit=100))
    assert man["mode"] == "exact" and man["exact_layout"] == "lanes"
    pieces = PlanOptions(t, tmp_path / "b", targets=targets, exact_limit=100, layout="pieces")
    assert plan(pieces)["mode"] == "synthetic"
