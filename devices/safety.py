"""Refuse to write where data may live: a mounted device, one holding a filesystem
or partition table, one used by another device (holders), or the root disk.

Each check names the device the user gave; `--destroy-data-on DEV` lifts them for
that one device. Nothing here opens a path the user did not name: the sysfs and
/proc files read are the kernel's own view of that device.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from pathlib import Path

from base.errors import IotapeError
from devices import naming


def _disk_and_parts(rdev: int) -> tuple[naming.Device, set[int]]:
    d = naming.by_number(os.major(rdev), os.minor(rdev))
    disk = d.partition.dev if d.partition else d.dev
    whole = Path(f"/sys/dev/block/{d.major}:{d.minor}").resolve()
    nums = {naming.kdev(os.major(rdev), os.minor(rdev)), d.dev, disk}
    if not d.partition:
        for part in whole.iterdir():
            if (part / "partition").exists():
                ma, mi = (int(x) for x in (part / "dev").read_text().split(":"))
                nums.add(naming.kdev(ma, mi))
    return d, nums


def _mounted_at(nums: set[int]) -> str | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        ma, mi = (int(x) for x in f[2].split(":"))
        if naming.kdev(ma, mi) in nums:
            return f"{f[4]} ({naming.name_of(naming.kdev(ma, mi))})"
    for line in Path("/proc/swaps").read_text().splitlines()[1:]:
        name = line.split()[0]
        try:
            st = os.stat(name)
        except OSError:
            continue
        if (
            stat.S_ISBLK(st.st_mode)
            and naming.kdev(os.major(st.st_rdev), os.minor(st.st_rdev)) in nums
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
    # DEVNAME and a partition's own table entry (PART_ENTRY_*) say nothing of its contents.
    kv = {k: v for k, v in kv.items() if k != "DEVNAME" and not k.startswith("PART_ENTRY_")}
    if "PTTYPE" in kv:
        return f"a {kv['PTTYPE']} partition table"
    if "TYPE" in kv:
        return f"{'an' if kv['TYPE'][:1] in 'aeiou' else 'a'} {kv['TYPE']} signature"
    return "a signature" if kv else None


# Mount points whose disk runs the system: writing anywhere on it is refused.
SYSTEM_MOUNTS = ("/", "/boot", "/boot/efi", "/efi", "/usr", "/var", "/home")


def _disks_under(major: int, minor: int) -> set[int]:
    """The whole disks a block device lives on: a partition's parent disk, and for a
    stacked device (dm, md) the disks under its slaves. A loop device is its own disk:
    the disk holding its backing file is not written through it."""
    sysdir = Path(f"/sys/dev/block/{major}:{minor}")
    if not sysdir.exists():
        return set()
    sysdir = sysdir.resolve()
    if (sysdir / "partition").exists():
        sysdir = sysdir.parent
    out = set()
    slaves = sysdir / "slaves"
    for s in slaves.iterdir() if slaves.is_dir() else []:
        ma, mi = (int(x) for x in (s / "dev").read_text().split(":"))
        out |= _disks_under(ma, mi)
    ma, mi = (int(x) for x in (sysdir / "dev").read_text().split(":"))
    return out | {naming.kdev(ma, mi)}


def root_disks() -> dict[int, str]:
    """Whole disks (kernel dev_t) holding /, /boot and the like -> the mount point."""
    out: dict[int, str] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if f[4] not in SYSTEM_MOUNTS:
            continue
        ma, mi = (int(x) for x in f[2].split(":"))
        found = _disks_under(ma, mi) if ma else set()
        if not found:
            # btrfs and the like report an anonymous device: ask the mount source.
            src = f[f.index("-") + 2]
            rdev = naming.rdev_of(src) if src.startswith("/dev/") else None
            if rdev is not None:
                found = _disks_under(os.major(rdev), os.minor(rdev))
        for d in found:
            out.setdefault(d, f[4])
    return out


def _open_exclusively(path: str) -> str | None:
    """The reason another user holds the device (EBUSY on an O_EXCL open), or None.
    The descriptor is closed at once: nothing is read or written."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.EBUSY:
            return "it is opened exclusively elsewhere (mounted, or held by another program)"
        return None  # not a claim by someone else; probing the size says why it fails
    os.close(fd)
    return None


def check_target(path: str, allowed: list[str]) -> None:
    """Raise IotapeError (one line) unless `path` is safe to write or is allowed.

    Each check is the kernel's own view, asked without opening the device for
    writing, so the refusal says what the device is (the root disk, mounted, in
    use) rather than whatever an open() of it would have failed with."""
    if os.path.islink(path):
        raise IotapeError(
            f"{path}: refusing to write through a symbolic link; name the device itself"
        )
    rdev = naming.rdev_of(path)
    if rdev is None:
        return  # a regular file: the user named it (targets.classify said what is allowed)
    if any(naming.rdev_of(a) == rdev for a in allowed):
        return
    d, nums = _disk_and_parts(rdev)
    hint = f" (pass --destroy-data-on {path} to write anyway)"
    roots = root_disks()
    on_root = next((roots[n] for n in nums if n in roots), None)
    if on_root:
        raise IotapeError(
            f"{path}: refusing to write: it is on the root disk {d.name} (which holds {on_root})"
            f"{hint}"
        )
    where = _mounted_at(nums)
    if where == "swap":
        raise IotapeError(f"{path}: refusing to write: it is in use as swap{hint}")
    if where:
        raise IotapeError(f"{path}: refusing to write: mounted at {where}{hint}")
    held = _holders(nums)
    if held:
        raise IotapeError(
            f"{path}: refusing to write: in use by {', '.join(held)} (device-mapper or md){hint}"
        )
    busy = _open_exclusively(path)
    if busy:
        raise IotapeError(f"{path}: refusing to write: {busy}{hint}")
    sig = _signature(path)
    if sig:
        raise IotapeError(f"{path}: refusing to write: it holds {sig}{hint}")
