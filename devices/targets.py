"""Where the replay goes: `--target NAME=PATH`, resolved only to paths the user named.

NAME is, most specific first, `dbK:STREAM`, `dbK`, a stream name, a source
device name from the trace header, or `all`; a storage group's log (the log
streams of its databases, replayed as one) `sgJ:STREAM` or `sgJ`, then the
stream, device or `all` (a group of one database: its log goes to `sgJ` before
`dbK`). Databases and group logs that share a path share it as equal,
block-aligned offset ranges.

A target is what it claims to be, or it is refused (`classify`): a block device,
or a regular file that exists, or one the user asked to create (--create-file,
never under /dev, /proc or /sys). A mistyped /dev name would otherwise become a
file in /dev's RAM-backed filesystem, and its "latencies" those of memory.
"""

from __future__ import annotations

import difflib
import fcntl
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from base.errors import IotapeError

BLKGETSIZE64 = 0x80081272
BLKSSZGET = 0x1268


@dataclass(frozen=True)
class Target:
    path: str
    kind: str  # "block" or "file"
    size: int | None  # None: only the dry-run placeholder
    block: int
    create: int | None = None  # a file to create of this many bytes (--create-file)


class Owner(NamedTuple):
    """Whose requests a job replays: database K ("db", K), or the log of storage
    group J ("sg", J) where groups share logs. Databases sort first, each kind
    by number."""

    kind: str
    number: int

    @property
    def name(self) -> str:
        return f"{self.kind}{self.number}"


def parse(specs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise IotapeError(f"--target {spec}: expected NAME=PATH (e.g. db0=/dev/sdb)")
        if name in out:
            raise IotapeError(f"--target {spec}: {name} is mapped twice")
        out[name] = path
    return out


SYSTEM_DIRS = ("/dev", "/proc", "/sys")


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


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


def probe(path: str, create: int | None = None) -> Target:
    """The target at `path`: what it is, its size and logical block size.
    Run `classify` and the safety checks first: this opens a block device."""
    kind = classify(path, create)
    if kind == "create":
        return Target(path, "file", create, 512, create)
    size, block = size_of(path)
    return Target(path, kind, size, block)


def choose(
    mapping: dict[str, str],
    owner: Owner,
    stream: str,
    device: str,
    group: int | None = None,
    members: list[int] | None = None,
) -> str:
    """The path of `owner`'s `stream` from `device`. `group`: the storage group
    (of this one database) whose log this stream is; `members`: the databases
    whose log a group owner replays (for the error)."""
    keys = [f"{owner.name}:{stream}", owner.name, stream, device, "all"]
    if group is not None:
        keys[:0] = [f"sg{group}:{stream}", f"sg{group}"]
    for key in keys:
        if key in mapping:
            return mapping[key]
    what = f"database {owner.name}"
    if owner.kind == "sg":
        what = (
            f"storage group {owner.name} (the log of {', '.join(f'db{d}' for d in members or [])})"
        )
    raise IotapeError(
        f"no --target for {what}, stream {stream}, source device {device}: "
        f"give --target {owner.name}=PATH, {stream}=PATH, {device}=PATH or all=PATH"
    )


def ranges(users: dict[str, list[Owner]], probed: dict[str, Target], need: dict[str, int]):
    """(path, owner) -> (base, size): each path split evenly among its databases
    and group logs. The dry-run placeholder (no size) is sized to what its users need."""
    out: dict[tuple[str, Owner], tuple[int, int]] = {}
    for path, dbs in users.items():
        t = probed[path]
        dbs = sorted(set(dbs))
        size = t.size if t.size is not None else need[path] * len(dbs)
        each = size // len(dbs) // t.block * t.block
        if each < t.block:
            raise IotapeError(
                f"--target {path}: {size} bytes is too small for {len(dbs)} range(s)"
                + (
                    "; give it a size, or remove it and plan with --create-file SIZE"
                    if not size
                    else ""
                )
            )
        for i, owner in enumerate(dbs):
            out[(path, owner)] = (i * each, each)
    return out


def device_size(path: str) -> int:
    """The size of a block device (or file), by seeking to its end; an OSError if it
    cannot be opened read-only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)
