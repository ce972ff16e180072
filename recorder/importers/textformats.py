"""The public trace formats other than blktrace: one table of conventions, one reader.

Every format is a `FormatSpec` row in `FORMATS`: its delimiter, its columns, and
the units that turn them into the record (time → ns, offset → bytes, size →
bytes, op codes → the schema's ops). The reader cuts the input into blocks at
line ends, parses a block with pyarrow's CSV reader (typed, multi-threaded C++)
and converts it column-wise with numpy. A block that pyarrow rejects, or whose
values fail a check, is re-read line by line so the error names the line and the
field (or, with a `--skip-bad` budget, the bad lines are dropped and counted).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

import schemas
from iotape.errors import IotapeError
from recorder.importers import textlines

OP = schemas.enum("op")
DT = schemas.record_dtype()
BLOCK_BYTES = 4 << 20
MAX_U32 = (1 << 32) - 1
# Windows FILETIME counts 100 ns ticks from 1601-01-01; Unix time starts 1970-01-01.
FILETIME_UNIX_OFFSET = 116_444_736_000_000_000

_RW = {"r": "read", "read": "read", "w": "write", "write": "write"}
# SCSI CDB opcodes seen in vscsi traces.
_SCSI = {
    **{str(c): "read" for c in (0x08, 0x28, 0xA8, 0x88)},
    **{str(c): "write" for c in (0x0A, 0x2A, 0xAA, 0x8A)},
    **{str(c): "flush" for c in (0x35, 0x91)},
    "66": "discard",  # 0x42 UNMAP
    **{str(c): "write-zeroes" for c in (0x41, 0x93)},
}


@dataclass(frozen=True)
class FormatSpec:
    """How one format's fields map onto the record.

    `columns` are the file's columns in order (None: a column we ignore). The
    named roles (`time`, `offset`, ...) pick columns by name; `*_ns` and
    `*_unit` say how many ns / bytes one unit of that column is.
    """

    name: str
    doc: str
    kind: str = "csv"  # csv | struct (fixed binary records) | fio (fio's iolog)
    delimiter: str = ","
    columns: tuple[str | None, ...] = ()
    types: dict[str, str] = field(default_factory=dict)  # column → int | float | str
    time: str | None = "time"
    time_ns: float = 1
    # None: times are already relative to the trace start; boot: absolute on an unknown
    # clock (the earliest becomes the start); unix, filetime: wall-clock times.
    epoch: str | None = None
    latency: str | None = None
    latency_ns: float = 1
    offset: str = "offset"
    offset_unit: int = 1
    size: str = "size"
    size_unit: int = 1
    op: str = "op"
    ops: dict[str, str] = field(default_factory=dict)  # lower-case token → op name
    device: tuple[str, ...] = ()  # columns joined by "_" name the device
    device_numbers: tuple[str, str] | None = None  # (major, minor) columns
    pid: str | None = None
    comm: str | None = None
    dtype: dict[int, np.dtype] = field(default_factory=dict)  # struct: version → dtype


FORMATS: dict[str, FormatSpec] = {
    "msr": FormatSpec(
        "msr",
        "MSR Cambridge / SNIA: Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime;"
        " FILETIME (100 ns) times, bytes",
        columns=("time", "host", "disk", "op", "offset", "size", "latency"),
        types={"time": "int", "host": "str", "disk": "str", "latency": "int"},
        time_ns=100,
        epoch="filetime",
        latency="latency",
        latency_ns=100,
        ops=_RW,
        device=("host", "disk"),
    ),
    "spc": FormatSpec(
        "spc",
        "UMass SPC (Financial, WebSearch): ASU,LBA,Size,Opcode,Timestamp;"
        " 512-byte LBAs, bytes, seconds from the trace start",
        columns=("asu", "offset", "size", "op", "time"),
        types={"asu": "str", "time": "float"},
        time_ns=1e9,
        offset_unit=512,
        ops=_RW,
        device=("asu",),
    ),
    "alibaba": FormatSpec(
        "alibaba",
        "Alibaba block traces: device_id,opcode,offset,length,timestamp; bytes, Unix µs",
        columns=("device", "op", "offset", "size", "time"),
        types={"device": "str", "time": "int"},
        time_ns=1000,
        epoch="unix",
        ops=_RW,
        device=("device",),
    ),
    "tencent": FormatSpec(
        "tencent",
        "Tencent CBS: Timestamp,Offset,Size,IOType,VolumeID; Unix seconds, 512-byte"
        " sectors, IOType 0 read 1 write",
        columns=("time", "offset", "size", "op", "volume"),
        types={"time": "int", "volume": "str"},
        time_ns=1e9,
        epoch="unix",
        offset_unit=512,
        size_unit=512,
        ops={"0": "read", "1": "write"},
        device=("volume",),
    ),
    "fiu": FormatSpec(
        "fiu",
        "FIU (SRCMap, IODedup): ts_ns pid process lba blocks R|W major minor md5; 512-byte sectors",
        delimiter=" ",
        columns=("time", "pid", "comm", "offset", "size", "op", "major", "minor", None),
        types={"time": "int", "pid": "int", "comm": "str", "major": "int", "minor": "int"},
        epoch="boot",
        offset_unit=512,
        size_unit=512,
        ops=_RW,
        device_numbers=("major", "minor"),
        pid="pid",
        comm="comm",
    ),
    "disksim": FormatSpec(
        "disksim",
        "DiskSim / MQSim ASCII: arrival_ns device lba blocks type; 512-byte sectors,"
        " type 1 read 0 write",
        delimiter=" ",
        columns=("time", "device", "offset", "size", "op"),
        types={"time": "int", "device": "str"},
        ops={"1": "read", "0": "write"},
        offset_unit=512,
        size_unit=512,
        device=("device",),
    ),
    "vscsi": FormatSpec(
        "vscsi",
        "CloudPhysics vscsi binary records (v1 32 bytes, v2 40 bytes with response time);"
        " µs times, 512-byte LBNs, bytes, SCSI opcodes",
        kind="struct",
        time_ns=1000,
        epoch="boot",
        latency="rt",
        latency_ns=1000,
        time="ts",
        offset="lbn",
        offset_unit=512,
        size="len",
        op="cmd",
        ops=_SCSI,
        dtype={
            1: np.dtype(
                [
                    *[("sn", "<u4"), ("len", "<u4"), ("nsg", "<u4"), ("cmd", "<u2")],
                    *[("ver", "<u2"), ("lbn", "<u8"), ("ts", "<u8")],
                ]
            ),
            2: np.dtype(
                [
                    *[("cmd", "<u2"), ("ver", "<u2"), ("sn", "<u4"), ("len", "<u4")],
                    *[("nsg", "<u4"), ("lbn", "<u8"), ("ts", "<u8"), ("rt", "<u8")],
                ]
            ),
        },
    ),
    "fio-iolog": FormatSpec(
        "fio-iolog",
        "fio --write_iolog, version 2 (no times) or 3 (ms times): [ms] file action offset"
        " length; bytes",
        kind="fio",
        delimiter=" ",
        time_ns=1_000_000,
        ops={
            "read": "read",
            "write": "write",
            "trim": "discard",
            "sync": "flush",
            "datasync": "flush",
        },
        device=("file",),
    ),
}

# fio iolog actions that touch no block: skipped, not bad.
FIO_FILE_ACTIONS = frozenset({"add", "open", "close", "wait"})


class BadValue(ValueError):
    """A value that fails its column's check: the field and why."""

    def __init__(self, fld: str, why: str) -> None:
        super().__init__(f"field {fld}: {why}")
        self.field = fld


@dataclass
class Context:
    """State shared by every block of an import: the time base, devices, bad records."""

    skip_bad: int = 0
    bad: int = 0
    bad_examples: list[str] = field(default_factory=list)
    base: float | None = None  # in the format's own time unit
    min_raw: float | None = None
    device_id: Callable[[str, int | None], int] = lambda key, native: 0
    relative: bool = True
    ignored: textlines.Ignored = field(default_factory=textlines.Ignored)

    def reject(self, where: str, why: str) -> None:
        """Count a bad record, or raise when the --skip-bad budget is spent."""
        self.bad += 1
        if self.bad > self.skip_bad:
            hint = "" if self.skip_bad else " (--skip-bad N tolerates N bad records)"
            raise IotapeError(f"{where}: {why}{hint}")
        if len(self.bad_examples) < 10:
            self.bad_examples.append(f"{where}: {why}")


# --------------------------------------------------------------------------- blocks


def line_blocks(f: BinaryIO, block: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """(number of the block's first line, bytes ending at a line end) from a stream."""
    line = 1
    rest = b""
    while True:
        data = f.read(block)
        if not data:
            if rest:
                yield line, rest
            return
        data = rest + data
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            rest = data
            if len(rest) > 64 * block:
                raise IotapeError(f"line {line}: no line end in {len(rest)} bytes")
            continue
        yield line, data[:cut]
        line += data.count(b"\n", 0, cut)
        rest = data[cut:]


# --------------------------------------------------------------------------- csv


def _used(spec: FormatSpec) -> list[str]:
    roles = [spec.time, spec.latency, spec.offset, spec.size, spec.op, spec.pid, spec.comm]
    names = [*roles, *spec.device, *(spec.device_numbers or ())]
    return [c for c in spec.columns if c and c in names]


def _arrow_type(spec: FormatSpec, col: str) -> pa.DataType:
    kind = spec.types.get(col, "str" if col == spec.op else "int")
    return {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}[kind]


def _read_fast(spec: FormatSpec, data: bytes) -> pa.Table | None:
    names = [c or f"_{i}" for i, c in enumerate(spec.columns)]
    used = _used(spec)
    try:
        return pcsv.read_csv(
            io.BytesIO(data),
            read_options=pcsv.ReadOptions(column_names=names, block_size=1 << 22),
            parse_options=pcsv.ParseOptions(delimiter=spec.delimiter, quote_char=False),
            convert_options=pcsv.ConvertOptions(
                include_columns=used, column_types={c: _arrow_type(spec, c) for c in used}
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


_CONVERT = {"int": int, "float": float, "str": str}


def _parse_line(spec: FormatSpec, fields: list[str]) -> dict[str, object]:
    """One line's used columns, converted and checked; raises BadValue."""
    want = len(spec.columns)
    if len(fields) < want - (1 if spec.columns[-1] is None else 0):
        raise BadValue(
            spec.columns[len(fields)] or "?", f"missing ({len(fields)} of {want} columns)"
        )
    if len(fields) > want:
        raise BadValue("line", f"{len(fields)} columns, expected {want}")
    row: dict[str, object] = {}
    for col, text in zip(spec.columns, fields, strict=False):
        if not col or col not in _used(spec):
            continue
        kind = spec.types.get(col, "str" if col == spec.op else "int")
        try:
            row[col] = _CONVERT[kind](text.strip())
        except ValueError:
            what = "a number" if kind != "str" else "text"
            raise BadValue(col, f"{text.strip()!r} is not {what}") from None
    _check_row(spec, row)
    return row


def _check_row(spec: FormatSpec, row: dict[str, object]) -> None:
    op = str(row[spec.op]).strip().lower()
    if op not in spec.ops:
        raise BadValue(spec.op, f"{row[spec.op]!r} is not one of {', '.join(sorted(spec.ops))}")
    for col in (spec.offset, spec.size, spec.time, spec.latency):
        if col and isinstance(row.get(col), int | float) and row[col] < 0:
            raise BadValue(col, f"{row[col]} is negative")
    if row[spec.size] * spec.size_unit > MAX_U32:
        raise BadValue(spec.size, f"{row[spec.size]} is over 4 GiB")
    if spec.time and not np.isfinite(row[spec.time]):
        raise BadValue(spec.time, f"{row[spec.time]} is not finite")


def _read_slow(spec: FormatSpec, data: bytes, first_line: int, where: str, ctx: Context) -> dict:
    """Line by line: keep good rows as columns, reject bad ones by line and field."""
    used = _used(spec)
    cols: dict[str, list] = {c: [] for c in used}
    for i, raw in enumerate(data.split(b"\n")):
        if not raw.strip():
            continue
        try:
            row = _parse_line(spec, split_fields(spec, raw.decode("utf-8")))
        except UnicodeDecodeError:
            ctx.reject(f"{where}: line {first_line + i}", "not UTF-8 text")
            continue
        except BadValue as e:
            ctx.reject(f"{where}: line {first_line + i}", str(e))
            continue
        for c in used:
            cols[c].append(row[c])
    return {c: pa.array(v, type=_arrow_type(spec, c)) for c, v in cols.items()}


def _table_ok(spec: FormatSpec, t: pa.Table) -> bool:
    """The vectorised form of `_check_row`; False sends the block to the slow path."""
    if t.num_rows == 0:
        return True
    for col in (spec.offset, spec.size, spec.time, spec.latency):
        if col and t.column(col).null_count:
            return False
        if col and pc.min(t.column(col)).as_py() < 0:
            return False
    if pc.max(t.column(spec.size)).as_py() * spec.size_unit > MAX_U32:
        return False
    time = t.column(spec.time) if spec.time else None
    if (
        time is not None
        and pa.types.is_floating(time.type)
        and not pc.all(pc.is_finite(time)).as_py()
    ):
        return False
    ops = pc.utf8_lower(pc.utf8_trim_whitespace(t.column(spec.op)))
    return bool(pc.all(pc.is_in(ops, value_set=pa.array(list(spec.ops)))).as_py())


def _columns(t: pa.Table | dict) -> dict[str, pa.ChunkedArray | pa.Array]:
    return {c: t.column(c) for c in t.column_names} if isinstance(t, pa.Table) else t


def split_fields(spec: FormatSpec, text: str) -> list[str]:
    return text.split(spec.delimiter) if spec.delimiter != " " else text.split()


def is_header(spec: FormatSpec, line: bytes) -> bool:
    """True when `line` names the columns of `spec` (one name per column)."""
    try:
        fields = split_fields(spec, line.decode("utf-8"))
    except UnicodeDecodeError:
        return False
    want = len(spec.columns)
    counts = (want, want - 1) if spec.columns and spec.columns[-1] is None else (want,)
    return len(fields) in counts and textlines.names_columns(fields)


def read_csv(spec: FormatSpec, f: BinaryIO, where: str, ctx: Context) -> Iterator[np.ndarray]:
    """Records of a delimited text file, one array per block."""
    header_due = True  # until the first non-empty line of this file
    for first_line, block in line_blocks(f):
        data = textlines.clean_block(block, ctx.ignored)
        if header_due:
            kept = textlines.drop_header(data, lambda ln: is_header(spec, ln), ctx.ignored)
            header_due = kept is None
            data = data if kept is None else kept
        t = _read_fast(spec, data)
        if t is None or not _table_ok(spec, t):
            cols = _read_slow(spec, data, first_line, where, ctx)
        else:
            cols = _columns(t)
        yield to_records(spec, cols, ctx)


# --------------------------------------------------------------------------- conversion


def _np(a: pa.Array | pa.ChunkedArray | np.ndarray) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else a.to_numpy()


def _device_keys(spec: FormatSpec, cols: dict, ctx: Context, n: int) -> np.ndarray:
    if spec.device_numbers:
        major = _np(cols[spec.device_numbers[0]]).astype(np.int64)
        minor = _np(cols[spec.device_numbers[1]]).astype(np.int64)
        pairs, inv = np.unique(np.stack([major, minor], axis=1), axis=0, return_inverse=True)
        ids = np.array(
            [ctx.device_id(f"{a}:{b}", (int(a) << 20) | int(b)) for a, b in pairs], dtype=np.uint32
        )
        return ids[inv.reshape(-1)] if len(pairs) else np.zeros(n, np.uint32)
    if not spec.device:
        return np.full(n, ctx.device_id("0", None), dtype=np.uint32)
    parts = [pc.cast(cols[c], pa.string()) for c in spec.device]
    key = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "_")
    enc = pc.dictionary_encode(key)
    if isinstance(enc, pa.ChunkedArray):
        enc = (
            enc.combine_chunks()
            if enc.num_chunks
            else pa.array([], pa.string()).dictionary_encode()
        )
    ids = np.array([ctx.device_id(k, None) for k in enc.dictionary.to_pylist()], dtype=np.uint32)
    return ids[enc.indices.to_numpy(zero_copy_only=False)] if len(ids) else np.zeros(n, np.uint32)


def _op_codes(spec: FormatSpec, col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    text = pc.utf8_lower(pc.utf8_trim_whitespace(pc.cast(col, pa.string())))
    enc = pc.dictionary_encode(text)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    table = np.array([OP[spec.ops[k]] for k in enc.dictionary.to_pylist()], dtype=np.uint8)
    return (
        table[enc.indices.to_numpy(zero_copy_only=False)] if len(table) else np.zeros(0, np.uint8)
    )


def _ns(raw: np.ndarray, base: float, unit: float) -> np.ndarray:
    if raw.dtype.kind == "f" or not float(unit).is_integer():
        return np.rint((raw - base) * unit).astype(np.int64)
    return (raw.astype(np.int64) - int(base)) * int(unit)


def to_records(spec: FormatSpec, cols: dict, ctx: Context) -> np.ndarray:
    """Checked columns (pyarrow or numpy) → records; times relative to `ctx.base`."""
    n = len(cols[spec.offset])
    out = np.zeros(n, dtype=DT)
    if n == 0:
        return out
    if spec.time:
        raw = _np(cols[spec.time])
        lo = raw.min()
        ctx.min_raw = lo if ctx.min_raw is None else min(ctx.min_raw, lo)
        if ctx.base is None:
            ctx.base = 0 if ctx.relative else lo
        issue = np.maximum(_ns(raw, ctx.base, spec.time_ns), 0)
        out["ts_issue_ns"] = issue
        if spec.latency and spec.latency in cols:
            lat = _ns(_np(cols[spec.latency]), 0, spec.latency_ns)
            out["ts_complete_ns"] = issue + lat
        else:
            out["ts_complete_ns"] = issue
    out["offset"] = _np(cols[spec.offset]).astype(np.uint64) * np.uint64(spec.offset_unit)
    out["bytes"] = _np(cols[spec.size]).astype(np.uint64) * np.uint64(spec.size_unit)
    out["op"] = (
        cols[spec.op] if isinstance(cols[spec.op], np.ndarray) else _op_codes(spec, cols[spec.op])
    )
    out["dev"] = _device_keys(spec, cols, ctx, n)
    if spec.pid:
        out["pid"] = out["tid"] = _np(cols[spec.pid])
    if spec.comm:
        # Names longer than 16 bytes are cut, as the kernel's comm would be.
        names = pc.cast(pc.utf8_slice_codeunits(cols[spec.comm], 0, 16), pa.binary())
        out["comm"] = np.array(names.to_numpy(zero_copy_only=False), dtype="S16")
    return out


# --------------------------------------------------------------------------- struct


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


def _struct_checks(rec: np.ndarray, ver: int) -> list[tuple[str, np.ndarray]]:
    """(field, mask of records whose field is wrong) for a block of vscsi records."""
    checks = [
        ("ver", (rec["ver"] >> 8) != ver),
        ("ts", rec["ts"] > _MAX_US),
        ("lbn", rec["lbn"] > _MAX_LBN),
    ]
    if "rt" in rec.dtype.names:
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
                    f"{where}: byte {pos}: field {dt.names[0]}: file ends inside a record "
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
        cols = {c: rec[c][keep] for c in dt.names}
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


def sniff(spec: FormatSpec, lines: list[tuple[int, bytes]]) -> str | None:
    """None when the sample lines (number, text) parse as `spec`, else why not (for `auto`).

    The first line may name the columns; comment and blank lines are already out.
    """
    if spec.kind != "csv":
        return "not a text format"
    if lines and is_header(spec, lines[0][1]):
        lines = lines[1:]
    if not lines:
        return "no records in the first lines"
    for lineno, raw in lines:
        try:
            _parse_line(spec, split_fields(spec, raw.decode("utf-8")))
        except UnicodeDecodeError:
            return f"line {lineno}: not UTF-8 text"
        except BadValue as e:
            return f"line {lineno}: {e}"
        except (IndexError, KeyError, TypeError) as e:
            return f"line {lineno}: {e}"
    return None
