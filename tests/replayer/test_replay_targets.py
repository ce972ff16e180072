"""Replay targets are what the user thinks they are (issue 24): a mistyped /dev name,
a file in /dev, a missing file, a mounted partition, a device held open elsewhere
or gone since planning is refused with its own one-line message, and nothing is
created or written in its place."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import need, wait_block_nodes
from helpers import iotape
from trace_helpers import DT, SDA, header

import schemas
from base.errors import IotapeError
from recorder.tracefile import write_trace
from replayer.plan import split
from replayer.plan.build import PlanOptions, plan
from replayer.run import execute as runmod
from replayer.run import tiering_check
from workload import layout

OP = schemas.enum("op")
STREAM = schemas.enum("stream")
MiB = 1 << 20


def _trace(path: Path, n: int = 200, span: int = 8 * MiB) -> Path:
    """Reads and writes of 4 KiB over `span` bytes, in half a second."""
    rng = np.random.default_rng(3)
    r = np.zeros(n, dtype=DT)
    r["ts_issue_ns"] = np.sort(rng.integers(1_000_000, 500_000_000, n))
    r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
    r["ts_complete_ns"] = r["ts_issue_ns"] + 100_000
    r["offset"] = rng.integers(0, span // 4096, n) * 4096
    r["bytes"] = 4096
    r["op"] = np.where(np.arange(n) % 2, OP["write"], OP["read"])
    r["stream"] = STREAM["db-write"]
    r["pid"] = r["tid"] = 100
    r["dev"] = SDA
    h = header()
    h["devices"] = h["devices"][:1]
    h["streams"] = {str(v): k for k, v in STREAM.items()}
    return write_trace(path, h, r)


def _refused(args: list[str], *patterns: str) -> str:
    """Run the CLI; it must fail with one line naming each pattern, and no traceback."""
    res = iotape(*args)
    assert res.returncode != 0, res.stdout
    msg = res.stderr.strip()
    assert "Traceback" not in msg and len(msg.splitlines()) == 1, msg
    for p in patterns:
        assert re.search(p, msg), (p, msg)
    return msg


def test_a_mistyped_dev_name_is_refused_and_not_created(tmp_path: Path, tag: str) -> None:
    t = _trace(tmp_path / "t.iot")
    ghost = f"/dev/iotape-typo-{tag}"
    _refused(
        ["replay", "plan", str(t), "-o", str(tmp_path / "jobs"), "--target", f"all={ghost}"],
        f"{ghost} does not exist; block devices: (/dev/|none)",
    )
    # --create-file does not make a file in /dev either.
    _refused(
        ["replay", "plan", str(t), "-o", str(tmp_path / "jobs"), "--target", f"all={ghost}",
         "--create-file", "16M"],
        f"{ghost} does not exist",
    )  # fmt: skip
    assert not os.path.lexists(ghost)
    assert not (tmp_path / "jobs").exists()


@pytest.mark.kernel
def test_the_block_device_list_names_the_nearest_first(loop, tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    # A letter left out: the device itself is then the nearest name, whatever other
    # loop devices or partitions (loopNp1, loopN0) the machine has at the time.
    typo = loop.path.replace("/dev/loop", "/dev/lop")
    with pytest.raises(IotapeError) as e:
        plan(PlanOptions(t, tmp_path / "jobs", targets=[f"all={typo}"]))
    listed = str(e.value).split("block devices: ")[1].split(", ")
    assert listed[0] == loop.path, str(e.value)
    assert not os.path.lexists(typo)


@pytest.mark.kernel
def test_a_regular_file_under_dev_is_refused(tmp_path: Path, tag: str) -> None:
    need(os.geteuid() == 0, "root (to make a file in /dev)")
    t = _trace(tmp_path / "t.iot")
    fake = Path(f"/dev/iotape-test-{tag}")
    fake.write_bytes(b"\0" * (16 * MiB))
    try:
        _refused(
            ["replay", "plan", str(t), "-o", str(tmp_path / "jobs"), "--target", f"all={fake}"],
            f"{fake} is a regular file under /dev, not a block device; block devices:",
        )
        assert fake.stat().st_size == 16 * MiB
        assert not (tmp_path / "jobs").exists()
    finally:
        fake.unlink()


def test_proc_and_sys_are_never_targets(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    for path, top in (("/proc/sys/vm/drop_caches", "/proc"), ("/sys/kernel/notes", "/sys")):
        with pytest.raises(IotapeError, match=f"{path}: is under {top}"):
            plan(PlanOptions(t, tmp_path / "jobs", targets=[f"all={path}"]))


def test_a_missing_file_needs_create_file(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    target = tmp_path / "target.img"
    _refused(
        ["replay", "plan", str(t), "-o", str(tmp_path / "jobs"), "--target", f"all={target}"],
        f"{target} does not exist; .*--create-file SIZE",
    )
    _refused(
        ["replay", "plan", str(t), "-o", str(tmp_path / "jobs"), "--target", f"all={target}",
         "--create-file", "lots"],
        "--create-file lots: not a size",
    )  # fmt: skip
    assert not target.exists() and not (tmp_path / "jobs").exists()


def test_an_empty_file_is_refused_with_its_size(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    target = tmp_path / "empty.img"
    target.touch()
    with pytest.raises(IotapeError, match=rf"{target}: 0 bytes is too small.*--create-file"):
        plan(PlanOptions(t, tmp_path / "jobs", targets=[f"all={target}"]))


def test_create_file_is_made_by_run_and_fio_creates_nothing(tmp_path: Path) -> None:
    need(shutil.which("fio") is not None, "fio")
    t = _trace(tmp_path / "t.iot")
    target = tmp_path / "target.img"
    jobs = tmp_path / "jobs"
    man = plan(PlanOptions(t, jobs, mode="exact", targets=[f"all={target}"], create_file=16 * MiB))
    assert not target.exists(), "planning creates nothing"
    assert man["targets"][0]["create_bytes"] == 16 * MiB
    for job in ("replay.fio", "anchor.fio"):
        assert "allow_file_create=0\n" in (jobs / job).read_text()
    summary = runmod.run(jobs)
    assert target.stat().st_size == 16 * MiB
    assert sum(j.write.ios if j.write else 0 for j in summary.jobs) == 100


@pytest.mark.kernel
def test_create_file_that_does_not_fit_leaves_no_file(small_mount, tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    target = small_mount(1024) / "target.img"
    jobs = tmp_path / "jobs"
    plan(PlanOptions(t, jobs, mode="exact", targets=[f"all={target}"], create_file=16 * MiB))
    _refused(
        ["replay", "run", str(jobs)],
        f"--target {target}: cannot create {16 * MiB} bytes: No space left on device",
    )
    assert not target.exists()
    assert not (jobs / "results" / "fio.json").exists()


def test_fio_itself_refuses_to_create_a_target(tmp_path: Path) -> None:
    """Even a job file run by hand, past every iotape check, makes no file."""
    need(shutil.which("fio") is not None, "fio")
    t = _trace(tmp_path / "t.iot")
    target = tmp_path / "target.img"
    jobs = tmp_path / "jobs"
    plan(PlanOptions(t, jobs, mode="synthetic", targets=[f"all={target}"], create_file=16 * MiB))
    res = subprocess.run(
        ["fio", "--output-format=json", "replay.fio"], cwd=jobs, capture_output=True, text=True
    )
    assert res.returncode != 0
    assert not target.exists()


def test_run_refuses_a_target_smaller_than_the_plan_reaches(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot", span=8 * MiB)
    target = tmp_path / "target.img"
    target.touch()
    os.truncate(target, 16 * MiB)
    jobs = tmp_path / "jobs"
    man = plan(PlanOptions(t, jobs, mode="exact", targets=[f"all={target}"], remap="fit"))
    reach = man["targets"][0]["reach_bytes"]
    assert 4 * MiB < reach <= 8 * MiB
    os.truncate(target, 4 * MiB)
    msg = _refused(["replay", "run", str(jobs)], f"{target}: {4 * MiB} bytes, but the plan reaches")
    assert str(reach) in msg and str(16 * MiB) in msg
    assert not (jobs / "results" / "fio.json").exists()


def test_run_does_not_recreate_a_file_removed_after_planning(tmp_path: Path) -> None:
    """A file target removed after planning is not recreated by run."""
    t = _trace(tmp_path / "t.iot")
    target = tmp_path / "target.img"
    target.touch()
    os.truncate(target, 16 * MiB)
    jobs = tmp_path / "jobs"
    plan(PlanOptions(t, jobs, mode="exact", targets=[f"all={target}"]))
    target.unlink()
    _refused(["replay", "run", str(jobs)], f"{target} does not exist")
    assert not target.exists()


def test_the_root_disk_is_refused_by_its_own_check(tmp_path: Path) -> None:
    src = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if f[4] == "/":
            src = f[f.index("-") + 2]
    if not (src and src.startswith("/dev/") and Path(src).is_block_device()):
        pytest.skip(f"the root filesystem's source {src} is not a block device")
    t = _trace(tmp_path / "t.iot")
    msg = _refused(
        ["replay", "plan", str(t), "-o", str(tmp_path / "jobs"), "--target", f"all={src}"],
        f"{src}: refusing to write: it is on the root disk .* \\(which holds /\\)",
    )
    assert "cannot open" not in msg


class PartitionedLoop:
    """A loop device with a partition table (two partitions), its first partition
    formatted ext4 and mounted; unmounted and detached by its own names."""

    def __init__(self) -> None:
        self.backing = Path(tempfile.mkstemp(prefix="iotape-test-", suffix=".img")[1])
        self.mnt: str | None = None
        self.path = ""

    def attach(self) -> None:
        os.truncate(self.backing, 64 * MiB)
        subprocess.run(
            ["sfdisk", "-q", str(self.backing)],
            input="label: dos\n,24M,L\n,24M,L\n",
            text=True,
            check=True,
            capture_output=True,
        )
        self.path = subprocess.run(
            ["losetup", "--find", "--show", "-P", str(self.backing)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        self.p1, self.p2 = f"{self.path}p1", f"{self.path}p2"
        name = os.path.basename(self.path)
        parts = [f"/sys/block/{name}/{name}p{k}" for k in (1, 2)]
        if not all(os.path.exists(x) for x in parts):
            # The scan losetup -P asks for did not always add the partitions here.
            subprocess.run(["partx", "-a", self.path], check=False, capture_output=True)
        # The kernel's partitions first, then their device nodes: a node may lag
        # (or be left from an earlier device of that name) when the scan is slow.
        deadline = time.monotonic() + 10
        while not all(os.path.exists(x) for x in parts):
            assert time.monotonic() < deadline, f"{self.path}: its partitions did not appear"
            time.sleep(0.05)
        wait_block_nodes([self.p1, self.p2])
        mk = subprocess.run(["mkfs.ext4", "-q", "-F", self.p1], capture_output=True, text=True)
        assert mk.returncode == 0, f"mkfs.ext4 {self.p1}: {mk.stderr.strip()}"
        self.mnt = tempfile.mkdtemp(prefix="iotape-mnt-")
        subprocess.run(["mount", self.p1, self.mnt], check=True)

    def release(self) -> None:
        if self.mnt:
            subprocess.run(["umount", self.mnt], check=False)
            os.rmdir(self.mnt)
            self.mnt = None
        if self.path:
            subprocess.run(["losetup", "-d", self.path], check=False, capture_output=True)
            self.path = ""
        self.backing.unlink(missing_ok=True)


@pytest.fixture
def partitioned(kernel: None) -> Iterator[PartitionedLoop]:
    need(shutil.which("sfdisk") is not None, "sfdisk (fdisk)")
    made: list[PartitionedLoop] = []
    try:
        made.append(PartitionedLoop())
        made[0].attach()
        yield made[0]
    finally:
        for p in made:
            p.release()


@pytest.mark.kernel
def test_a_disk_with_a_mounted_partition_is_refused(partitioned, tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    name = os.path.basename(partitioned.p1)
    _refused(
        ["replay", "plan", str(t), "-o", str(tmp_path / "jobs"),
         "--target", f"all={partitioned.path}"],
        f"{partitioned.path}: refusing to write: mounted at {partitioned.mnt} \\({name}\\)",
    )  # fmt: skip
    with pytest.raises(IotapeError, match=f"{partitioned.p1}: refusing to write: mounted at"):
        plan(PlanOptions(t, tmp_path / "jobs", targets=[f"all={partitioned.p1}"]))
    # The same for the workload's raw devices.
    with pytest.raises(IotapeError, match=f"{partitioned.path}: refusing to write: mounted at"):
        layout.check_raw(partitioned.path, set())
    # The other partition is free: it is planned for.
    man = plan(PlanOptions(t, tmp_path / "jobs", targets=[f"all={partitioned.p2}"]))
    assert man["targets"][0]["kind"] == "block"


@pytest.mark.kernel
def test_a_device_gone_between_plan_and_run(partitioned, tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    jobs = tmp_path / "jobs"
    plan(PlanOptions(t, jobs, mode="exact", targets=[f"all={partitioned.p2}"]))
    p2 = partitioned.p2
    partitioned.release()  # detaching the loop device removes its partitions' nodes
    assert not os.path.lexists(p2)
    _refused(["replay", "run", str(jobs)], f"{p2} does not exist; block devices:")
    assert not os.path.lexists(p2), "nothing was created in its place"
    assert not (jobs / "results" / "fio.json").exists()


@pytest.mark.kernel
def test_a_device_held_open_exclusively_is_refused(loop, tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    fd = os.open(loop.path, os.O_RDONLY | os.O_EXCL)
    try:
        with pytest.raises(IotapeError) as e:
            plan(PlanOptions(t, tmp_path / "jobs", targets=[f"all={loop.path}"]))
        assert str(e.value) == (
            f"{loop.path}: refusing to write: it is opened exclusively elsewhere (mounted, or "
            f"held by another program) (pass --destroy-data-on {loop.path} to write anyway)"
        )
        assert not (tmp_path / "jobs").exists()
        with pytest.raises(IotapeError, match="opened exclusively elsewhere"):
            layout.check_raw(loop.path, set())
    finally:
        os.close(fd)
    plan(PlanOptions(t, tmp_path / "jobs", targets=[f"all={loop.path}"]))
    fd = os.open(loop.path, os.O_RDONLY | os.O_EXCL)
    try:
        _refused(["replay", "run", str(tmp_path / "jobs")], "opened exclusively elsewhere")
    finally:
        os.close(fd)


@pytest.mark.kernel
def test_a_device_in_use_as_swap_is_refused(loop, tmp_path: Path) -> None:
    need(shutil.which("swapon") is not None, "swapon (util-linux)")
    t = _trace(tmp_path / "t.iot")
    subprocess.run(["mkswap", "-q", loop.path], check=True)
    # For the instant of one check: a 256 MiB swap nothing is pushed to in that time.
    subprocess.run(["swapon", loop.path], check=True)
    try:
        with pytest.raises(
            IotapeError, match=f"{loop.path}: refusing to write: it is in use as swap"
        ):
            plan(PlanOptions(t, tmp_path / "jobs", targets=[f"all={loop.path}"]))
    finally:
        subprocess.run(["swapoff", loop.path], check=False)
    assert not (tmp_path / "jobs").exists()


@pytest.mark.kernel
def test_a_device_a_filesystem_appeared_on_is_refused_at_run(loop, tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot")
    plan(PlanOptions(t, tmp_path / "jobs", targets=[f"all={loop.path}"]))
    subprocess.run(["mkfs.ext4", "-q", "-F", loop.path], check=True)
    _refused(["replay", "run", str(tmp_path / "jobs")], "it holds an ext4 signature")
    man = json.loads((tmp_path / "jobs" / "plan.json").read_text())
    assert man["targets"][0]["kind"] == "block"


def test_split_writes_no_trace_into_dev(tmp_path: Path, tag: str) -> None:
    t = _trace(tmp_path / "t.iot")
    out = f"/dev/iotape-split-{tag}.iot"
    from analyzer.tiering import presets as tiering

    with pytest.raises(IotapeError, match=f"-o {out}: is under /dev"):
        split.split(t, out, tiering.params_for("lru", unit=4096))
    assert not os.path.lexists(out)


def test_tiering_check_refuses_a_missing_device_before_writing(tmp_path: Path, tag: str) -> None:
    t = _trace(tmp_path / "t.iot")
    from analyzer.tiering import presets as tiering

    out = tmp_path / "chk"
    with pytest.raises(IotapeError, match=f"--fast /dev/iotape-ssd-{tag} does not exist; block"):
        tiering_check.check(
            t, f"/dev/iotape-ssd-{tag}", "/dev/null", tiering.params_for("lru"), out
        )
    assert not out.exists()


def test_workload_refuses_a_mistyped_dev_name(tmp_path: Path, tag: str) -> None:
    res = iotape(
        "workload", "run", "--db-path", f"/dev/iotape-db-{tag}", "--log-path", str(tmp_path)
    )
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert f"--db-path /dev/iotape-db-{tag} does not exist; block devices:" in res.stderr
    assert not os.path.lexists(f"/dev/iotape-db-{tag}")
