"""Stream labels: from thread names (schema rules) and from file extents (FIEMAP).

`--label db=/data/*.edb` marks every request whose disk offset falls inside
the physical extents of the matching files. Extents are read once, when the
capture starts: files that grow or are created later are not covered.
"""

from __future__ import annotations

import array
import fcntl
import glob
import os
import struct

import schemas
from base.errors import IotapeError
from devices import naming
from recorder.tracefile.streams import Extent

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
# Extents without a stable physical location on the device: skip them.
_NO_PHYSICAL = 0x2 | 0x4 | 0x8 | 0x80 | 0x200 | 0x400
_HEAD = struct.Struct("=QQIIII")
_EXTENT = struct.Struct("=QQQ2QI3I")
_BATCH = 256

# Label aliases whose stream depends on the op (a database file is read and written).
_ALIASES = {
    "db": ("db-read", "db-write"),
    "log": ("log-read", "log-write"),
}
FIRST_USER_STREAM = 32


def file_extents(path: str) -> list[tuple[int, int]]:
    """(physical byte offset, length) of a file's extents, relative to its filesystem device."""
    out: list[tuple[int, int]] = []
    start = 0
    with open(path, "rb") as f:
        while True:
            buf = bytearray(_HEAD.size + _BATCH * _EXTENT.size)
            _HEAD.pack_into(buf, 0, start, 2**64 - 1 - start, FIEMAP_FLAG_SYNC, 0, _BATCH, 0)
            arr = array.array("B", buf)
            try:
                fcntl.ioctl(f.fileno(), FS_IOC_FIEMAP, arr, True)
            except OSError as e:
                raise IotapeError(f"{path}: cannot map extents (FIEMAP): {e.strerror}") from None
            data = arr.tobytes()
            mapped = _HEAD.unpack_from(data, 0)[3]
            last = False
            for i in range(mapped):
                ext = _EXTENT.unpack_from(data, _HEAD.size + i * _EXTENT.size)
                logical, physical, length, flags = ext[0], ext[1], ext[2], ext[5]
                if not flags & _NO_PHYSICAL:
                    out.append((physical, length))
                start = logical + length
                last = last or bool(flags & FIEMAP_EXTENT_LAST)
            if mapped == 0 or last:
                return out


def parse_label(spec: str) -> tuple[str, str]:
    name, sep, pattern = spec.partition("=")
    if not sep or not name or not pattern:
        raise IotapeError(f"--label {spec!r}: expected NAME=GLOB, e.g. db=/data/*.edb")
    return name, pattern


def stream_table(names: list[str]) -> tuple[dict[str, tuple[int, int]], dict[int, str]]:
    """Stream ids (for reads, for writes) of each label name, and the id → name table."""
    known = schemas.enum("stream")
    table = {v: k for k, v in known.items()}
    ids: dict[str, tuple[int, int]] = {}
    next_id = FIRST_USER_STREAM
    for name in names:
        if name in ids:
            continue
        if name in _ALIASES:
            r, w = _ALIASES[name]
            ids[name] = (known[r], known[w])
        elif name in known:
            ids[name] = (known[name], known[name])
        else:
            if next_id > 255:
                raise IotapeError(f"--label {name}: too many distinct labels (at most 224)")
            ids[name] = (next_id, next_id)
            table[next_id] = name
            next_id += 1
    return ids, table


def label_extents(
    specs: list[str], recorded: list[naming.Device]
) -> tuple[list[Extent], dict[int, str], list[dict]]:
    """Extents of every labelled file on a recorded device, the stream table, and a summary."""
    parsed = [parse_label(s) for s in specs]
    ids, table = stream_table([n for n, _ in parsed])
    by_dev = {d.dev: d for d in recorded}
    extents: list[Extent] = []
    summary: list[dict] = []
    for name, pattern in parsed:
        files = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
        if not files:
            raise IotapeError(f"--label {name}={pattern}: no file matches")
        matched = []
        for path in files:
            st = os.stat(path)
            fs_dev = naming.by_number(os.major(st.st_dev), os.minor(st.st_dev))
            if fs_dev.dev not in by_dev:
                raise IotapeError(
                    f"--label {name}={pattern}: {path} lives on {fs_dev.name}, "
                    "which is not a recorded device"
                )
            base = fs_dev.partition.start_bytes if fs_dev.partition else 0
            r, w = ids[name]
            spans = file_extents(path)
            extents += [Extent(fs_dev.dev, base + p, base + p + n, r, w) for p, n in spans]
            matched.append({"path": os.path.abspath(path), "extents": len(spans)})
        summary.append({"name": name, "glob": pattern, "files": matched})
    return sorted(extents, key=lambda e: (e.dev, e.start)), table, summary


def thread_rule_args() -> list[str]:
    """The schema's thread-name rules as the loader's `--rule PREFIX:READ:WRITE` values."""
    known = schemas.enum("stream")
    out = []
    for rule in schemas.thread_rules():
        r = known[rule["read"]] if "read" in rule else 0
        w = known[rule["write"]] if "write" in rule else 0
        out.append(f"{rule['prefix']}:{r}:{w}")
    return out
