"""Where the replay goes: `--target NAME=PATH`, resolved only to paths the user named.

NAME is, most specific first, `dbK:STREAM`, `dbK`, a stream name, a source
device name from the trace header, or `all`. Databases that share a path share
it as equal, block-aligned offset ranges.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from dataclasses import dataclass

from iotape.errors import IotapeError

BLKGETSIZE64 = 0x80081272
BLKSSZGET = 0x1268


@dataclass(frozen=True)
class Target:
    path: str
    kind: str  # "block" or "file"
    size: int | None  # None: a file that does not exist yet
    block: int


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


def probe(path: str) -> Target:
    """Size and logical block size of a named device or file (opened read-only)."""
    if os.path.islink(path):
        raise IotapeError(f"--target {path}: is a symbolic link; name the device or file itself")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Target(path, "file", None, 512)
    except OSError as e:
        raise IotapeError(f"--target {path}: {e.strerror}") from None
    if stat.S_ISBLK(st.st_mode):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise IotapeError(f"--target {path}: cannot open: {e.strerror}") from None
        try:
            size = struct.unpack("Q", fcntl.ioctl(fd, BLKGETSIZE64, b"\0" * 8))[0]
            block = struct.unpack("i", fcntl.ioctl(fd, BLKSSZGET, b"\0" * 4))[0]
        finally:
            os.close(fd)
        return Target(path, "block", int(size), int(block))
    if stat.S_ISREG(st.st_mode):
        return Target(path, "file", int(st.st_size) or None, 512)
    raise IotapeError(f"--target {path}: not a block device or a regular file")


def choose(mapping: dict[str, str], db: int, stream: str, device: str) -> str:
    for key in (f"db{db}:{stream}", f"db{db}", stream, device, "all"):
        if key in mapping:
            return mapping[key]
    raise IotapeError(
        f"no --target for database db{db}, stream {stream}, source device {device}: "
        f"give --target db{db}=PATH, {stream}=PATH, {device}=PATH or all=PATH"
    )


def ranges(users: dict[str, list[int]], probed: dict[str, Target], need: dict[str, int]):
    """(path, db) -> (base, size): each path split evenly among its databases.
    A file that does not exist yet is sized to what its users need."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for path, dbs in users.items():
        t = probed[path]
        dbs = sorted(set(dbs))
        size = t.size if t.size is not None else need[path] * len(dbs)
        each = size // len(dbs) // t.block * t.block
        if each < t.block:
            raise IotapeError(f"--target {path}: {size} bytes is too small for {len(dbs)} range(s)")
        for i, db in enumerate(dbs):
            out[(path, db)] = (i * each, each)
    return out
