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
from base.errors import IotapeError
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


class NoLineEnd(Exception):
    """Input that goes on for far too long without a line end."""

    def __init__(self, size: int) -> None:
        super().__init__(f"no line end in {size} bytes")


def whole_lines(f: BinaryIO, block: int = BLOCK_BYTES) -> Iterator[bytes]:
    """The stream cut into blocks of about `block` bytes, each ending at a line end
    (the last one where the input ends). Raises NoLineEnd."""
    rest = b""
    while True:
        data = f.read(block)
        if not data:
            if rest:
                yield rest
            return
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            rest += data
            if len(rest) > 64 * block:
                raise NoLineEnd(len(rest))
            continue
        # One copy: the line begun in the last block and this block's whole lines.
        yield b"".join((rest, memoryview(data)[:cut])) if rest else data[:cut]
        rest = data[cut:]


def line_blocks(f: BinaryIO, block: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """(number of the block's first line, bytes ending at a line end) from a stream."""
    line = 1
    try:
        for data in whole_lines(f, block):
            yield line, data
            line += data.count(b"\n")
    except NoLineEnd as e:
        raise IotapeError(f"line {line}: {e}") from None


def _np(a: pa.Array | pa.ChunkedArray | np.ndarray) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    return _numbers(a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a)


_NUMPY = {pa.int32(): np.int32, pa.int64(): np.int64, pa.float64(): np.float64}


def _numbers(a: pa.Array) -> np.ndarray:
    """A pyarrow array as numpy; numbers without nulls as a view of their buffer
    (pyarrow's to_numpy imports pandas on first use, 0.3 s)."""
    dt = _NUMPY.get(a.type)
    if dt is None or a.null_count:
        return a.to_numpy(zero_copy_only=False)
    size = np.dtype(dt).itemsize
    return np.frombuffer(a.buffers()[1], dtype=dt, count=len(a), offset=a.offset * size)


def _dict_chunks(col: pa.Array | pa.ChunkedArray) -> list[tuple[pa.Array, np.ndarray]]:
    """Each chunk of a column as (its distinct values as text, indices into them).

    The values come in order of first appearance, chunk after chunk: callers that
    number what they meet (the device table) number it in file order. Dictionary
    columns (the readers ask pyarrow for them) are taken as they are, and a chunk
    of one repeated value (a trace of one volume) is not hashed.
    """
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    return [_dict_chunk(c) for c in chunks if len(c)]


def _dict_chunk(c: pa.Array) -> tuple[pa.Array, np.ndarray]:
    if not pa.types.is_dictionary(c.type):
        c = pc.cast(c, pa.string())
        if not c.null_count and pc.all(pc.equal(c, c[0])).as_py():
            return c.slice(0, 1), np.zeros(len(c), np.int64)
        c = pc.dictionary_encode(c)
    return pc.cast(c.dictionary, pa.string()), _numbers(c.indices).astype(np.int64, copy=False)


def _by_chunk(parts: list, n: int, of: Callable[[pa.Array], np.ndarray]) -> np.ndarray:
    """Per-chunk values mapped through `of(distinct values)` into one array of `n`."""
    out = np.zeros(n, np.uint32)
    at = 0
    for values, idx in parts:
        out[at : at + len(idx)] = of(values)[idx]
        at += len(idx)
    return out


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
    if len(spec.device) == 1:
        parts = _dict_chunks(cols[spec.device[0]])
        return _by_chunk(parts, n, lambda keys: _ids(ctx, keys.to_pylist()))
    # Several columns name a device ("hm" "_" "0"): number each chunk's combinations
    # of values, in order of first appearance, as the joined text would be.
    per_col = [[(v.to_pylist(), i) for v, i in _dict_chunks(cols[c])] for c in spec.device]
    joined = []
    for chunk in zip(*per_col, strict=True):
        sizes = [len(v) for v, _ in chunk]
        combo = np.zeros(len(chunk[0][1]), np.int64)
        for (_, idx), size in zip(chunk, sizes, strict=True):
            combo = combo * size + idx
        enc = pc.dictionary_encode(pa.array(combo)) if max(sizes) > 1 else None
        codes = [0] if enc is None else enc.dictionary.to_pylist()
        keys = ["_".join(_digits(code, chunk, sizes)) for code in codes]
        idx = np.zeros(len(combo), np.int64) if enc is None else _numbers(enc.indices)
        joined.append((keys, idx))
    return _by_chunk(joined, n, lambda keys: _ids(ctx, keys))


def _digits(code: int, chunk: tuple, sizes: list[int]) -> list[str]:
    """The column values whose indices `code` packs (last column least significant)."""
    out = []
    for (values, _), size in zip(reversed(chunk), reversed(sizes), strict=True):
        code, i = divmod(code, size)
        out.append(values[i])
    return out[::-1]


def _ids(ctx: Context, keys: list) -> np.ndarray:
    return np.array([ctx.device_id(k, None) for k in keys], dtype=np.uint32)


def _lower(text: pa.Array) -> pa.Array:
    return pc.utf8_lower(pc.utf8_trim_whitespace(text))


def _op_codes(spec: FormatSpec, col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    codes = _by_chunk(
        _dict_chunks(col),
        len(col),
        lambda keys: np.array([OP[spec.ops[k]] for k in _lower(keys).to_pylist()], np.uint32),
    )
    return codes.astype(np.uint8)


def _ns(raw: np.ndarray, base: float, unit: float) -> np.ndarray:
    """(raw - base) * unit as int64, in a new array (worked on in place: one pass each)."""
    if raw.dtype.kind == "f" or not float(unit).is_integer():
        return np.rint((raw - base) * unit).astype(np.int64)
    out = raw.astype(np.int64)
    if base:
        out -= int(base)
    if unit != 1:
        out *= int(unit)
    return out


def _bytes(col: pa.Array | pa.ChunkedArray | np.ndarray, unit: int) -> np.ndarray:
    out = _np(col).astype(np.uint64)
    if unit != 1:
        out *= np.uint64(unit)
    return out


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
        issue = _ns(raw, ctx.base, spec.time_ns)
        np.maximum(issue, 0, out=issue)
        out["ts_issue_ns"] = issue
        if spec.latency and spec.latency in cols:
            lat = _ns(_np(cols[spec.latency]), 0, spec.latency_ns)
            lat += issue
            out["ts_complete_ns"] = lat
        else:
            out["ts_complete_ns"] = issue
    out["offset"] = _bytes(cols[spec.offset], spec.offset_unit)
    out["bytes"] = _bytes(cols[spec.size], spec.size_unit)
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
