"""Where a command may write: a path is what it claims to be, or it is refused.

A place to write (a replay's `--target`, the workload's `--db-path` and
`--log-path`) is a block device, or a regular file that exists, or one the user
asked to create (--create-file, never under /dev, /proc or /sys): `classify`. A
mistyped /dev name would otherwise become a file in /dev's RAM-backed filesystem,
and its "latencies" those of memory. Whether a block device may be written over is
safety.py's question.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct

from base.errors import IotapeError
from devices.naming import block_devices

BLKGETSIZE64 = 0x80081272
BLKSSZGET = 0x1268

SYSTEM_DIRS = ("/dev", "/proc", "/sys")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def _listing(path: str) -> str:
    devs = block_devices(path)
    return "block devices: " + (", ".join(devs) if devs else "none")


def _what(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "not a block device or a regular file"


def check_system_path(path: str, flag: str) -> None:
    """Refuse a path under /dev that is not a block device (naming the devices
    there are) and any path under /proc or /sys."""
    top = next((t for t in SYSTEM_DIRS if _under(path, t)), None)
    if top is None:
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if top == "/dev":
            raise IotapeError(f"{flag} {path} does not exist; {_listing(path)}") from None
        raise IotapeError(f"{flag} {path}: is under {top}, not a block device or file") from None
    except OSError as e:
        raise IotapeError(f"{flag} {path}: {e.strerror}") from None
    if stat.S_ISBLK(st.st_mode):
        return
    if top == "/dev":
        raise IotapeError(
            f"{flag} {path} is {_what(st.st_mode)} under /dev, not a block device; {_listing(path)}"
        )
    raise IotapeError(f"{flag} {path}: is under {top}, not a block device or file")


def classify(path: str, create: int | None = None, flag: str = "--target") -> str:
    """What `path` is, "block", "file" or "create" (a file to be made of `create`
    bytes), or an IotapeError saying why it is not a place to replay to. Opens nothing:
    a path under /dev must already be a block device, one under /proc or /sys is
    never written, and a regular file is created only when the user asked for it."""
    if os.path.islink(path):
        raise IotapeError(f"{flag} {path}: is a symbolic link; name the device or file itself")
    check_system_path(path, flag)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if create is None:
            raise IotapeError(
                f"{flag} {path} does not exist; name an existing block device or file, "
                "or give --create-file SIZE to create it"
            ) from None
        parent = os.path.dirname(path) or "."
        if not os.path.isdir(parent):
            raise IotapeError(f"{flag} {path}: directory {parent} does not exist") from None
        return "create"
    except OSError as e:
        raise IotapeError(f"{flag} {path}: {e.strerror}") from None
    if stat.S_ISBLK(st.st_mode):
        return "block"
    if stat.S_ISREG(st.st_mode):
        return "file"
    raise IotapeError(
        f"{flag} {path}: is {_what(st.st_mode)}, not a block device or a regular file"
    )


def check_output_file(path: str, flag: str) -> None:
    """A trace or report written to `path` lands in a regular file the user meant:
    never in /dev, /proc or /sys, never over a device."""
    path = os.path.abspath(path)
    top = next((t for t in SYSTEM_DIRS if _under(path, t)), None)
    if top:
        raise IotapeError(f"{flag} {path}: is under {top}; write to a file elsewhere")
    try:
        st = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise IotapeError(f"{flag} {path}: is {_what(st.st_mode)}, not a regular file")


def size_of(path: str) -> tuple[int, int]:
    """(size, logical block size) of a block device (opened read-only) or a file."""
    st = os.stat(path)
    if not stat.S_ISBLK(st.st_mode):
        return int(st.st_size), 512
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise IotapeError(f"--target {path}: cannot open: {e.strerror}") from None
    try:
        size = struct.unpack("Q", fcntl.ioctl(fd, BLKGETSIZE64, b"\0" * 8))[0]
        block = struct.unpack("i", fcntl.ioctl(fd, BLKSSZGET, b"\0" * 4))[0]
    finally:
        os.close(fd)
    return int(size), int(block)


def device_size(path: str) -> int:
    """The size of a block device (or file), by seeking to its end; an OSError if it
    cannot be opened read-only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)
