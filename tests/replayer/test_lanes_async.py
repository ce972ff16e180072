"""iotape-lanes' async lanes (replayer/src/async.c, issue 36): a job with
ioengine=io_uring is one thread and one io_uring that submits each request at its
time without waiting for those before it, up to iodepth in flight; and the
planner's choice of them (replayer/plan/lanes.py, --lanes)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_replay_plan import _iolog_counts, _targets, _trace
from typer.testing import CliRunner

import schemas
from base.errors import IotapeError
from iotape.commands.replay import app
from recorder.capture import record as rec
from recorder.tracefile import open_trace
from replayer.plan import iolog, lanes
from replayer.plan.model import Job
from replayer.plan.source import OP
from replayer.plan.targetmap import Owner
from replayer.run import runner

R, W, T, S = iolog.READ, iolog.WRITE, iolog.TRIM, iolog.SYNC
MIB = 1 << 20


def _plan(tmp_path: Path, target: str, rows: list, depth: int, bs: int = 65536) -> None:
    """One async lane (ioengine=io_uring, `depth` in flight) of `rows` (t_us,
    action, offset, length), its trace 0 at 200 ms after genesis."""
    t, a, o, n = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    iolog.write_v2(tmp_path / "a.log", target, t, a, o, n, start_us=200_000)
    (tmp_path / "replay.fio").write_text(
        "[global]\nioengine=psync\ndirect=1\nthread=1\nread_iolog_chunked=1\n"
        f"\n[a]\nread_iolog=a.log\nioengine=io_uring\niodepth={depth}\nbs={bs}\n"
    )


def _cmd() -> list[str]:
    assert runner.LANES.exists(), f"{runner.LANES}: run `make native`"
    return [str(runner.LANES), "replay.fio"]


def _run(tmp_path: Path) -> dict:
    p = subprocess.run(_cmd(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _recorded(tmp_path: Path, dev: str) -> tuple[dict, np.ndarray]:
    """iotape-lanes run under the recorder on `dev`: (its JSON, the device's reads
    in issue order)."""
    out = tmp_path / "lanes.json"
    trace = tmp_path / "rep.iot"
    sh = f"cd {tmp_path} && exec {' '.join(_cmd())} >{out}"
    rec.record(rec.RecordOptions(devices=[dev], output=trace, command=["sh", "-c", sh]))
    with open_trace(trace) as t:
        r = t.read_all()
    r = r[r["op"] == OP["read"]]
    return json.loads(out.read_text()), r[np.argsort(r["ts_issue_ns"], kind="stable")]


def _hist_count(d: dict) -> int:
    return sum(n for _lo, _hi, n in d["lat_hist_ns"])


@pytest.mark.kernel
def test_an_async_lane_issues_each_request_once_at_its_depth(loop_factory, tmp_path) -> None:
    """3,000 reads all due at once, iodepth 8, on a loop device: the lane fills its
    depth and never passes it, every request reaches the device once, and every
    completion is counted."""
    dev = loop_factory(64)
    offsets = np.random.default_rng(7).permutation(64 * MIB // 4096)[:3000] * 4096
    _plan(tmp_path, dev.path, [(0, R, int(o), 4096) for o in offsets], depth=8)
    doc, reads = _recorded(tmp_path, dev.path)
    job = doc["jobs"][0]
    assert job["async"]["depth"] == 8 and job["async"]["max_in_flight"] == 8
    assert job["async"]["fixed_buffers"] is True  # root: no memlock limit in the way
    assert job["read"]["total_ios"] == 3000 == _hist_count(job["read"])
    assert doc["issue_late_ns"]["requests"] == 3000
    assert len(reads) == 3000
    assert sorted(reads["offset"].tolist()) == sorted(offsets.tolist())


@pytest.mark.kernel
def test_an_async_lane_of_depth_one_keeps_the_log_order(loop_factory, tmp_path) -> None:
    """At iodepth 1 each request waits for the one before it: the device sees the
    log's order, each issued after the previous one completed."""
    dev = loop_factory(64)
    offsets = np.random.default_rng(3).permutation(64 * MIB // 4096)[:400] * 4096
    _plan(tmp_path, dev.path, [(0, R, int(o), 4096) for o in offsets], depth=1)
    doc, reads = _recorded(tmp_path, dev.path)
    assert doc["jobs"][0]["async"]["max_in_flight"] == 1
    assert reads["offset"].tolist() == offsets.tolist()
    issued, done = reads["ts_issue_ns"].astype(np.int64), reads["ts_complete_ns"].astype(np.int64)
    # A record flagged complete_unseen (the kernel reused its tag without reporting
    # its completion, docs/trace-format.md) carries the reuse as its completion, an
    # upper bound at or after the next issue: only real completions are compared.
    seen = (reads["flags"][:-1] & (1 << schemas.bits("flag")["complete_unseen"])) == 0
    assert seen.sum() >= len(seen) - 2
    assert (issued[1:] >= done[:-1])[seen].all()


def test_an_async_lane_waits_for_each_requests_time(tmp_path: Path) -> None:
    """Reads, writes, a trim and a sync over one async lane: each counted once, the
    writes on the file, the trim's range zeroed, the last request not before its
    time (200 ms + 300 ms after the start)."""
    f = tmp_path / "target.img"
    f.write_bytes(b"\x01" * MIB)
    rows = [(0, R, 0, 4096), (0, W, 65536, 8192), (100_000, T, 131072, 4096),
            (100_000, S, 0, 0), (300_000, R, 4096, 4096)]  # fmt: skip
    _plan(tmp_path, str(f), rows, depth=4)
    doc = _run(tmp_path)
    job = doc["jobs"][0]
    assert [job[d]["total_ios"] for d in ("read", "write", "trim", "sync")] == [2, 1, 1, 1]
    assert doc["issue_late_ns"]["requests"] == 5
    data = f.read_bytes()
    assert data[65536 : 65536 + 8192] != b"\x01" * 8192
    assert data[131072 : 131072 + 4096] == b"\0" * 4096
    assert job["last_ns"] >= 500_000_000  # genesis + 200 ms + 300 ms


def test_a_failed_request_of_an_async_lane_stops_the_run(tmp_path: Path) -> None:
    f = tmp_path / "target.img"
    f.write_bytes(b"\0" * 8192)
    _plan(tmp_path, str(f), [(0, R, 0, 4096), (0, R, 1000, 4096)], depth=4)  # unaligned
    p = subprocess.run(_cmd(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    err = p.stderr.strip()
    assert "\n" not in err and err.startswith("iotape-lanes: job a:") and "Invalid argument" in err


@pytest.mark.parametrize(
    ("engine", "depth", "part"),
    [("mmap", 1, "ioengine=mmap"), ("psync", 100, "iodepth=100 where each request")],
)
def test_an_engine_or_depth_it_cannot_run_is_refused(tmp_path, engine, depth, part) -> None:
    f = tmp_path / "target.img"
    f.write_bytes(b"\0" * 8192)
    _plan(tmp_path, str(f), [(0, R, 0, 4096)], depth=depth)
    text = (tmp_path / "replay.fio").read_text().replace("ioengine=io_uring", f"ioengine={engine}")
    (tmp_path / "replay.fio").write_text(text)
    p = subprocess.run(_cmd(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and part in p.stderr and p.stderr.count("\n") == 1


def _job(n: int, span_us: int, in_flight: int) -> Job:
    t = np.linspace(0, span_us, n).astype(np.int64)
    ent = (t, np.full(n, R), np.arange(n, dtype=np.int64) * 4096, np.full(n, 4096))
    j = Job("db0.s", "/dev/x", "s", Owner("db", 0), {"iodepth": "1"}, n, False, ent)
    j.busy_us, j.in_flight = np.full(n, 50, np.int64), in_flight
    return j


def test_auto_sends_a_busy_submitter_at_depth_to_one_async_lane() -> None:
    """10,000 requests in 1 s (10k IOPS) with 16 in flight: one async lane at twice
    that depth; the same at depth 1, or slower than ASYNC_MIN_IOPS, or with
    --lanes sync: synchronous lanes."""
    (a,) = lanes.split([_job(10_000, 1_000_000, 16)])
    assert a.name == "db0.s.a000" and a.requests == 10_000
    assert a.options["ioengine"] == "io_uring" and a.options["iodepth"] == "32"
    assert a.entries is not None and (np.diff(a.entries[0]) >= 0).all()
    for job, lane_io in (
        (_job(10_000, 1_000_000, 1), "auto"),
        (_job(1_000, 1_000_000, 16), "auto"),
        (_job(10_000, 1_000_000, 16), "sync"),
    ):
        out = lanes.split([job], lane_io=lane_io)
        assert len(out) > 1 and all(".g" in j.name and "ioengine" not in j.options for j in out)
        assert sum(j.requests for j in out) == job.requests
    (forced,) = lanes.split([_job(1_000, 1_000_000, 1)], lane_io="async")
    assert forced.options["iodepth"] == str(lanes.ASYNC_HEADROOM)


def test_a_stem_once_async_stays_async_and_takes_the_deepest_depth() -> None:
    """Chunk by chunk (a plan read in chunks): the first busy chunk makes the stem
    async; a later quiet chunk stays on its async lane, and a deeper one raises
    the depth."""
    dealer = lanes.Lanes()

    def deal(n: int, in_flight: int) -> np.ndarray:
        j = _job(n, 1_000_000, in_flight)
        assert j.entries is not None and j.busy_us is not None
        return dealer.deal("s", j.entries[0], j.entries[1], j.busy_us, in_flight)

    assert (deal(10, 1) >= 0).all()
    assert (deal(10_000, 8) == -1).all()
    assert (deal(10, 1) == -1).all()
    deal(10_000, 20)
    assert dealer.async_depth["s"] == 40 and dealer.lane_name("s", -1) == "s.a000"


def test_the_plan_names_its_async_lanes_and_keeps_every_request(tmp_path: Path) -> None:
    """`replay plan --layout lanes --lanes async`: every stream piece one NAME.a000
    job (io_uring, its depth) holding all its requests, said in the job file's
    header; --lanes sync the same requests on synchronous lanes; a bad value
    one line, no job directory."""
    orig = _trace(tmp_path / "orig.iot")
    counts = {}
    for lane_io in ("async", "sync"):
        jobs = tmp_path / lane_io
        args = ["plan", str(orig), "--mode", "exact", "--layout", "lanes", "--lanes", lane_io]
        args += [a for t in _targets(tmp_path, 1) for a in ("--target", t)]
        res = CliRunner().invoke(app, [*args, "-o", str(jobs)])
        assert res.exit_code == 0, res.output
        text = (jobs / "replay.fio").read_text()
        names = [x[1:-1] for x in text.splitlines() if x.startswith("[") and x != "[global]"]
        if lane_io == "async":
            assert names and all(n.endswith(".a000") for n in names)
            assert text.count("\nioengine=io_uring\n") == len(names)
            assert f"async lanes: {len(names)} (NAME.aK" in text
        else:
            assert all(".g" in n for n in names) and "\nioengine=io_uring" not in text
            assert "async lanes: none" in text
        counts[lane_io] = _iolog_counts(jobs)
    assert counts["async"] == counts["sync"] and sum(counts["async"].values()) > 0
    res = CliRunner().invoke(app, ["plan", str(orig), "--lanes", "x", "-o", str(tmp_path / "x")])
    assert isinstance(res.exception, IotapeError) and "--lanes x" in str(res.exception)
    assert not (tmp_path / "x").exists()
