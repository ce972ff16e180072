"""The event files written without importing pyarrow.parquet (event_files.parquet_writer,
issue 36): the same bytes as pyarrow.parquet's writer with the same options, and a
plain `iotape ingest` that imports neither it nor pyarrow.fs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from trace_helpers import make_trace, workload_records

from analyzer.store import event_files
from analyzer.store.event_batches import chunk_batches, ingest_schema


def _tables() -> list[pa.Table]:
    """Row groups of a trace's batches, of uneven sizes, with a few task names."""
    records = workload_records(30_000, seed=36)
    names = np.array([b"fio", b"kworker/0:1", b"db-writer"], dtype="S16")
    records["comm"] = names[np.arange(len(records)) % 3]
    parts = np.split(records, [4_000, 4_001, 19_000])
    batches = list(chunk_batches(iter(parts), 3_000))
    assert len(batches) == 3
    return [pa.Table.from_batches(batches[:2]), pa.Table.from_batches(batches[2:])]


def test_event_files_are_pyarrow_parquets_bytes(tmp_path: Path) -> None:
    schema = ingest_schema()
    ours = event_files.parquet_writer(
        tmp_path / "ours.parquet", schema, **event_files.WRITE_OPTIONS
    )
    theirs = pq.ParquetWriter(tmp_path / "theirs.parquet", schema, **event_files.WRITE_OPTIONS)
    for t in _tables():
        ours.write_table(t, row_group_size=t.num_rows)
        theirs.write_table(t, row_group_size=t.num_rows)
    ours.close()
    theirs.close()
    got = (tmp_path / "ours.parquet").read_bytes()
    assert got == (tmp_path / "theirs.parquet").read_bytes()
    back = pq.read_table(tmp_path / "ours.parquet")
    assert back.num_rows == 30_000 and pq.ParquetFile(tmp_path / "ours.parquet").num_row_groups == 2


def test_a_new_stores_empty_file_is_write_tables(tmp_path: Path) -> None:
    event_files.prepare(tmp_path / "parts")
    pq.write_table(pa.Table.from_batches([], schema=ingest_schema()), tmp_path / "want.parquet")
    got = event_files.run_dir(tmp_path / "parts", event_files.EMPTY_RUN) / event_files.FILE
    assert got.read_bytes() == (tmp_path / "want.parquet").read_bytes()


def test_a_plain_ingest_imports_no_pyarrow_parquet(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t.iot", workload_records(3_000, seed=4), chunk_records=700)
    cmd = [sys.executable, "-X", "importtime", "-m", "iotape", "ingest", str(trace)]
    p = subprocess.run(
        [*cmd, "--db", str(tmp_path / "s.duckdb"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)[0]["events"] == 3_000
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if "|" in line}
    assert "analyzer.store.event_files" in imported
    assert not {"pyarrow.parquet", "pyarrow.fs", "pyarrow._s3fs", "ssl"} & imported
    # And the run's files read back whole with pyarrow.parquet.
    files = sorted((tmp_path / "s.duckdb.events").glob("run_id=*/events-*.parquet"))
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == 3_000
