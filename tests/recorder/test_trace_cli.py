"""`iotape trace info|convert|check` through the typer app, and the root command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from trace_helpers import (
    NVME,
    PART_SIZE,
    PART_START,
    SDA,
    SDA1,
    chunk_offsets,
    header,
    make_trace,
    workload_records,
)
from typer.testing import CliRunner

import schemas
from base.errors import IotapeError
from iotape.commands.trace import app

runner = CliRunner()
FOOTER = {
    "stop_reason": "signal",
    "lost": {"ringbuf_full": 12, "inflight_full": 3},
    "pre_start": 4,
    "duration_ns": 2_000_000_000,
}


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, np.ndarray]:
    r = workload_records(5000, seed=2)
    return make_trace(tmp_path / "t.iot", r, chunk_records=1000, footer=FOOTER), r


def _invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.mark.parametrize("command", ["info", "convert", "check"])
def test_every_command_has_help_with_an_example(command: str) -> None:
    res = _invoke(command, "--help")
    assert res.exit_code == 0
    assert f"Example: iotape trace {command} " in res.output


def test_info_json_numbers(trace) -> None:
    path, r = trace
    res = _invoke("info", str(path), "--json")
    assert res.exit_code == 0
    s = json.loads(res.output)
    assert s["events"] == 5000 and s["chunks"] == 5
    assert s["bytes"] == int(r["bytes"].sum())
    assert s["errors"] == int(np.count_nonzero(r["error"]))
    ops = schemas.op_names()
    for code in range(3):
        sel = r["op"] == code
        assert s["by_op"][ops[code]] == {
            "id": code,
            "events": int(sel.sum()),
            "bytes": int(r["bytes"][sel].sum()),
        }
    assert set(s["by_stream"]) == {"other", "db-read", "log-write", "mylabel"}
    assert s["by_stream"]["mylabel"]["events"] == int((r["stream"] == 40).sum())
    assert s["by_device"]["sda"]["events"] == int((r["dev"] == SDA).sum())
    assert s["by_device"]["nvme0n1"]["bytes"] == int(r["bytes"][r["dev"] == NVME].sum())
    assert s["lost"] == FOOTER["lost"] and s["lost_total"] == 15
    assert s["pre_start"] == 4
    assert s["duration_ns"] == 2_000_000_000
    assert s["last_complete_ns"] == int(r["ts_complete_ns"].max())
    assert s["first_issue_ns"] == int(r["ts_issue_ns"].min())
    assert s["start"] == "2023-11-14T22:13:20+00:00"
    assert s["host"] == "lab1" and s["backend"] == "test"
    part = s["devices"][0]["partition"]
    assert part["end_bytes"] == PART_START + PART_SIZE
    assert s["complete"] is True and s["needs_repair"] is False


def test_info_of_a_damaged_file_says_so(trace) -> None:
    path, _ = trace
    at = chunk_offsets(path)[3]
    path.write_bytes(path.read_bytes()[: at + 10])
    res = _invoke("info", str(path), "--json")
    # The summary of what is intact, and one line on stderr that says what to run.
    assert res.exit_code == 1
    assert res.stderr.strip() == (
        f"iotape: error: {path}: byte {at}: chunk 3: truncated: file ends inside the chunk "
        f"header; run `iotape trace check --repair {path}` to keep every intact chunk"
    )
    s = json.loads(res.stdout)
    assert s["needs_repair"] is True
    assert s["events"] == 3000
    assert "chunk 3: truncated" in s["problem"]
    assert s["lost"] == {}  # the footer is gone with the tail


def test_info_table(trace) -> None:
    path, _ = trace
    res = runner.invoke(app, ["info", str(path)], env={"COLUMNS": "250"})
    assert res.exit_code == 0
    for text in ("lab1", "ST4000NM", "Samsung PM9A3", "HDD", "SSD", "mylabel", "ringbuf_full 12"):
        assert text in res.output
    assert f"partition offset = disk offset - {PART_START:,}" in res.output


def test_convert_parquet(trace, tmp_path: Path) -> None:
    path, r = trace
    out = tmp_path / "t.parquet"
    assert _invoke("convert", str(path), "-o", str(out)).exit_code == 0
    table = pq.read_table(out)
    assert table.schema.equals(schemas.arrow_schema())
    assert table.column_names == schemas.column_names()
    for name in schemas.column_names():
        if name == "comm":
            assert table[name].to_pylist() == [c.decode() for c in r["comm"]]
        else:
            assert np.array_equal(table[name].to_numpy(), r[name]), name
    meta = pq.read_schema(out).metadata
    saved = json.loads(meta[b"iotape.header"])
    assert saved["devices"] == header()["devices"]
    assert saved["format"] == "iotape-trace"
    assert json.loads(meta[b"iotape.footer"])["lost"] == FOOTER["lost"]
    assert pq.ParquetFile(out).metadata.row_group(0).column(0).compression == "ZSTD"


def test_convert_csv(trace, tmp_path: Path) -> None:
    path, r = trace
    out = tmp_path / "t.csv"
    assert _invoke("convert", str(path), "-o", str(out)).exit_code == 0
    schema = schemas.arrow_schema()
    table = pacsv.read_csv(
        out, convert_options=pacsv.ConvertOptions(column_types={f.name: f.type for f in schema})
    )
    assert table.column_names == schemas.column_names()
    assert np.array_equal(table["offset"].to_numpy(), r["offset"])
    assert np.array_equal(table["error"].to_numpy(), r["error"])
    assert table["comm"].to_pylist() == [c.decode() for c in r["comm"]]
    assert table.cast(schema.remove_metadata()).num_rows == 5000


def test_convert_partition_relative(tmp_path: Path) -> None:
    r = np.zeros(5, schemas.record_dtype())
    r["dev"] = [SDA, SDA, SDA, SDA, NVME]
    r["offset"] = [PART_START, PART_START + 4096, 0, PART_START + PART_SIZE, 777]
    r["bytes"] = [4096, 8192, 0, 4096, 512]
    r["op"] = [0, 1, 2, 0, 0]
    path = make_trace(tmp_path / "t.iot", r)
    out = tmp_path / "t.parquet"
    res = _invoke("convert", str(path), "-o", str(out), "--partition-relative")
    assert "1 outside the partition left out" in res.output
    table = pq.read_table(out)
    # In the partition: shifted; the flush: kept at 0; past the end: left out; other disk: as is.
    assert table["offset"].to_pylist() == [0, 4096, 0, 777]
    assert table["dev"].to_pylist() == [SDA1, SDA1, SDA1, NVME]
    assert pq.read_schema(out).metadata[b"iotape.partition_relative"] == b"true"


def test_convert_damaged_trace_leaves_nothing(trace, tmp_path: Path) -> None:
    path, _ = trace
    path.write_bytes(path.read_bytes()[:-30])
    out = tmp_path / "out" / "t.parquet"
    out.parent.mkdir()
    with pytest.raises(IotapeError, match="file ends inside the footer"):
        _invoke("convert", str(path), "-o", str(out))
    assert list(out.parent.iterdir()) == []


def test_convert_unknown_output_type(trace, tmp_path: Path) -> None:
    path, _ = trace
    with pytest.raises(IotapeError, match=r"use \.parquet or \.csv"):
        _invoke("convert", str(path), "-o", str(tmp_path / "t.xlsx"))


def test_check_exit_codes_and_repair(trace) -> None:
    path, _ = trace
    assert _invoke("check", str(path)).exit_code == 0
    path.write_bytes(path.read_bytes()[: chunk_offsets(path)[4] + 100])
    res = _invoke("check", str(path), "--json")
    assert res.exit_code == 1
    rep = json.loads(res.output)
    assert rep["complete"] is False and rep["events"] == 4000
    res = _invoke("check", str(path), "--repair")
    assert res.exit_code == 0
    assert "kept 4,000 events in 4 chunks" in res.output
    assert _invoke("check", str(path)).exit_code == 0


def test_root_command_reports_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.iot"
    bad.write_bytes(b"not a trace at all, just some bytes")
    res = subprocess.run(
        [sys.executable, "-c", "from iotape.cli import main; main()", "trace", "info", str(bad)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"iotape: error: {bad}: byte 0: not an iotape trace: magic is b'not a tr', "
        "expected b'IOTAPE\\r\\n'"
    ]


def test_convert_refuses_to_overwrite(trace, tmp_path: Path) -> None:
    path, _ = trace
    out = tmp_path / "t.parquet"
    out.write_bytes(b"keep me")
    with pytest.raises(IotapeError, match="--force"):
        _invoke("convert", str(path), "-o", str(out))
    assert out.read_bytes() == b"keep me"
    assert _invoke("convert", str(path), "-o", str(out), "--force").exit_code == 0
    assert out.read_bytes()[:4] == b"PAR1"
