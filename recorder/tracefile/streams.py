"""Stream labels on records, as the loader sets them in C while it drains: the
schema's thread-name rules, then the file extents `--label` names.

Here because every producer of records needs it: the capture backends that cannot
label in C, and the importers (thread-name rules only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import schemas


@dataclass(frozen=True)
class Extent:
    """A byte range of one device whose reads and writes get their own streams."""

    dev: int
    start: int
    end: int
    read_stream: int
    write_stream: int


def apply_streams(records: np.ndarray, extents: list[Extent]) -> None:
    """Label records in place, as the loader does while draining: thread-name rules
    (longest prefix wins), then file extents (which win over rules). Reads get the
    read stream; every other op the write stream. For backends that cannot label in C."""
    read = records["op"] == schemas.enum("op")["read"]
    known = schemas.enum("stream")
    comm = records["comm"]
    # One thread name for all (an import without names): match the rules once, not per record.
    same = len(comm) > 0 and bool((comm == comm[0]).all())
    for rule in sorted(schemas.thread_rules(), key=lambda r: len(r["prefix"])):
        prefix = rule["prefix"].encode()
        hit = comm[0].startswith(prefix) if same else np.char.startswith(comm, prefix)
        if same and not hit:
            continue
        r = known.get(rule.get("read", ""), 0)
        w = known.get(rule.get("write", ""), 0)
        records["stream"] = np.where(hit, np.where(read, r, w), records["stream"])
    if not extents:
        return
    for dev in {e.dev for e in extents}:
        ext = [e for e in extents if e.dev == dev]
        starts = np.array([e.start for e in ext], dtype=np.uint64)
        ends = np.array([e.end for e in ext], dtype=np.uint64)
        rs = np.array([e.read_stream for e in ext], dtype=np.uint8)
        ws = np.array([e.write_stream for e in ext], dtype=np.uint8)
        on_dev = (records["dev"] == dev) & (records["bytes"] > 0)
        idx = np.searchsorted(starts, records["offset"], side="right") - 1
        safe = np.clip(idx, 0, len(ext) - 1)
        inside = on_dev & (idx >= 0) & (records["offset"] < ends[safe])
        records["stream"] = np.where(inside, np.where(read, rs[safe], ws[safe]), records["stream"])
