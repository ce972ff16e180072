"""Replay on loop devices: the dangerous-target refusals, and record -> plan -> run ->
re-record -> fidelity against fio's plain replay."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from iotape.errors import IotapeError
from iotape.recorder import record as rec
from iotape.replayer import fidelity, safety
from iotape.replayer.cli import app
from iotape.replayer.plan import PlanOptions, plan


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


def test_refuses_a_mounted_device(loop) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", loop.path], check=True)
    where = tempfile.mkdtemp(prefix="iotape-mnt-")
    subprocess.run(["mount", loop.path, where], check=True)
    try:
        with pytest.raises(IotapeError, match="mounted at") as e:
            safety.check_target(loop.path, [])
        assert "\n" not in str(e.value)
    finally:
        subprocess.run(["umount", where], check=False)
        os.rmdir(where)


def test_refuses_a_filesystem_signature_unless_allowed(loop) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", loop.path], check=True)
    with pytest.raises(IotapeError, match="ext4 signature") as e:
        safety.check_target(loop.path, [])
    assert "\n" not in str(e.value)
    safety.check_target(loop.path, [loop.path])


def test_refuses_the_root_disk(kernel) -> None:
    st = os.stat("/")
    path = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if f[4] == "/" and f[-2].startswith("/dev/"):
            path = f[-2]
    if path is None or not Path(path).exists():
        pytest.skip(
            f"the root filesystem ({os.major(st.st_dev)}:{os.minor(st.st_dev)}) has no block device"
        )
    with pytest.raises(IotapeError, match=r"root disk|mounted") as e:
        safety.check_target(path, [])
    assert "\n" not in str(e.value)


def test_run_refuses_before_writing(loop_factory, tmp_path: Path) -> None:
    src, dst = loop_factory(64), loop_factory(64)
    orig = _record_fio(src.path, tmp_path / "orig.iot", seconds=1)
    subprocess.run(["mkfs.ext4", "-q", "-F", dst.path], check=True)
    plan(PlanOptions(orig, tmp_path / "jobs", mode="exact", targets=[f"all={dst.path}"]))
    res = CliRunner().invoke(app, ["run", str(tmp_path / "jobs")])
    assert isinstance(res.exception, IotapeError) and "ext4" in str(res.exception)
    assert not (tmp_path / "jobs" / "results" / "fio.json").exists()


def test_exact_replay_fidelity_against_fio_plain(loop_factory, tmp_path: Path) -> None:
    src, dst = loop_factory(256), loop_factory(256)
    orig = _record_fio(src.path, tmp_path / "orig.iot")
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
    ours = fidelity.compare(orig, tmp_path / "rep.iot")["overall"]
    plain = fidelity.compare(orig, tmp_path / "plain.iot")["overall"]
    # Every request replayed, the same ones, with the same mix.
    assert ours["match_share"] >= 0.99
    assert ours["size_hist_tv"] <= 0.01
    assert abs(ours["read_fraction"][0] - ours["read_fraction"][1]) <= 0.01
    assert plain["match_share"] >= 0.99
    # The timing goal (exact mode at <= 20k IOPS: IOPS error <= 2 %, p99 issue
    # error <= 1 ms) is not met yet (issue 4 stays open); it is measured, not asserted.
    print(
        f"fidelity: iotape {ours['iops_mape_pct']} % / {ours['issue_error']['p99_ms']} ms, "
        f"fio plain {plain['iops_mape_pct']} % / {plain['issue_error']['p99_ms']} ms"
    )
