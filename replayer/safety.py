"""Refuse to write where data may live: a mounted device, one holding a filesystem
or partition table, one used by another device (holders), or the root disk.

Each check names the device the user gave; `--destroy-data-on DEV` lifts them for
that one device. Nothing here opens a path the user did not name: the sysfs and
/proc files read are the kernel's own view of that device.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from iotape.errors import IotapeError
from iotape.recorder import devices


def _disk_and_parts(rdev: int) -> tuple[devices.Device, set[int]]:
    d = devices.by_number(os.major(rdev), os.minor(rdev))
    disk = d.partition.dev if d.partition else d.dev
    whole = Path(f"/sys/dev/block/{d.major}:{d.minor}").resolve()
    nums = {devices.kdev(os.major(rdev), os.minor(rdev)), d.dev, disk}
    if not d.partition:
        for part in whole.iterdir():
            if (part / "partition").exists():
                ma, mi = (int(x) for x in (part / "dev").read_text().split(":"))
                nums.add(devices.kdev(ma, mi))
    return d, nums


def _mounted_at(nums: set[int]) -> str | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        ma, mi = (int(x) for x in f[2].split(":"))
        if devices.kdev(ma, mi) in nums:
            return f[4]
    for line in Path("/proc/swaps").read_text().splitlines()[1:]:
        name = line.split()[0]
        try:
            st = os.stat(name)
        except OSError:
            continue
        if (
            stat.S_ISBLK(st.st_mode)
            and devices.kdev(os.major(st.st_rdev), os.minor(st.st_rdev)) in nums
        ):
            return "swap"
    return None


def _holders(nums: set[int]) -> list[str]:
    out = []
    for n in nums:
        h = Path(f"/sys/dev/block/{n >> 20}:{n & 0xFFFFF}/holders")
        if h.is_dir():
            out += [p.name for p in h.iterdir()]
    return sorted(set(out))


def _signature(path: str) -> str | None:
    try:
        p = subprocess.run(
            ["blkid", "-p", "-o", "export", path], capture_output=True, text=True, timeout=30
        )
    except FileNotFoundError:
        raise IotapeError(
            "blkid not found: cannot check targets for filesystems (install util-linux)"
        ) from None
    if p.returncode == 2:  # nothing found
        return None
    if p.returncode != 0:
        raise IotapeError(f"{path}: blkid -p failed: {p.stderr.strip() or p.returncode}")
    kv = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    if "PTTYPE" in kv:
        return f"a {kv['PTTYPE']} partition table"
    if "TYPE" in kv:
        return f"a {kv['TYPE']} signature"
    return "a signature" if kv else None


def _root_disk() -> int:
    st = os.stat("/")
    d = devices.by_number(os.major(st.st_dev), os.minor(st.st_dev)) if os.major(st.st_dev) else None
    return d.dev if d else -1


def rdev_of(path: str) -> int | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_rdev if stat.S_ISBLK(st.st_mode) else None


def check_target(path: str, allowed: list[str]) -> None:
    """Raise IotapeError (one line) unless `path` is safe to write or is allowed."""
    if os.path.islink(path):
        raise IotapeError(
            f"{path}: refusing to write through a symbolic link; name the device itself"
        )
    rdev = rdev_of(path)
    if rdev is None:
        return  # a regular file (or one fio will create): the user named it
    if any(rdev_of(a) == rdev for a in allowed):
        return
    d, nums = _disk_and_parts(rdev)
    hint = f" (pass --destroy-data-on {path} to write anyway)"
    if d.dev == _root_disk():
        raise IotapeError(f"{path}: refusing to write: it is on the root disk {d.name}{hint}")
    where = _mounted_at(nums)
    if where:
        raise IotapeError(f"{path}: refusing to write: mounted at {where}{hint}")
    held = _holders(nums)
    if held:
        raise IotapeError(f"{path}: refusing to write: in use by {', '.join(held)}{hint}")
    sig = _signature(path)
    if sig:
        raise IotapeError(f"{path}: refusing to write: it holds {sig}{hint}")
