"""What every text-format reader shares: cutting input into line blocks, the
import's state (`Context`), and checked columns → records (`to_records`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import schemas
from iotape.errors import IotapeError
from recorder.importers import textlines
from recorder.importers.textformats import BLOCK_BYTES, FormatSpec

OP = schemas.enum("op")
DT = schemas.record_dtype()


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
