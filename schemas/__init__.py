"""The trace record, read from `trace_record.toml`: the one definition.

Everything in Python that needs the record's shape (numpy dtype, Arrow schema,
SQL DDL, enum names) gets it from here.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pyarrow where the Arrow schema is asked for (~0.1 s to load)
    import pyarrow as pa

SCHEMA_PATH = Path(__file__).with_name("trace_record.toml")
CONTRACTS_PATH = Path(__file__).with_name("contracts.toml")

_NUMPY = {"u8": "<u1", "u16": "<u2", "u32": "<u4", "u64": "<u8", "i16": "<i2", "char16": "S16"}
_ARROW = {"u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "i16": "int16",
          "char16": "string"}  # fmt: skip
_SQL = {
    "u8": "UTINYINT",
    "u16": "USMALLINT",
    "u32": "UINTEGER",
    "u64": "UBIGINT",
    "i16": "SMALLINT",
    "char16": "VARCHAR",
}
_SIZE = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i16": 2, "char16": 16}


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    offset: int
    doc: str
    enum: str | None = None
    bits: str | None = None

    @property
    def size(self) -> int:
        return _SIZE[self.type]


@cache
def raw() -> dict:
    with SCHEMA_PATH.open("rb") as f:
        return tomllib.load(f)


@cache
def contracts() -> dict:
    """schemas/contracts.toml: formats, percentiles, the Jetstress verdict."""
    with CONTRACTS_PATH.open("rb") as f:
        return tomllib.load(f)


@cache
def columns() -> tuple[Column, ...]:
    cols = tuple(Column(**c) for c in raw()["column"])
    _check_layout(cols)
    return cols


def column_names() -> list[str]:
    return [c.name for c in columns()]


def record_size() -> int:
    return int(raw()["record"]["size"])


def layout_version() -> int:
    return int(raw()["record"]["layout_version"])


def file_constants() -> dict:
    return dict(raw()["file"])


def enum(name: str) -> dict[str, int]:
    return dict(raw()["enum"][name])


def bits(name: str) -> dict[str, int]:
    return dict(raw()["bits"][name])


def op_names() -> dict[int, str]:
    return {v: k for k, v in enum("op").items()}


def stream_names() -> dict[int, str]:
    return {v: k for k, v in enum("stream").items()}


def stream_group(name: str) -> tuple[str, ...]:
    """A group of the workload's streams (trace_record.toml [stream_group])."""
    return tuple(raw()["stream_group"][name])


def thread_rules() -> list[dict]:
    return list(raw().get("thread_rule", []))


def _check_layout(cols: tuple[Column, ...]) -> None:
    """Refuse a schema whose fields overlap, misalign or overrun the record."""
    size = int(raw()["record"]["size"])
    used = bytearray(size)
    for c in cols:
        if c.type not in _SIZE:
            raise ValueError(f"{SCHEMA_PATH}: column {c.name}: unknown type {c.type}")
        align = 1 if c.type == "char16" else c.size
        if c.offset % align:
            raise ValueError(f"{SCHEMA_PATH}: column {c.name}: offset {c.offset} not aligned")
        if c.offset + c.size > size:
            raise ValueError(f"{SCHEMA_PATH}: column {c.name}: overruns the {size}-byte record")
        for i in range(c.offset, c.offset + c.size):
            if used[i]:
                raise ValueError(f"{SCHEMA_PATH}: column {c.name}: overlaps another column")
            used[i] = 1


@cache
def record_dtype() -> np.dtype:
    """The binary record as a numpy structured dtype (explicit offsets, fixed size)."""
    cols = columns()
    return np.dtype(
        {
            "names": [c.name for c in cols],
            "formats": [_NUMPY[c.type] for c in cols],
            "offsets": [c.offset for c in cols],
            "itemsize": record_size(),
        }
    )


@cache
def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [pa.field(c.name, getattr(pa, _ARROW[c.type])(), nullable=False) for c in columns()],
        metadata={"iotape.layout_version": str(layout_version())},
    )


def sql_columns() -> list[tuple[str, str]]:
    """(name, SQL type) in logical order, in the DuckDB dialect."""
    return [(c.name, _SQL[c.type]) for c in columns()]


def sql_ddl(table: str = "events", extra: list[tuple[str, str]] | None = None) -> str:
    cols = (extra or []) + sql_columns()
    # Quoted: `offset` is a reserved word in SQL.
    body = ",\n  ".join(f'"{n}" {t} NOT NULL' for n, t in cols)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {body}\n)"
