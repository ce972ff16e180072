"""Delimited text formats: pyarrow's CSV reader per block, line by line where it fails.

The reader cuts the input into blocks at line ends, parses a block with pyarrow's
CSV reader (typed, multi-threaded C++) and converts it column-wise with numpy. A
block that pyarrow rejects, or whose values fail a check, is re-read line by line
so the error names the line and the field (or, with a `--skip-bad` budget, the bad
lines are dropped and counted).
"""

from __future__ import annotations

import io
import math
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from base.errors import IotapeError
from recorder.importers import textlines
from recorder.importers.textformats import BLOCK_BYTES, MAX_U32, FormatSpec
from recorder.importers.textrecords import BadValue, Context, NoLineEnd, to_records, whole_lines


def _used(spec: FormatSpec) -> list[str]:
    roles = [spec.time, spec.latency, spec.offset, spec.size, spec.op, spec.pid, spec.comm]
    names = [*roles, *spec.device, *(spec.device_numbers or ())]
    return [c for c in spec.columns if c and c in names]


def _arrow_type(spec: FormatSpec, col: str) -> pa.DataType:
    kind = spec.types.get(col, "str" if col == spec.op else "int")
    return {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}[kind]


_TEXT_CODES = pa.dictionary(pa.int32(), pa.string())


def _fast_type(spec: FormatSpec, col: str) -> pa.DataType:
    """Op names as a dictionary: a few distinct values, checked and looked up once each
    rather than once per line. Device names stay text: most traces name one device,
    which `to_records` sees without hashing (pyarrow's dictionary costs more)."""
    return _TEXT_CODES if col == spec.op else _arrow_type(spec, col)


def _read_fast(spec: FormatSpec, data: bytes) -> pa.Table | None:
    names = [c or f"_{i}" for i, c in enumerate(spec.columns)]
    used = _used(spec)
    try:
        return pcsv.read_csv(
            io.BytesIO(data),
            read_options=pcsv.ReadOptions(column_names=names, block_size=1 << 22),
            parse_options=pcsv.ParseOptions(delimiter=spec.delimiter, quote_char=False),
            convert_options=pcsv.ConvertOptions(
                include_columns=used, column_types={c: _fast_type(spec, c) for c in used}
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


MAX_I64 = (1 << 63) - 1
# Linux dev_t: 12-bit major, 20-bit minor (the trace's dev is major << 20 | minor).
DEV_LIMITS = ((1 << 12) - 1, (1 << 20) - 1)
_CONVERT = {"int": int, "float": float, "str": str}


def _parse_line(spec: FormatSpec, fields: list[str]) -> dict[str, Any]:
    """One line's used columns, converted and checked; raises BadValue."""
    want = len(spec.columns)
    if len(fields) < want - (1 if spec.columns[-1] is None else 0):
        raise BadValue(
            spec.columns[len(fields)] or "?", f"missing ({len(fields)} of {want} columns)"
        )
    if len(fields) > want:
        raise BadValue("line", f"{len(fields)} columns, expected {want}")
    # Values are int, float or str by `spec.types`, known only at run time.
    row: dict[str, Any] = {}
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


def _check_row(spec: FormatSpec, row: dict[str, Any]) -> None:
    op = str(row[spec.op]).strip().lower()
    if op not in spec.ops:
        raise BadValue(spec.op, f"{row[spec.op]!r} is not one of {', '.join(sorted(spec.ops))}")
    for col in (spec.offset, spec.size, spec.time, spec.latency):
        if col and isinstance(row.get(col), int | float) and row[col] < 0:
            raise BadValue(col, f"{row[col]} is negative")
        # The fast path reads int64: a longer number must fail here too, not in numpy.
        if col and isinstance(row.get(col), int) and row[col] > MAX_I64:
            raise BadValue(col, f"{row[col]} is out of range")
    if row[spec.size] * spec.size_unit > MAX_U32:
        raise BadValue(spec.size, f"{row[spec.size]} is over 4 GiB")
    if spec.time and isinstance(row[spec.time], float) and not math.isfinite(row[spec.time]):
        raise BadValue(spec.time, f"{row[spec.time]} is not finite")
    for col, top in zip(spec.device_numbers or (), DEV_LIMITS, strict=False):
        if not 0 <= row[col] <= top:
            raise BadValue(col, f"{row[col]} is not a device number (0 to {top})")


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
    # An empty field between two delimiters reads as null: the slow path names it.
    if any(c.null_count for c in t.columns):
        return False
    for col in (spec.offset, spec.size, spec.time, spec.latency):
        if col and pc.min(t.column(col)).as_py() < 0:
            return False
    for col, top in zip(spec.device_numbers or (), DEV_LIMITS, strict=False):
        mm = pc.min_max(t.column(col))
        if mm["min"].as_py() < 0 or mm["max"].as_py() > top:
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
    for chunk in t.column(spec.op).chunks:
        text = chunk.dictionary if pa.types.is_dictionary(chunk.type) else pc.unique(chunk)
        # A few distinct values: a set lookup each (pc.is_in takes 0.2 s on first use).
        if not set(pc.utf8_lower(pc.utf8_trim_whitespace(text)).to_pylist()) <= spec.ops.keys():
            return False
    return True


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


# Blocks are prepared (cleaned, parsed, checked) on WORKERS threads while the
# caller's thread turns earlier ones into records, in file order, and the spool's
# thread writes those: pyarrow's parser, crc32 and file writes release the GIL.
# At most AHEAD blocks in flight bound the memory.
WORKERS = 2
AHEAD = 4


@dataclass
class _Block:
    data: bytes  # emptied when the fast path read it
    lines: int
    ignored: textlines.Ignored
    table: pa.Table | None  # None: read it line by line
    header_due: bool


def _prepare(spec: FormatSpec, block: bytes, header_due: bool) -> _Block:
    """What can be done for a block without the blocks before it."""
    lines = block.count(b"\n")
    if not header_due and not textlines.may_need_cleaning(block):
        t = _read_fast(spec, block)
        # pyarrow passes over empty lines, the only ones cleaning could still find
        # here: as many rows as lines means it would have changed nothing.
        if t is not None and t.num_rows == lines + (not block.endswith(b"\n")):
            ok = _table_ok(spec, t)
            return _Block(
                b"" if ok else block, lines, textlines.Ignored(), t if ok else None, False
            )
    ignored = textlines.Ignored()
    data = textlines.clean_block(block, ignored)
    if header_due:
        kept = textlines.drop_header(data, lambda ln: is_header(spec, ln), ignored)
        header_due = kept is None
        data = data if kept is None else kept
    t = _read_fast(spec, data)
    if t is not None and _table_ok(spec, t):
        return _Block(b"", lines, ignored, t, header_due)
    return _Block(data, lines, ignored, None, header_due)


def read_csv(spec: FormatSpec, f: BinaryIO, where: str, ctx: Context) -> Iterator[np.ndarray]:
    """Records of a delimited text file, one array per block, in file order."""
    pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="iotape-import")
    try:
        yield from _in_order(spec, f, where, ctx, pool)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _in_order(
    spec: FormatSpec, f: BinaryIO, where: str, ctx: Context, pool: ThreadPoolExecutor
) -> Iterator[np.ndarray]:
    pending: deque[Future[_Block]] = deque()
    header_due = True  # until the first non-empty line of this file
    line = 1  # the first line of the oldest pending block
    blocks = whole_lines(f, BLOCK_BYTES)
    while True:
        try:
            block = next(blocks, None)
        except NoLineEnd as e:
            for fut in pending:  # the lines before it first, as a reader in order would
                yield _records(spec, fut.result(), line, where, ctx)
                line += fut.result().lines
            raise IotapeError(f"line {line}: {e}") from None
        if block is not None:
            fut = Future()
            if header_due:  # whether a line names the columns is decided in order
                fut.set_result(_prepare(spec, block, True))
                header_due = fut.result().header_due
            else:
                fut = pool.submit(_prepare, spec, block, False)
            pending.append(fut)
        if not pending:
            return
        if block is None or len(pending) > AHEAD:
            done = pending.popleft().result()
            yield _records(spec, done, line, where, ctx)
            line += done.lines


def _records(spec: FormatSpec, b: _Block, first_line: int, where: str, ctx: Context) -> np.ndarray:
    ctx.ignored.add(b.ignored)
    if b.table is None:
        return to_records(spec, _read_slow(spec, b.data, first_line, where, ctx), ctx)
    return to_records(spec, _columns(b.table), ctx)


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
