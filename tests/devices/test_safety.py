"""Writing over a block device is refused where data may live (devices/safety.py):
a mounted device, one holding a filesystem signature unless named, the root disk."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from base.errors import IotapeError
from devices import safety

# Every test here needs root and loop devices (conftest `kernel`).
pytestmark = pytest.mark.kernel


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
