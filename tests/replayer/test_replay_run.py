"""Replay on loop devices: the dangerous-target refusals, and record -> plan -> run ->
re-record -> fidelity against fio's plain replay."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from base.errors import IotapeError
from iotape.commands.replay import app
from recorder.capture import record as rec
from recorder.tracefile import open_trace, write_trace
from replayer.plan.build import PlanOptions, plan
from replayer.plan.source import OP, load
from replayer.run import fidelity

# Every test here needs root and loop devices (conftest `kernel`).
pytestmark = pytest.mark.kernel


def _record_fio(dev: str, out: Path, seconds: int = 3) -> Path:
    job = out.with_suffix(".fio")
    job.write_text(
        f"[global]\nfilename={dev}\ndirect=1\nioengine=io_uring\ntime_based=1\nruntime={seconds}\n"
        "[rr]\nrw=randread\nbs=4k\nrate_iops=1000\niodepth=4\n"
        "[ww]\nrw=randwrite\nbssplit=4k/50:32k/50\nrate_iops=300\niodepth=4\nfsync=20\n"
    )
    rec.record(
        rec.RecordOptions(
            devices=[dev], output=out, command=["fio", "--output=/dev/null", str(job)]
        )
    )
    return out


def test_run_refuses_before_writing(loop_factory, tmp_path: Path) -> None:
    src, dst = loop_factory(64), loop_factory(64)
    orig = _record_fio(src.path, tmp_path / "orig.iot", seconds=1)
    plan(PlanOptions(orig, tmp_path / "jobs", mode="exact", targets=[f"all={dst.path}"]))
    # A filesystem made after planning: `replay run` checks the device again.
    subprocess.run(["mkfs.ext4", "-q", "-F", dst.path], check=True)
    res = CliRunner().invoke(app, ["run", str(tmp_path / "jobs")])
    assert isinstance(res.exception, IotapeError) and "ext4" in str(res.exception)
    assert not (tmp_path / "jobs" / "results" / "fio.json").exists()


def _label_by_pid(trace: Path) -> dict[int, str]:
    """Name the recorded fio trace's two submitting processes db-read and db-write
    (the recorder saw threads named fio and labelled everything `other`)."""
    with open_trace(trace) as t:
        header, r = dict(t.header), t.read_all()
    ids = {v: int(k) for k, v in header["streams"].items()}
    names = {}
    for pid in np.unique(r["pid"][r["pid"] != 0]).tolist():
        m = r["pid"] == pid
        names[pid] = "db-read" if (r["op"][m] == OP["read"]).mean() > 0.5 else "db-write"
        r["stream"][m] = ids[names[pid]]
    # The kernel's device flushes (pid 0) go with the writer, as the workload's would.
    r["stream"][r["pid"] == 0] = ids["db-write"]
    write_trace(trace, header, r)
    return names


def test_exact_replay_fidelity_against_fio_plain(loop_factory, tmp_path: Path) -> None:
    src, dst = loop_factory(256), loop_factory(256)
    orig = _record_fio(src.path, tmp_path / "orig.iot")
    _label_by_pid(orig)
    jobs = tmp_path / "jobs"
    plan(PlanOptions(orig, jobs, mode="exact", targets=[f"all={dst.path}"]))
    res = CliRunner().invoke(
        app,
        [
            "run",
            str(jobs),
            "--record",
            str(tmp_path / "rep.iot"),
            "--anchor-record",
            str(tmp_path / "plain.iot"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (jobs / "results" / "fio.json").exists()
    both = fidelity.compare(orig, tmp_path / "rep.iot")
    ours = both["overall"]
    plain = fidelity.compare(orig, tmp_path / "plain.iot")["overall"]
    # Every request replayed, the same ones, with the same mix.
    assert ours["match_share"] >= 0.99
    assert ours["size_hist_tv"] <= 0.01
    assert abs(ours["read_fraction"][0] - ours["read_fraction"][1]) <= 0.01
    assert plain["match_share"] >= 0.99
    # The replay carries the original's stream labels (from the plan's jobs), so its
    # per-stream figures stand on their own: every stream's requests are all there.
    rep = load(tmp_path / "rep.iot")
    got = {rep.stream_name(s) for s in np.unique(rep.records["stream"]).tolist()}
    assert got == {"db-read", "db-write"}
    assert rep.metadata().get("stream_labels")
    # Relabelling rewrote the file; the recorder's accounting in its footer survived.
    with open_trace(tmp_path / "rep.iot") as t:
        assert {"lost", "pre_start", "in_flight_at_stop", "stop_reason"} <= set(t.footer)
    for name in ("db-read", "db-write"):
        f = both["streams"][name]
        assert f["requests"][1] >= f["requests"][0] * 0.99, (name, f["requests"])
    # The IOPS goal (<= 2 % per-second error) holds, and the issue times
    # beat fio's plain replay by far (bench/replay.py: p99 0.9-4.4 ms against
    # 45-324 ms). The p99 <= 1 ms goal depends on how busy this shared 2-core VM
    # is (a thread's wake-up alone is late by > 0.4 ms at p99 here): it is
    # printed, not asserted.
    assert ours["iops_mape_pct"] <= 2.0
    assert ours["issue_error"]["p99_ms"] < plain["issue_error"]["p99_ms"]
    print(
        f"fidelity: iotape {ours['iops_mape_pct']} % / {ours['issue_error']['p99_ms']} ms, "
        f"fio plain {plain['iops_mape_pct']} % / {plain['issue_error']['p99_ms']} ms"
    )


def test_synthetic_replay_follows_the_trace(loop_factory, tmp_path: Path) -> None:
    """Synthetic mode draws its own requests (none pair up with the original's), so
    its fidelity is the shape: rate, read share, sizes."""
    src, dst = loop_factory(256), loop_factory(256)
    orig = _record_fio(src.path, tmp_path / "orig.iot")
    jobs = tmp_path / "jobs"
    plan(PlanOptions(orig, jobs, mode="synthetic", targets=[f"all={dst.path}"]))
    res = CliRunner().invoke(app, ["run", str(jobs), "--record", str(tmp_path / "rep.iot")])
    assert res.exit_code == 0, res.output
    f = fidelity.compare(orig, tmp_path / "rep.iot")["overall"]
    n_orig, n_rep = f["requests"]
    # bench/replay.py measured 100 % of the requests, read fraction and sizes exact to
    # 0.01 and per-second IOPS error 0.1-0.8 %; the bounds leave room for a noisy
    # machine, not for the 23-33 % that misaligned clocks and fio's rate_iops metering
    # (in the smallest size of a bssplit) used to give.
    assert 0.95 * n_orig <= n_rep <= 1.05 * n_orig
    assert abs(f["read_fraction"][0] - f["read_fraction"][1]) <= 0.03
    assert f["size_hist_tv"] <= 0.03
    assert f["iops_mape_pct"] <= 10.0
    print(f"synthetic fidelity: {f}")


def test_merged_windows_carry_the_runs_span(tmp_path: Path) -> None:
    """Each window's fio counts `elapsed` from its own start and stamps its end in
    `timestamp_ms`: the merged JSON's elapsed_ms spans the first start to the last
    end (the store's duration of the replay), not the longest window."""
    import json

    from replayer.run import launch, local

    (tmp_path / "results").mkdir()
    windows = [(1_000_000, 3, "a"), (1_009_000, 2, "b")]  # ends at 1,000 s and 1,009 s
    for k, (end_ms, elapsed, job) in enumerate(windows):
        doc = {"timestamp_ms": end_ms, "jobs": [{"jobname": job, "elapsed": elapsed}]}
        (tmp_path / launch.window_output(k)).write_text("note\n" + json.dumps(doc))
    local._merge_windows(tmp_path, 2, "results/fio.json")
    got = json.loads((tmp_path / "results" / "fio.json").read_text())
    assert [j["jobname"] for j in got["jobs"]] == ["a", "b"]
    assert got["elapsed_ms"] == 1_009_000 - (1_000_000 - 3_000)
