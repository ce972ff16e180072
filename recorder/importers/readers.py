"""The non-CSV readers (vscsi's binary records, fio's iolog) and the reader of each kind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from base.errors import IotapeError
from recorder.importers import textlines
from recorder.importers.csvread import read_csv
from recorder.importers.textformats import (
    BLOCK_BYTES,
    FIO_FILE_ACTIONS,
    FORMATS,
    MAX_U32,
    FormatSpec,
)
from recorder.importers.textrecords import OP, BadValue, Context, line_blocks, to_records

# How many records of each layout `vscsi_version` looks at.
VSCSI_SAMPLE = 32
VSCSI_HEAD = 1280  # a whole number of records of either layout


def vscsi_version(head: bytes) -> int:
    """1 or 2: the layout that every whole record of `head` fits.

    Looking at one record is not enough: a v1 record read as v2 has its serial
    number's high byte in v2's version field. Raises BadValue saying why neither fits.
    """
    why = []
    for ver, dt in FORMATS["vscsi"].dtype.items():
        n = min(len(head) // dt.itemsize, VSCSI_SAMPLE)
        if n == 0:
            why.append(f"v{ver}: shorter than one {dt.itemsize}-byte record")
            continue
        rec = np.frombuffer(head[: n * dt.itemsize], dtype=dt)
        wrong = np.flatnonzero(rec["ver"] >> 8 != ver)
        if len(wrong):
            i = int(wrong[0])
            why.append(f"v{ver}: byte {i * dt.itemsize}: version {int(rec['ver'][i]):#06x}")
            continue
        # SCSI opcodes are one byte; the field is two wide.
        wrong = np.flatnonzero(rec["cmd"] > 0xFF)
        if len(wrong):
            i = int(wrong[0])
            why.append(
                f"v{ver}: byte {i * dt.itemsize}: cmd {int(rec['cmd'][i]):#x} is not a SCSI opcode"
            )
            continue
        return ver
    raise BadValue("ver", f"not a vscsi record ({'; '.join(why)})")


# The largest µs time (ts, rt) such that issue + latency in ns fits int64, and the
# largest LBN whose byte offset fits u64.
_MAX_US = ((1 << 62) - 1) // 1000
_MAX_LBN = ((1 << 64) - 1) // 512


def _names(dt: np.dtype) -> tuple[str, ...]:
    """The fields of a structured dtype (numpy types `names` as optional)."""
    return dt.names or ()


def _struct_checks(rec: np.ndarray, ver: int) -> list[tuple[str, np.ndarray]]:
    """(field, mask of records whose field is wrong) for a block of vscsi records."""
    checks = [
        ("ver", (rec["ver"] >> 8) != ver),
        ("ts", rec["ts"] > _MAX_US),
        ("lbn", rec["lbn"] > _MAX_LBN),
    ]
    if "rt" in _names(rec.dtype):
        checks.append(("rt", rec["rt"] > _MAX_US))
    return checks


def read_struct(spec: FormatSpec, f: BinaryIO, where: str, ctx: Context) -> Iterator[np.ndarray]:
    """Fixed-size binary records (vscsi), a block at a time."""
    head = f.read(VSCSI_HEAD)
    try:
        ver = vscsi_version(head)
    except BadValue as e:
        raise IotapeError(f"{where}: {e}") from None
    dt = spec.dtype[ver]
    per = max(1, BLOCK_BYTES // dt.itemsize)
    buf = head
    pos = 0
    codes = np.full(65536, 255, dtype=np.uint8)
    for k, v in spec.ops.items():
        codes[int(k)] = OP[v]
    while True:
        buf += f.read(per * dt.itemsize - len(buf))
        whole = len(buf) // dt.itemsize * dt.itemsize
        if whole == 0:
            if buf:
                raise IotapeError(
                    f"{where}: byte {pos}: field {_names(dt)[0]}: file ends inside a record "
                    f"({len(buf)} of {dt.itemsize} bytes)"
                )
            return
        rec = np.frombuffer(buf[:whole], dtype=dt)
        op = codes[rec["cmd"]]
        op[op == 255] = OP["other"]
        checks = _struct_checks(rec, ver)
        bad = np.logical_or.reduce([m for _, m in checks])
        for i in np.flatnonzero(bad)[: ctx.skip_bad + 1 - ctx.bad]:
            col = next(c for c, m in checks if m[i])
            why = (
                f"{int(rec[col][i]):#x}" if col == "ver" else f"{int(rec[col][i])} is out of range"
            )
            ctx.reject(f"{where}: byte {pos + int(i) * dt.itemsize}", f"field {col}: {why}")
        keep = ~bad
        cols = {c: rec[c][keep] for c in _names(dt)}
        cols["cmd"] = op[keep]
        yield to_records(spec, cols, ctx)
        pos += whole
        buf = buf[whole:]


# --------------------------------------------------------------------------- fio


def read_fio(spec: FormatSpec, f: BinaryIO, where: str, ctx: Context) -> Iterator[np.ndarray]:
    """fio's iolog: a version line, then `[ms] file action [offset length]` lines."""
    first = f.readline()
    version = {b"fio version 2 iolog": 2, b"fio version 3 iolog": 3}.get(first.strip())
    if version is None:
        raise IotapeError(
            f"{where}: line 1: field version: {first[:40]!r} is not 'fio version 2|3 iolog'"
        )
    k = 1 if version == 3 else 0
    timed = version == 3
    for first_line, block in line_blocks(f):
        data = textlines.clean_block(block, ctx.ignored)
        times, files, ops, offsets, sizes = [], [], [], [], []
        for i, raw in enumerate(data.split(b"\n")):
            fields = raw.split()
            if not fields:
                continue
            where_line = f"{where}: line {first_line + 1 + i}"
            try:
                if len(fields) < 2 + k:
                    raise BadValue("action", "missing")
                action = fields[1 + k].decode()
                if action in FIO_FILE_ACTIONS:
                    continue
                if action not in spec.ops:
                    raise BadValue("action", f"{action!r} is not a fio iolog action")
                if len(fields) != 4 + k:
                    raise BadValue("offset", f"{len(fields)} fields, expected {4 + k}")
                t = int(fields[0]) if timed else 0
                off, size = int(fields[2 + k]), int(fields[3 + k])
                if min(t, off, size) < 0 or size > MAX_U32:
                    raise BadValue(
                        "length" if size < 0 or size > MAX_U32 else "offset", "out of range"
                    )
            except (BadValue, UnicodeDecodeError) as e:
                ctx.reject(where_line, str(e))
                continue
            except ValueError:
                ctx.reject(where_line, "field offset: not a number")
                continue
            times.append(t)
            files.append(fields[k].decode(errors="replace"))
            ops.append(OP[spec.ops[action]])
            offsets.append(off)
            sizes.append(size)
        fio_spec = FormatSpec(
            spec.name, spec.doc, time="time", time_ns=spec.time_ns, device=("file",)
        )
        cols = {
            "time": np.array(times, dtype=np.int64),
            "file": pa.array(files, pa.string()),
            "op": np.array(ops, dtype=np.uint8),
            "offset": np.array(offsets, dtype=np.uint64),
            "size": np.array(sizes, dtype=np.uint64),
        }
        yield to_records(fio_spec, cols, ctx)


READERS = {"csv": read_csv, "struct": read_struct, "fio": read_fio}
