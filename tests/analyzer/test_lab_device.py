"""`iotape lab device up|down` (analyzer/lab/blockdev.py): the device outlives the
command that brought it up, and `down`, or `up`'s own way out after a failure or a
Ctrl-C, releases every loop device, mount, process and file it made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need

from analyzer.lab import blockdev
from analyzer.lab.array import ArrayModel

pytestmark = pytest.mark.kernel
ROOT = Path(__file__).resolve().parents[2]


def _iotape(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "IOTAPE_LAB_STATE": str(state), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "iotape", "lab", "device", *args],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip


def _left(mount: str, backing: str, loop: str, pid: int) -> list[str]:
    """What of a device is still there."""
    left = []
    if mount in Path("/proc/mounts").read_text():
        left.append(f"mount {mount}")
    if Path(mount).exists():
        left.append(f"dir {mount}")
    if Path(backing).exists():
        left.append(f"backing {backing}")
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    if mount in loops:  # losetup -a names each loop device's file, MOUNT/disk
        left.append(f"loop {loop}")
    try:
        if Path(f"/proc/{pid}/cmdline").read_bytes():
            left.append(f"pid {pid}")
    except OSError:
        pass
    return left


@pytest.mark.parametrize("kind", ["array", "hdd"])
def test_up_then_down_releases_everything(kernel: None, tmp_path: Path, kind: str) -> None:
    need(blockdev.ARRAY_SERVER.exists() and blockdev.HDD_SERVER.exists(), "make native")
    state = tmp_path / "state"
    name = f"array38-{kind}"
    up = _iotape(state, "up", kind, "--name", name, "--size-mb", "32")
    assert up.returncode == 0, up.stderr
    loop = up.stdout.strip()
    st = json.loads((state / f"{name}.json").read_text())
    assert st["loop"] == loop and Path(loop).exists()
    # The command has ended; the device serves on.
    data = os.urandom(4096)
    subprocess.run(["dd", f"of={loop}", "bs=4096", "seek=3", "oflag=direct", "status=none"],
                   input=data, check=True)  # fmt: skip
    got = subprocess.run(["dd", f"if={loop}", "bs=4096", "skip=3", "count=1", "iflag=direct",
                          "status=none"], capture_output=True, check=True).stdout  # fmt: skip
    assert got == data
    listed = _iotape(state, "list")
    assert name in listed.stdout and loop in listed.stdout
    again = _iotape(state, "up", kind, "--name", name)
    assert again.returncode != 0 and "already up" in again.stderr
    down = _iotape(state, "down", name)
    assert down.returncode == 0, down.stderr
    assert not _left(st["mount"], st["backing"], loop, st["pid"])
    assert not list(state.iterdir())
    missing = _iotape(state, "down", name)
    assert missing.returncode != 0 and "no such lab device" in missing.stderr


def test_bad_options_make_nothing(kernel: None, tmp_path: Path) -> None:
    state = tmp_path / "state"
    for args, says in [
        (["up", "array", "--name", "x", "--set", "nope=1"], "--set nope=1"),
        (["up", "array", "--name", "x", "--set", "disks=many"], "not a number"),
        (["up", "array", "--name", "x", "--set", "disks=4.5"], "a whole number"),
        (["up", "tape", "--name", "x"], "tape: hdd or array"),
        (["up", "array", "--name", "../x"], "--name"),
    ]:
        r = _iotape(state, *args)
        assert r.returncode != 0 and says in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    # The server refuses a model (3 disks: RAID 6 needs 4): its message, nothing left.
    before = set(Path("/dev/shm").glob("iotape-lab-x-*"))
    r = _iotape(state, "up", "array", "--name", "x", "--disks", "3")
    assert r.returncode != 0 and "bad model" in r.stderr, r.stderr
    assert set(Path("/dev/shm").glob("iotape-lab-x-*")) == before
    assert not list(state.glob("*.json"))


def test_a_ctrl_c_during_up_releases_what_was_made(
    kernel: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the server is up and mounted, before the loop device: the way out
    ends the server and removes its mount and memory; no state file is left."""
    need(blockdev.ARRAY_SERVER.exists(), "make native")
    monkeypatch.setenv("IOTAPE_LAB_STATE", str(tmp_path / "state"))
    made: dict[str, str] = {}

    def interrupted(path: Path) -> str:
        made["mount"] = str(path.parent)
        made["pid"] = next(
            p.name
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and str(path.parent).encode() in _cmdline(p)
        )
        raise KeyboardInterrupt

    monkeypatch.setattr(blockdev, "_losetup", interrupted)
    with pytest.raises(KeyboardInterrupt):
        blockdev.up("array38-ctrlc", "array", 32, ArrayModel.load())
    assert made["mount"] not in Path("/proc/mounts").read_text()
    assert not Path(made["mount"]).exists()
    assert not _cmdline(Path(f"/proc/{made['pid']}"))
    assert not list(Path("/dev/shm").glob("iotape-lab-array38-ctrlc-*"))
    assert not list((tmp_path / "state").glob("*.json"))


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _fio(*jobs: tuple[str, str, str, int]) -> dict[str, dict]:
    """fio on each (name, device, rw) job at once, 8 KiB random requests of `n` each,
    depth 4, direct; each job's JSON by name."""
    argv = ["fio", "--output-format=json", "--ioengine=libaio", "--direct=1", "--bs=8k",
            "--iodepth=4", "--randrepeat=0", "--size=16m"]  # fmt: skip
    for name, dev, rw, n in jobs:
        argv += [f"--name={name}", f"--filename={dev}", f"--rw={rw}", f"--number_ios={n}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return {j["jobname"]: j for j in json.loads(out[out.index("{") :])["jobs"]}


def test_two_controllers_each_its_own_cache_and_queue(kernel: None, tmp_path: Path) -> None:
    """`up array --controllers 2`: NAME.a and NAME.b, two servers. Writes to A fill A's
    write-back cache and not B's; fio on both at once is served by each controller's
    own disks, each counting exactly its own job's writes; `down NAME` releases both."""
    need(blockdev.ARRAY_SERVER.exists(), "make native")
    state = tmp_path / "state"
    up = _iotape(state, "up", "array", "--name", "twoctl", "--size-mb", "64",
                 "--controllers", "2", "--disks", "4")  # fmt: skip
    assert up.returncode == 0, up.stderr
    loops = up.stdout.split()
    assert len(loops) == 2 and loops[0] != loops[1]
    assert f"twoctl.a: {loops[0]} (controller A)" in up.stderr
    sts = [json.loads((state / f"twoctl.{c}.json").read_text()) for c in "ab"]
    assert [s["loop"] for s in sts] == loops and sts[0]["pid"] != sts[1]["pid"]
    try:
        stats = json.loads(_iotape(state, "stats", "twoctl").stdout)
        before = {c: stats[c]["writes"] for c in "ab"}
        _fio(("w", loops[0], "randwrite", 500))
        stats = json.loads(_iotape(state, "stats", "twoctl").stdout)
        a, b = stats["a"], stats["b"]
        assert a["writes"] - before["a"] == 500 and a["dirty_peak"] >= 8192
        assert b["writes"] == before["b"] and b["dirty_peak"] == 0 and b["destaged_bytes"] == 0
        # Each its own limit, the model's (half its write cache: the other half mirrors
        # the partner's), not lent by an idle partner.
        assert a["dirty_limit"] == b["dirty_limit"] == ArrayModel.load().dirty_mb * 2**20
        # Both at once: each controller serves its own job, on its own disks.
        base = {c: stats[c] for c in "ab"}
        jobs = _fio(("ja", loops[0], "randrw", 400), ("jb", loops[1], "randrw", 300))
        stats = json.loads(_iotape(state, "stats", "twoctl").stdout)
        for c, job in (("a", "ja"), ("b", "jb")):
            got = {k: stats[c][k] - base[c][k] for k in ("reads", "writes", "disk_reads")}
            assert got["writes"] == jobs[job]["write"]["total_ios"], (c, got)
            assert got["reads"] >= jobs[job]["read"]["total_ios"] > 0, (c, got)
            assert got["disk_reads"] > 0
        assert stats["b"]["dirty_peak"] > 0
    finally:
        down = _iotape(state, "down", "twoctl")
    assert down.returncode == 0, down.stderr
    for s in sts:
        assert not _left(s["mount"], s["backing"], s["loop"], s["pid"]), s["name"]
    assert not list(state.iterdir())


@pytest.mark.parametrize("failure", [KeyboardInterrupt, blockdev.DeviceError])
def test_a_failure_in_controller_b_releases_a(
    kernel: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: type
) -> None:
    """Controller A is up (state written, server detached) when B's loop device fails
    or a Ctrl-C comes: A is released too, nothing of either is left."""
    need(blockdev.ARRAY_SERVER.exists(), "make native")
    monkeypatch.setenv("IOTAPE_LAB_STATE", str(tmp_path / "state"))
    real = blockdev._losetup
    calls: list[Path] = []

    def second_fails(path: Path) -> str:
        calls.append(path)
        if len(calls) == 2:
            raise failure("losetup refused (the test)")
        return real(path)

    monkeypatch.setattr(blockdev, "_losetup", second_fails)
    with pytest.raises(failure):
        blockdev.up_controllers("twoctl-fail", 32, ArrayModel.load())
    assert len(calls) == 2
    mounts = Path("/proc/mounts").read_text()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    for path in calls:
        assert str(path.parent) not in mounts and not path.parent.exists()
        assert str(path) not in loops
    assert not list(Path("/dev/shm").glob("iotape-lab-twoctl-fail*"))
    assert not list((tmp_path / "state").glob("*.json"))
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit()
                and b"twoctl-fail" in _cmdline(p)]  # fmt: skip
