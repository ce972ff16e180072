"""Where the replay goes: `--target NAME=PATH`, resolved only to paths the user named.

NAME is, most specific first, `dbK:STREAM`, `dbK`, a stream name, a source
device name from the trace header, or `all`; a storage group's log (the log
streams of its databases, replayed as one) `sgJ:STREAM` or `sgJ`, then the
stream, device or `all` (a group of one database: its log goes to `sgJ` before
`dbK`). Databases and group logs that share a path share it as equal,
block-aligned offset ranges.

What each path is, and whether it may be written, is devices/'s to say
(targets.classify, safety.check_target).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from base.errors import IotapeError
from devices import targets


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


def probe(path: str, create: int | None = None) -> Target:
    """The target at `path`: what it is, its size and logical block size.
    Run `classify` and the safety checks first: this opens a block device."""
    kind = targets.classify(path, create)
    if kind == "create":
        return Target(path, "file", create, 512, create)
    size, block = targets.size_of(path)
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
