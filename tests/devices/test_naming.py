"""Block devices by path and by number (devices/naming.py), and what a path to write
to is (devices/targets.py), without the kernel fixture where none is needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from base.errors import IotapeError
from devices import naming, targets


def test_kdev_is_the_kernels_dev_t_and_splits_back() -> None:
    assert naming.kdev(8, 1) == (8 << 20) | 1
    assert naming.split_kdev(naming.kdev(259, 65537)) == (259, 65537)


def test_a_file_or_a_missing_path_is_no_block_device(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 4096)
    for p in (str(f), str(tmp_path / "missing"), str(tmp_path)):
        assert naming.rdev_of(p) is None and not naming.is_block(p)
    with pytest.raises(IotapeError, match="not a block device"):
        naming.resolve(str(f))
    with pytest.raises(IotapeError, match="no such device"):
        naming.resolve(str(tmp_path / "missing"))
    assert targets.classify(str(f)) == "file"
    assert targets.size_of(str(f)) == (4096, 512)
    assert targets.device_size(str(f)) == 4096


def test_output_files_stay_out_of_system_directories(tmp_path: Path) -> None:
    with pytest.raises(IotapeError, match="is under /dev"):
        targets.check_output_file("/dev/null", "-o")
    with pytest.raises(IotapeError, match="a directory, not a regular file"):
        targets.check_output_file(str(tmp_path), "-o")
    targets.check_output_file(str(tmp_path / "new.iot"), "-o")


@pytest.mark.kernel
def test_a_loop_device_by_path_and_by_number(loop) -> None:
    rdev = naming.rdev_of(loop.path)
    assert rdev is not None and naming.is_block(loop.path)
    d = naming.resolve(loop.path)
    assert (d.major, d.minor) == (os.major(rdev), os.minor(rdev))
    assert d.partition is None and d.backing_file and d.model == "loop"
    assert naming.name_of(d.dev) == d.name == os.path.basename(loop.path)
    assert f"/dev/{d.name}" in naming.block_devices(loop.path, limit=1000)
    assert targets.size_of(loop.path)[0] == targets.device_size(loop.path) == d.capacity_bytes
