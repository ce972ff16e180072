"""The one record definition: C, numpy, Arrow and SQL agree with schemas/trace_record.toml."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

import schemas
from schemas import gen_c

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "recorder" / "iotape_record.h"


def test_committed_header_is_generated_from_the_schema() -> None:
    assert HEADER.read_text() == gen_c.render(), (
        "recorder/iotape_record.h is stale: run `python -m schemas.gen_c recorder/iotape_record.h`"
    )


def test_compiled_c_struct_matches_schema_offsets(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is part of the setup"
    lines = [
        f'printf("{c.name} %zu %zu\\n", offsetof(struct iotape_record, {c.name}), '
        f"sizeof(((struct iotape_record *)0)->{c.name}));"
        for c in schemas.columns()
    ]
    src = tmp_path / "offsets.c"
    src.write_text(
        "#include <stddef.h>\n#include <stdio.h>\n"
        f'#include "{HEADER}"\n'
        "int main(void) {\n"
        'printf("SIZE %zu\\n", sizeof(struct iotape_record));\n'
        + "\n".join(lines)
        + "\nreturn 0;\n}\n"
    )
    exe = tmp_path / "offsets"
    subprocess.run(
        [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(src)], check=True
    )
    out = dict(
        (parts[0], tuple(int(x) for x in parts[1:]))
        for parts in (
            line.split()
            for line in subprocess.run(
                [str(exe)], check=True, capture_output=True, text=True
            ).stdout.splitlines()
        )
    )
    assert out.pop("SIZE") == (schemas.record_size(),)
    dtype = schemas.record_dtype()
    for c in schemas.columns():
        assert out[c.name] == (c.offset, c.size), c.name
        assert dtype.fields[c.name][1] == c.offset
    assert dtype.itemsize == schemas.record_size()


def test_arrow_and_sql_follow_the_logical_column_order() -> None:
    names = schemas.column_names()
    assert names[:3] == ["ts_queue_ns", "ts_issue_ns", "ts_complete_ns"]
    assert schemas.arrow_schema().names == names
    assert [n for n, _ in schemas.sql_columns()] == names
    assert schemas.arrow_schema().field("dev").type == pa.uint32()
    ddl = schemas.sql_ddl()
    for n in names:
        assert f'\n  "{n}" ' in ddl


def test_overlapping_layout_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = dict(schemas.raw())
    bad["column"] = [*bad["column"], {"name": "x", "type": "u32", "offset": 40, "doc": ""}]
    schemas.columns.cache_clear()
    monkeypatch.setattr(schemas, "raw", lambda: bad)
    try:
        with pytest.raises(ValueError, match="overlaps"):
            schemas.columns()
    finally:
        monkeypatch.undo()
        schemas.columns.cache_clear()


def test_enums_are_dense_and_named() -> None:
    ops = schemas.enum("op")
    assert sorted(ops.values()) == list(range(len(ops)))
    streams = schemas.enum("stream")
    assert streams["other"] == 0 and max(streams.values()) < 32
    for rule in schemas.thread_rules():
        for op in ("read", "write"):
            if op in rule:
                assert rule[op] in streams


def test_committed_workload_header_is_generated_from_the_schemas() -> None:
    header = ROOT / "workload" / "src" / "contract.h"
    assert header.read_text() == gen_c.render_workload(), (
        "workload/src/contract.h is stale: run "
        "`python -m schemas.gen_c --workload workload/src/contract.h`"
    )


def test_every_engine_stream_is_grouped_once() -> None:
    from schemas import streams

    named = [k for k, v in schemas.enum("stream").items() if v > 0]
    assert sorted(streams.ENGINE) == sorted(named)
    assert len(set(streams.ENGINE)) == len(streams.ENGINE)
    scaled = [*streams.PER_MAILBOX, *streams.PER_DATABASE, *streams.PER_COPY]
    assert sorted(scaled) == sorted(named)
    assert set(streams.TRANSACTIONAL) <= set(streams.REPORTED)


def test_the_engine_takes_the_schema_defaults() -> None:
    """The engine's --help shows the defaults of workload_options.toml."""
    from schemas import workload_options
    from workload import engine

    out = subprocess.run(
        [str(engine.engine_path()), "--help"], capture_output=True, text=True, check=True
    ).stdout
    for o in workload_options.options().values():
        if o.default is not None and o.default != "":
            assert f"--{o.name:<20} {o.help} (default {o.engine_default()})" in out, o.name
