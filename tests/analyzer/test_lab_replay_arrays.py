"""analyzer/lab/replay_arrays.py: the prediction's replays each get temporary arrays of
their own (a pair with two controllers, each served with its controller's model), each
recorded device mapped to its controller's; all released after, also on a failure."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import need

from analyzer.lab import replay_arrays
from analyzer.lab.array import SERVER, ArrayModel


def test_targets_one_device_or_each_recorded_device_by_name() -> None:
    assert replay_arrays.targets(["/dev/loop7"], ["/dev/loop20"]) == "/dev/loop20"
    got = replay_arrays.targets(["/dev/loop7", "/dev/loop8"], ["/dev/loop20", "/dev/loop21"])
    assert got == {"loop7": "/dev/loop20", "loop8": "/dev/loop21"}
    with pytest.raises(ValueError):  # a controller without its recorded device
        replay_arrays.targets(["/dev/loop7"], ["/dev/loop20", "/dev/loop21"])


def _gone(files: list[tuple[str, str, str]], pids: list[int]) -> list[str]:
    """What of the arrays (backing, mount, loop device) and their servers is left."""
    mounts = Path("/proc/mounts").read_text()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    left = [f for b, m, _ in files for f in (b, m) if Path(f).exists() or f in mounts]
    left += [loop for _, m, loop in files if m in loops]  # losetup -a: MOUNT/disk
    return left + [str(p) for p in pids if Path(f"/proc/{p}").exists()]


@pytest.mark.kernel
def test_pairs_with_their_models_released_after_a_failure(kernel: None) -> None:
    """Two replays of two controllers: two pairs, four servers, each with its group's
    model, four loop devices; a failure in the body releases all of them."""
    need(SERVER.exists(), "make native")
    base = ArrayModel.load()
    models = [replace(base, tier_mb=0, cache_ssd_mb=0), replace(base, cache_ssd_mb=8)]
    files: list[tuple[str, str, str]] = []
    pids: list[int] = []
    with (
        pytest.raises(RuntimeError, match="the replay failed"),
        replay_arrays.replay_arrays(32 << 20, [[m, m] for m in models]) as made,
    ):
        assert [len(g) for g in made] == [2, 2]
        for group, m in zip(made, models, strict=True):
            for a, loop in group:
                files.append((str(a.backing), str(a.mount), loop))
                pids.append(a.pid)
                args = Path(f"/proc/{a.pid}/cmdline").read_bytes().split(b"\0")
                assert f"cache_ssd_mb={m.cache_ssd_mb}".encode() in args
        assert len({loop for _, _, loop in files}) == 4
        raise RuntimeError("the replay failed (the test)")
    assert not _gone(files, pids)


@pytest.mark.kernel
def test_a_failure_while_making_them_releases_those_made(
    kernel: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The third loop device refused: the two arrays made before it and the third's
    server are released."""
    need(SERVER.exists(), "make native")
    real = replay_arrays._losetup
    calls: list[Path] = []

    def third_fails(path: Path, direct: bool) -> str:
        calls.append(path)
        if len(calls) == 3:
            raise OSError("losetup refused (the test)")
        return real(path, direct)

    monkeypatch.setattr(replay_arrays, "_losetup", third_fails)
    m = ArrayModel.load()
    with (
        pytest.raises(OSError, match="refused"),
        replay_arrays.replay_arrays(32 << 20, [[m, m], [m, m]]),
    ):
        pytest.fail("made all four")
    assert len(calls) == 3
    mounts = Path("/proc/mounts").read_text()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    for disk in calls:
        assert str(disk.parent) not in mounts and not disk.parent.exists()
        assert str(disk) not in loops
