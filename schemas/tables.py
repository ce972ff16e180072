"""The analytics store's tables, read from `tables.toml`, and their DDL per engine.

`events` is the trace record of `trace_record.toml` plus `run_id`; every other
table is defined in `tables.toml`. The DDL for DuckDB and for ClickHouse (one
server, or a cluster of ReplicatedMergeTree tables behind Distributed ones) is
derived here, so no other module spells a column or a type.

Identifiers are always quoted: `offset` is a keyword in DuckDB.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import schemas

TABLES_PATH = Path(__file__).with_name("tables.toml")
DIALECTS = ("duckdb", "clickhouse")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

_DUCKDB = {
    "string": "VARCHAR",
    "lstring": "VARCHAR",
    "json": "VARCHAR",
    "bool": "BOOLEAN",
    "u8": "UTINYINT",
    "u16": "USMALLINT",
    "u32": "UINTEGER",
    "u64": "UBIGINT",
    "i16": "SMALLINT",
    "i64": "BIGINT",
    "f64": "DOUBLE",
    "char16": "VARCHAR",
}
_CLICKHOUSE = {
    "string": "String",
    "lstring": "LowCardinality(String)",
    "json": "String",
    "bool": "Bool",
    "u8": "UInt8",
    "u16": "UInt16",
    "u32": "UInt32",
    "u64": "UInt64",
    "i16": "Int16",
    "i64": "Int64",
    "f64": "Float64",
    "char16": "String",
}
# ClickHouse parameter types for binding values of a column ({name:Type}).
_CLICKHOUSE_PARAM = {**_CLICKHOUSE, "lstring": "String"}


@dataclass(frozen=True)
class TableColumn:
    name: str
    type: str
    doc: str = ""
    enum: tuple[str, ...] | None = None
    codec: str | None = None
    low_cardinality: bool = False

    def sql_type(self, dialect: str) -> str:
        if dialect == "duckdb":
            return _DUCKDB[self.type]
        t = _CLICKHOUSE[self.type]
        return f"LowCardinality({t})" if self.low_cardinality else t

    def param_type(self) -> str:
        """The ClickHouse type to bind a value of this column as."""
        return _CLICKHOUSE_PARAM[self.type]


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[TableColumn, ...]
    order_by: tuple[str, ...]
    shard_by: str
    replacing: str | None = None
    by_name: dict[str, TableColumn] = field(default_factory=dict, compare=False, repr=False)

    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> TableColumn:
        """The column called `name`; a ValueError for any other name (identifiers come
        only from the schema)."""
        try:
            return self.by_name[name]
        except KeyError:
            raise ValueError(f"table {self.name} has no column {name!r}") from None


@cache
def raw() -> dict:
    with TABLES_PATH.open("rb") as f:
        return tomllib.load(f)


@cache
def tables() -> dict[str, Table]:
    out = {}
    for name, spec in raw()["table"].items():
        codecs = spec.get("codec", {})
        lowcard = spec.get("lowcardinality", {})
        cols = [_column(c, codecs) for c in spec.get("column", [])]
        if spec.get("include") == "trace_record":
            cols += [
                TableColumn(
                    name=c.name,
                    type=c.type,
                    doc=c.doc,
                    codec=codecs.get(c.name),
                    low_cardinality=bool(lowcard.get(c.name)),
                )
                for c in schemas.columns()
            ]
        elif "include" in spec:
            raise ValueError(f"{TABLES_PATH}: table {name}: unknown include {spec['include']!r}")
        table = Table(
            name=name,
            doc=spec.get("doc", ""),
            columns=tuple(cols),
            order_by=tuple(spec["order_by"]),
            shard_by=spec["shard_by"],
            replacing=spec.get("replacing"),
        )
        table.by_name.update((c.name, c) for c in cols)
        _check(table)
        out[name] = table
    return out


def table(name: str) -> Table:
    try:
        return tables()[name]
    except KeyError:
        raise ValueError(f"no table {name!r} in {TABLES_PATH}") from None


def _column(spec: dict, codecs: dict) -> TableColumn:
    enum = spec.get("enum")
    return TableColumn(
        name=spec["name"],
        type=spec["type"],
        doc=spec.get("doc", ""),
        enum=tuple(enum) if enum is not None else None,
        codec=codecs.get(spec["name"]),
    )


def _check(t: Table) -> None:
    names = t.column_names()
    if len(set(names)) != len(names):
        raise ValueError(f"{TABLES_PATH}: table {t.name}: a column name repeats")
    for c in t.columns:
        if not IDENTIFIER.match(c.name):
            raise ValueError(f"{TABLES_PATH}: table {t.name}: bad column name {c.name!r}")
        if c.type not in _DUCKDB:
            raise ValueError(f"{TABLES_PATH}: {t.name}.{c.name}: unknown type {c.type!r}")
    for key in (*t.order_by, *([t.replacing] if t.replacing else [])):
        if key not in names:
            raise ValueError(f"{TABLES_PATH}: table {t.name}: key {key!r} is not a column")


def quote(name: str) -> str:
    """A schema identifier, quoted for both engines; anything else is refused."""
    if not IDENTIFIER.match(name):
        raise ValueError(f"not an identifier: {name!r}")
    return f'"{name}"'


# --------------------------------------------------------------------------- DDL


def ddl(dialect: str, cluster: str | None = None, skip: tuple[str, ...] = ()) -> list[str]:
    """CREATE statements for every table (but those in `skip`) and view, in order, for
    `dialect`.

    With `cluster` (ClickHouse only), each table becomes `<name>_local`, a
    Replicated*MergeTree created ON CLUSTER, plus `<name>`, a Distributed table
    over it, so that readers and writers use the same names as on one server.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}")
    if cluster is not None:
        if dialect != "clickhouse":
            raise ValueError("a cluster needs ClickHouse")
        if not IDENTIFIER.match(cluster):
            raise ValueError(f"cluster name {cluster!r} is not a plain identifier")
    out = []
    for t in tables().values():
        if t.name in skip:
            continue
        if dialect == "duckdb":
            out.append(_duckdb_table(t))
        elif cluster is None:
            out.append(_clickhouse_table(t, t.name, _engine(t, replicated=False)))
        else:
            local = f"{t.name}_local"
            on = f" ON CLUSTER {quote(cluster)}"
            out.append(_clickhouse_table(t, local, _engine(t, replicated=True), on))
            out.append(
                f"CREATE TABLE IF NOT EXISTS {quote(t.name)}{on} AS {quote(local)}\n"
                f"ENGINE = Distributed({quote(cluster)}, currentDatabase(), {quote(local)}, "
                f"{t.shard_by})"
            )
    out += _views(dialect, cluster)
    return out


def _duckdb_table(t: Table) -> str:
    body = ",\n  ".join(f"{quote(c.name)} {c.sql_type('duckdb')} NOT NULL" for c in t.columns)
    return f"CREATE TABLE IF NOT EXISTS {quote(t.name)} (\n  {body}\n)"


def _clickhouse_table(t: Table, name: str, engine: str, on_cluster: str = "") -> str:
    cols = []
    for c in t.columns:
        codec = f" CODEC({c.codec})" if c.codec else ""
        cols.append(f"{quote(c.name)} {c.sql_type('clickhouse')}{codec}")
    body = ",\n  ".join(cols)
    order = ", ".join(quote(k) for k in t.order_by)
    return (
        f"CREATE TABLE IF NOT EXISTS {quote(name)}{on_cluster} (\n  {body}\n)\n"
        f"ENGINE = {engine}\nORDER BY ({order})"
    )


def _engine(t: Table, replicated: bool) -> str:
    base = "ReplacingMergeTree" if t.replacing else "MergeTree"
    args = []
    if replicated:
        # {shard} and {replica} are the servers' own macros (config.xml), expanded there.
        args = [f"'/clickhouse/tables/{{shard}}/{{database}}/{t.name}_local'", "'{replica}'"]
        base = f"Replicated{base}"
    if t.replacing:
        args.append(quote(t.replacing))
    return f"{base}({', '.join(args)})"


def _views(dialect: str, cluster: str | None) -> list[str]:
    # runs_latest: the newest row of each run, whatever its state. The catalog reads
    # this; analyses read runs_ready. ClickHouse keeps old versions until a merge,
    # so FINAL picks the newest; DuckDB updates in place.
    final = " FINAL" if dialect == "clickhouse" else ""
    on = f" ON CLUSTER {quote(cluster)}" if cluster else ""
    return [
        f'CREATE VIEW IF NOT EXISTS "runs_latest"{on} AS SELECT * FROM "runs"{final}',
        f'CREATE VIEW IF NOT EXISTS "runs_ready"{on} AS SELECT * FROM "runs_latest" '
        "WHERE \"state\" = 'ready'",
    ]
