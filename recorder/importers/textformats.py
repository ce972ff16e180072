"""The public trace formats other than blktrace: one table of conventions.

Every format is a `FormatSpec` row in `FORMATS`: its delimiter, its columns, and
the units that turn them into the record (time → ns, offset → bytes, size →
bytes, op codes → the schema's ops). The readers (`readers`, `csvread`) follow it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
