"""Block devices as the kernel sees them: resolve a path, read its sysfs facts, name
a device by its number and the machine's devices by their names.

The trace header's device table comes from here (the capture and the importers both
fill it in), and so do the `dev` numbers the trace stores and the in-kernel device
filter is given. A partition maps to its whole disk (that is where requests are
accounted); its start is kept so offsets can be shown both ways.
"""

from __future__ import annotations

import difflib
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from base.errors import IotapeError

SYSFS_DEV_BLOCK = Path("/sys/dev/block")


def kdev(major: int, minor: int) -> int:
    """The kernel's internal dev_t (MINORBITS = 20), as stored in the trace's `dev`."""
    return (major << 20) | minor


def split_kdev(dev: int) -> tuple[int, int]:
    return dev >> 20, dev & ((1 << 20) - 1)


@dataclass(frozen=True)
class Partition:
    name: str
    dev: int
    major: int
    minor: int
    start_bytes: int
    size_bytes: int


@dataclass(frozen=True)
class Device:
    """A whole disk, with the partition the user named if they named one."""

    name: str
    path: str
    dev: int
    major: int
    minor: int
    model: str
    firmware: str
    serial: str
    rotational: bool
    logical_block_size: int
    physical_block_size: int
    capacity_bytes: int
    scheduler: str
    backing_file: str | None
    partition: Partition | None

    def to_json(self) -> dict:
        return asdict(self)


def _read(path: Path, default: str = "") -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return default


def _read_int(path: Path, default: int = 0) -> int:
    text = _read(path)
    try:
        return int(text)
    except ValueError:
        return default


def _sysfs_dir(major: int, minor: int) -> Path:
    return (SYSFS_DEV_BLOCK / f"{major}:{minor}").resolve()


def _scheduler(queue: Path) -> str:
    text = _read(queue / "scheduler")
    for word in text.split():
        if word.startswith("["):
            return word.strip("[]")
    return text


def _disk_facts(sys_dir: Path, path: str) -> Device:
    name = sys_dir.name
    major, minor = (int(x) for x in _read(sys_dir / "dev").split(":"))
    dev_dir = sys_dir / "device"
    # SCSI/SATA put the firmware in `rev`, NVMe in `firmware_rev`.
    firmware = _read(dev_dir / "firmware_rev") or _read(dev_dir / "rev")
    queue = sys_dir / "queue"
    backing = _read(sys_dir / "loop" / "backing_file") or None
    model = _read(dev_dir / "model") or ("loop" if backing else "")
    return Device(
        name=name,
        path=path,
        dev=kdev(major, minor),
        major=major,
        minor=minor,
        model=model,
        firmware=firmware,
        serial=_read(dev_dir / "serial"),
        rotational=_read(queue / "rotational") == "1",
        logical_block_size=_read_int(queue / "logical_block_size", 512),
        physical_block_size=_read_int(queue / "physical_block_size", 512),
        capacity_bytes=_read_int(sys_dir / "size") * 512,
        scheduler=_scheduler(queue),
        backing_file=backing,
        partition=None,
    )


def resolve(path: str) -> Device:
    """The disk behind a block-device path, with the partition if `path` is one."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise IotapeError(f"{path}: no such device") from None
    except OSError as e:
        raise IotapeError(f"{path}: cannot stat: {e.strerror}") from None
    if not stat.S_ISBLK(st.st_mode):
        raise IotapeError(f"{path}: not a block device")
    return by_number(os.major(st.st_rdev), os.minor(st.st_rdev), path)


def by_number(major: int, minor: int, path: str = "") -> Device:
    """The device for a major:minor (a path's st_rdev, or a filesystem's st_dev)."""
    sys_dir = _sysfs_dir(major, minor)
    where = path or f"block device {major}:{minor}"
    if not (sys_dir / "dev").exists():
        raise IotapeError(f"{where}: no sysfs entry for {major}:{minor}")
    if not (sys_dir / "partition").exists():
        return _disk_facts(sys_dir, path)
    disk = _disk_facts(sys_dir.parent, path)
    part = Partition(
        name=sys_dir.name,
        dev=kdev(major, minor),
        major=major,
        minor=minor,
        start_bytes=_read_int(sys_dir / "start") * 512,
        size_bytes=_read_int(sys_dir / "size") * 512,
    )
    return Device(**{**asdict(disk), "partition": part})


def rdev_of(path: str) -> int | None:
    """The device number of the block device at `path` (links followed), else None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_rdev if stat.S_ISBLK(st.st_mode) else None


def is_block(path: str) -> bool:
    return rdev_of(path) is not None


def name_of(dev: int) -> str:
    """The kernel's name (sda1, loop0) of the device with `dev` (see `kdev`)."""
    major, minor = split_kdev(dev)
    return (SYSFS_DEV_BLOCK / f"{major}:{minor}").resolve().name


def holding_device(path: str) -> str | None:
    """The /dev path of the block device holding the filesystem `path` is on, or None
    (a filesystem on no block device, or one without a /dev node)."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    link = SYSFS_DEV_BLOCK / f"{major}:{minor}"
    if not link.exists():
        return None
    dev = Path("/dev") / link.resolve().name
    return str(dev) if dev.exists() else None


def block_devices(near: str = "", limit: int = 6) -> list[str]:
    """/dev paths of the machine's block devices that have a size (an unused loop
    device has none), the names most like `near` first."""
    sysfs = Path("/sys/class/block")
    names = []
    for entry in sorted(sysfs.iterdir()) if sysfs.is_dir() else []:
        dev = f"/dev/{entry.name}"
        try:
            if stat.S_ISBLK(os.stat(dev).st_mode) and int((entry / "size").read_text()) > 0:
                names.append(dev)
        except (OSError, ValueError):
            continue
    if near:
        names.sort(key=lambda n: -difflib.SequenceMatcher(None, near, n).ratio())
    return names[:limit] + (["…"] if len(names) > limit else [])
