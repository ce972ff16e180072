"""`iotape ingest` ends its process without the interpreter's teardown
(iotape/cli.py QUICK_EXIT): what it printed still reaches a pipe, the store it
wrote is whole (DuckDB's write-ahead log folded into the file at close), and a
failure still takes the ordinary exit with its one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trace_helpers import make_trace, workload_records


def _iotape(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "iotape", *args], capture_output=True, text=True, timeout=120
    )


def test_ingest_output_and_store_whole_after_quick_exit(tmp_path: Path) -> None:
    import duckdb

    records = workload_records(3_000, seed=5)
    trace = make_trace(tmp_path / "t.iot", records, chunk_records=500, compression="zstd")
    db = tmp_path / "s.duckdb"
    p = _iotape("ingest", str(trace), "--db", str(db), "--json")
    assert p.returncode == 0, p.stderr
    # Printed to a pipe (block-buffered): all of it came out before the process ended.
    (result,) = json.loads(p.stdout)
    assert (result["events"], result["skipped"]) == (3_000, False)
    assert not Path(f"{db}.wal").exists()
    con = duckdb.connect(str(db), read_only=True)
    try:
        state = con.execute("SELECT state, events FROM runs").fetchall()
        hist = con.execute("SELECT count(*) FROM run_histograms").fetchall()[0][0]
    finally:
        con.close()
    assert state == [("ready", 3_000)] and hist > 0
    # The same file again: found, nothing to do, the line printed.
    p = _iotape("ingest", str(trace), "--db", str(db))
    assert p.returncode == 0 and "nothing to do" in p.stdout, p.stderr


def test_ingest_failure_takes_the_ordinary_exit(tmp_path: Path) -> None:
    missing = tmp_path / "missing.iot"
    p = _iotape("ingest", str(missing), "--db", str(tmp_path / "s.duckdb"))
    assert p.returncode != 0
    assert p.stderr.strip().splitlines() == [f"iotape: error: {missing}: no such file"]
    # The store, opened ahead while the input was read (opener.opening), is not left.
    assert sorted(tmp_path.iterdir()) == []
