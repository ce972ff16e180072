"""Replay planning: job files, scaling, remapping, refusals of bad input (no root needed)."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_helpers import DT, SDA, header
from typer.testing import CliRunner

import schemas
from base.errors import IotapeError
from iotape.commands.replay import app
from recorder.tracefile import write_trace
from replayer.plan import exact, remap
from replayer.plan.build import PlanOptions, plan

STREAM = schemas.enum("stream")
OP = schemas.enum("op")
FLAGS = {k: 1 << v for k, v in schemas.bits("flag").items()}
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")


def _trace(
    path: Path,
    meta: dict | None = None,
    seconds: int = 4,
    rate: int = 200,
    zero_times=False,
    linked: bool = False,
) -> Path:
    """A workload-like trace: db-read/db-write/log-write at `rate`/s each, bdm-read at 20/s,
    app fsyncs, with the kernel's device flush beside each (pid 0, as traces before
    one-record-per-flush hold them) or, `linked`, as the recorder now writes them:
    the device flush's dispatch as the fsync's issue time, and one device flush
    whose fsync came before the capture, flagged `device_flush`."""
    rng = np.random.default_rng(1)
    parts = []
    for sid, n, size, op in (
        (STREAM["db-read"], rate, 32768, OP["read"]),
        (STREAM["db-write"], rate, 32768, OP["write"]),
        (STREAM["log-write"], rate, 4096, OP["write"]),
        (STREAM["bdm-read"], 20, 262144, OP["read"]),
    ):
        k = n * seconds
        r = np.zeros(k, dtype=DT)
        r["ts_issue_ns"] = np.sort(rng.integers(1_000_000, seconds * 10**9, k))
        r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
        r["ts_complete_ns"] = r["ts_issue_ns"] + 200_000
        r["offset"] = rng.integers(0, (32 << 20) // size, k) * size
        r["bytes"] = size
        r["op"] = op
        r["stream"] = sid
        r["pid"] = 100 + sid
        r["tid"] = 100 + sid
        parts.append(r)
    f = np.zeros(10, dtype=DT)
    f["ts_queue_ns"] = np.linspace(10**8, 3 * 10**9, 10).astype(np.int64)
    f["ts_complete_ns"] = f["ts_queue_ns"] + 50_000
    f["op"] = OP["flush"]
    f["pid"] = 103
    f["stream"] = STREAM["log-write"]
    dev_flush = f.copy()
    dev_flush["pid"] = 0
    dev_flush["ts_issue_ns"] = dev_flush["ts_queue_ns"] + 1000
    if linked:
        f["ts_issue_ns"] = dev_flush["ts_issue_ns"]
        f["flags"] = FLAGS["preflush"] | FLAGS["sync"]
        dev_flush = dev_flush[:1].copy()
        dev_flush["ts_queue_ns"] = 0
        dev_flush["ts_issue_ns"], dev_flush["ts_complete_ns"] = 500_000, 550_000
        dev_flush["flags"] = FLAGS["device_flush"]
    pieces = [*parts, f, dev_flush]
    # Filled field by field: np.concatenate would pack the dtype and lose its layout.
    r = np.zeros(sum(len(x) for x in pieces), dtype=DT)
    at = 0
    for x in pieces:
        for name in DT.names:
            r[name][at : at + len(x)] = x[name]
        at += len(x)
    r = r[np.argsort(r["ts_complete_ns"], kind="stable")]
    r["dev"] = SDA
    if zero_times:
        r["ts_issue_ns"] = r["ts_queue_ns"] = r["ts_complete_ns"] = 0
    h = header(metadata=meta or {})
    h["devices"] = h["devices"][:1]
    h["streams"] = {str(v): k for k, v in STREAM.items()}
    return write_trace(path, h, r)


def _targets(tmp: Path, n: int, size: int = 64 << 20) -> list[str]:
    out = []
    for i in range(n):
        p = tmp / f"t{i}.img"
        p.write_bytes(b"")
        import os

        os.truncate(p, size)
        out.append(f"db{i}={p}")
    return out


def _iolog_counts(jobdir: Path) -> dict[str, int]:
    """Requests per stream over all iologs (job names are dbK.STREAM[...])."""
    out: dict[str, int] = {}
    for log in (jobdir / "iologs").glob("*.log"):
        stream = log.name.split(".")[1]
        n = sum(
            1 for line in log.read_text().splitlines()[1:] if re.search(r" (read|write) ", line)
        )
        out[stream] = out.get(stream, 0) + n
    return out


def test_exact_plan_writes_iologs_in_microseconds(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    man = plan(PlanOptions(t, tmp_path / "jobs", mode="exact", targets=_targets(tmp_path, 1)))
    jobdir = tmp_path / "jobs"
    assert {j["stream"] for j in man["jobs"]} == {"db-read", "db-write", "log-write", "bdm-read"}
    # Requests that overlapped in the trace (200 us each, at random times) go to
    # separate lanes; each lane is cut into pieces of at most 32 requests.
    logs = sorted((jobdir / "iologs").glob("db0.log-write.*.log"))
    assert len(logs) >= 800 // 32
    text = [ln for log in logs for ln in log.read_text().splitlines()]
    assert text[0] == "fio version 3 iolog"
    # Each log opens with the line that makes its first wait count from fio's start.
    assert re.fullmatch(r"1 \S+ wait 0 0", text[1])
    start_s = float(re.search(r"time 0 at ([\d.]+) s", (jobdir / "replay.fio").read_text())[1])
    stamps = sorted(int(ln.split()[0]) for ln in text if re.search(r" (read|write|sync) ", ln))
    # Times are us after fio's start, the trace's time 0 at the start offset:
    # 4 s of trace is about 4e6 us after it.
    assert min(stamps) > start_s * 1e6
    assert 3_000_000 < max(stamps) - start_s * 1e6 < 4_100_000
    for log in logs:
        n = sum(bool(re.search(r" (read|write) ", ln)) for ln in log.read_text().splitlines())
        assert 1 <= n <= 32
        # Within a lane no request was issued before the one before it completed.
        lane = [int(ln.split()[0]) for ln in log.read_text().splitlines()[4:-1]]
        assert all(b - a >= 200 for a, b in itertools.pairwise(lane))
    # The app's 10 fsyncs are replayed as syncs; the kernel's device flushes are not.
    assert sum(" sync " in line for line in text) == 10
    jobfile = (jobdir / "replay.fio").read_text()
    assert "MICROSECONDS" in jobfile
    assert "clocksource=cpu" in jobfile
    # The jobs are in the order of their first request (fio starts them in file order).
    firsts = []
    for name in re.findall(r"^read_iolog=(\S+)$", jobfile, re.M):
        body = [
            ln
            for ln in (jobdir / name).read_text().splitlines()[1:]
            if re.search(r" (read|write|sync) ", ln)
        ]
        firsts.append(int(body[0].split()[0]))
    assert len(firsts) == len(man["jobs"]) and firsts == sorted(firsts)
    # A job that starts late is created by fio at least 1 s before its first entry
    # (the add that carries its absolute wait), so that wait is not slept in many
    # 0.5 s steps. startdelay counts from fio's genesis, which may come as late as
    # the set-up time the plan allows (the trace's 0 in the iologs), so the margin
    # counts from there.
    start_us = int((exact.START_S + exact.START_PER_JOB_S * len(man["jobs"])) * 1e6)
    delays = dict(re.findall(r"^read_iolog=(\S+)\n(?:startdelay=(\d+)us\n)?", jobfile, re.M))
    assert len(delays) == len(man["jobs"])
    for name, delay in delays.items():
        first = int((jobdir / name).read_text().splitlines()[2].split()[0])
        assert int(delay or 0) == max(0, first - start_us - 1_000_000)
    assert sum(bool(d) for d in delays.values()) > len(delays) / 2
    assert (jobdir / "anchor.fio").exists()


def test_segment_zero_keeps_one_job_per_stream(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    man = plan(
        PlanOptions(t, tmp_path / "jobs", mode="exact", targets=_targets(tmp_path, 1), segment=0)
    )
    # One job per stream and lane, none cut into pieces.
    assert {j["stream"] for j in man["jobs"]} == {"db-read", "db-write", "log-write", "bdm-read"}
    logs = list((tmp_path / "jobs" / "iologs").glob("*.log"))
    assert len(logs) == len(man["jobs"]) and not any(".s0" in log.name for log in logs)


@needs_fio
@pytest.mark.parametrize("mode", ["exact", "synthetic"])
def test_every_job_parses_with_fio(tmp_path: Path, mode: str) -> None:
    t = _trace(tmp_path / "t.iot", {"mailboxes": "100", "databases": "1"})
    jobdir = tmp_path / "jobs"
    plan(PlanOptions(t, jobdir, mode=mode, databases=2, targets=_targets(tmp_path, 2)))
    for job in ("replay.fio", "anchor.fio") if mode == "exact" else ("replay.fio",):
        p = subprocess.run(["fio", "--parse-only", job], cwd=jobdir, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


def test_doubling_mailboxes_doubles_transactional_rate_only(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot", {"mailboxes": "100", "databases": "1"})
    tg = _targets(tmp_path, 1)
    plan(PlanOptions(t, tmp_path / "a", mode="exact", mailboxes=100, targets=tg))
    plan(PlanOptions(t, tmp_path / "b", mode="exact", mailboxes=200, targets=tg))
    a, b = _iolog_counts(tmp_path / "a"), _iolog_counts(tmp_path / "b")
    for s in ("db-read", "db-write", "log-write"):
        assert b[s] / a[s] == pytest.approx(2.0, rel=0.10), s
    assert b["bdm-read"] == a["bdm-read"]


def test_k_databases_give_k_targets(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot", {"mailboxes": 100, "databases": 1})
    man = plan(
        PlanOptions(
            t,
            tmp_path / "jobs",
            mode="exact",
            mailboxes=300,
            databases=3,
            targets=_targets(tmp_path, 3),
        )
    )
    assert len(man["targets"]) == 3
    assert {j["db"] for j in man["jobs"]} == {0, 1, 2}
    # Maintenance keeps its per-database rate on every target.
    counts = _iolog_counts(tmp_path / "jobs")
    assert counts["bdm-read"] == 3 * 80


def test_shared_target_is_split_into_ranges(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot", {"mailboxes": 100, "databases": 1})
    tgt = tmp_path / "all.img"
    import os

    tgt.write_bytes(b"")
    os.truncate(tgt, 128 << 20)
    plan(
        PlanOptions(
            t, tmp_path / "jobs", mode="exact", databases=2, remap="wrap", targets=[f"all={tgt}"]
        )
    )
    for log in (tmp_path / "jobs" / "iologs").glob("db1.*.log"):
        for line in log.read_text().splitlines()[3:-1]:
            f = line.split()
            if f[2] in ("read", "write"):
                assert int(f[3]) >= 64 << 20 and int(f[3]) + int(f[4]) <= 128 << 20


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(1, 1 << 20)), min_size=1, max_size=50),
    st.integers(1, 1 << 34),
    st.sampled_from([512, 4096]),
    st.sampled_from(["wrap", "scale"]),
    st.integers(0, 1 << 30),
)
def test_remap_keeps_every_request_inside_the_target(reqs, size, block, mode, rotate) -> None:
    if size < block:
        return
    off = np.array([r[0] for r in reqs]) // 512 * 512
    b = np.array([r[1] for r in reqs])
    new, nb = remap.remap(off, b, size, block, mode, rotate=rotate)
    assert (new >= 0).all() and (new + nb <= size).all()
    assert (new % block == 0).all() and (nb % block == 0).all()


def test_fit_refuses_what_does_not_fit() -> None:
    with pytest.raises(IotapeError, match="does not fit"):
        remap.remap(np.array([1 << 30]), np.array([4096]), 1 << 20, 512, "fit")


def test_traces_without_times_replay_in_order(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot", zero_times=True)
    man = plan(PlanOptions(t, tmp_path / "jobs", mode="exact", targets=_targets(tmp_path, 1)))
    assert "no times" in man["jobfile_text"]
    assert "iodepth=1" in man["jobfile_text"]


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    res = CliRunner().invoke(app, ["plan", str(t), "-o", str(tmp_path / "jobs"), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "[global]" in res.output
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize(
    "content",
    [b"", b"not a trace at all", b"IOTAPE\r\n" + b"\xff" * 64],
)
def test_malformed_traces_give_clean_errors(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.iot"
    bad.write_bytes(content)
    with pytest.raises(IotapeError):
        plan(PlanOptions(bad, tmp_path / "jobs", targets=_targets(tmp_path, 1)))
    assert not (tmp_path / "jobs").exists()


def test_truncated_and_empty_traces(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    data = t.read_bytes()
    (tmp_path / "cut.iot").write_bytes(data[: len(data) // 2])
    with pytest.raises(IotapeError):
        plan(PlanOptions(tmp_path / "cut.iot", tmp_path / "j1", targets=_targets(tmp_path, 1)))
    h = header()
    write_trace(tmp_path / "empty.iot", h, np.zeros(0, dtype=DT))
    with pytest.raises(IotapeError, match="no requests"):
        plan(PlanOptions(tmp_path / "empty.iot", tmp_path / "j2", targets=_targets(tmp_path, 1)))


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    res = CliRunner().invoke(app, ["plan", str(t), "-o", str(tmp_path / "j"), "--mailboxes", "5"])
    assert isinstance(res.exception, IotapeError)
    assert "\n" not in str(res.exception)


def test_every_command_has_an_example() -> None:
    import typer

    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        assert f"Example: iotape replay {name}" in cmd.help


@pytest.mark.parametrize("linked", [False, True])
def test_one_sync_per_application_flush(tmp_path: Path, linked: bool) -> None:
    """Both trace models (a pid-0 device flush beside each fsync, or the fsync alone
    with its device flush linked) replay each of the 10 fsyncs once, nothing more."""
    t = _trace(tmp_path / "t.iot", linked=linked)
    plan(PlanOptions(t, tmp_path / "jobs", mode="exact", targets=_targets(tmp_path, 1)))
    logs = (tmp_path / "jobs" / "iologs").glob("*.log")
    text = [ln for log in logs for ln in log.read_text().splitlines()]
    assert sum(" sync " in line for line in text) == 10
