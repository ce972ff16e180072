"""`iotape ingest`: idempotent, atomic, and clear about what it refuses (issue 5)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from store_helpers import store_url
from trace_helpers import make_trace, workload_records

from analyzer.store import catalog, queries
from analyzer.store.ingest import ingest
from analyzer.store.opener import open_store
from base.errors import IotapeError
from recorder.tracefile.convert import convert

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return make_trace(tmp_path / "nightly.iot", workload_records(5_000, seed=1), chunk_records=512)


def test_second_ingest_is_a_no_op_that_says_so(store, trace: Path) -> None:
    first = ingest(store, trace, tags={"array": "A9000"})
    assert not first.skipped and first.events == 5_000 and first.name == "nightly"
    again = ingest(store, trace, name="other")
    assert again.skipped and again.run_id == first.run_id
    assert "already ingested" in again.message
    assert len(catalog.all_runs(store)) == 1
    assert queries.run(store, "run_events", run_id=first.run_id) == [(5_000,)]
    assert catalog.resolve(store, "nightly")["tags"] == {"array": "A9000"}


def test_parquet_from_trace_convert_is_the_same_events(store, trace: Path, tmp_path) -> None:
    pq_path = tmp_path / "nightly.parquet"
    convert(trace, pq_path)
    a = ingest(store, trace)
    b = ingest(store, pq_path)
    assert b.run_id != a.run_id and b.events == a.events
    # The stem is taken: the second run gets a unique name.
    assert b.name == f"nightly-{b.run_id[:6]}"
    assert queries.op_latency(store, a.run_id) == queries.op_latency(store, b.run_id)
    assert catalog.resolve(store, b.run_id)["host"] == "lab1"


def test_names_resolve_and_collide_clearly(store, trace: Path, tmp_path) -> None:
    other = make_trace(tmp_path / "b.iot", workload_records(10, seed=2))
    a = ingest(store, trace, name="base")
    with pytest.raises(IotapeError, match="another run has this name"):
        ingest(store, other, name="base")
    assert catalog.resolve(store, "base")["id"] == a.run_id
    assert catalog.resolve(store, a.run_id[:6])["id"] == a.run_id
    with pytest.raises(IotapeError, match="no such run"):
        catalog.resolve(store, "nope")


def test_delete_then_ingest_again(store, trace: Path) -> None:
    a = ingest(store, trace)
    catalog.delete(store, a.run_id, ("events", "devices", "streams"))
    assert catalog.all_runs(store) == []
    assert queries.run(store, "run_events", run_id=a.run_id) == [(0,)]
    b = ingest(store, trace)
    assert not b.skipped and b.run_id == a.run_id
    assert queries.run(store, "run_events", run_id=a.run_id) == [(5_000,)]


@pytest.mark.parametrize(
    ("content", "suffix", "says"),
    [
        (b"hello, this is a text file\n" * 10, ".iot", "not an iotape trace"),
        (b"PAR1 not really", ".parquet", "not a readable Parquet file"),
        (b"{}", ".json", "not a workload report"),
        (b"\xff\xfe binary", ".json", "not a workload report"),
    ],
)
def test_wrong_files_are_one_line_errors(store, tmp_path, content, suffix, says) -> None:
    bad = tmp_path / f"bad{suffix}"
    bad.write_bytes(content)
    with pytest.raises(IotapeError, match=says) as e:
        ingest(store, bad)
    assert "\n" not in str(e.value)
    assert catalog.all_runs(store, ("loading", "ready")) == []


def test_other_refusals(store, trace: Path, tmp_path) -> None:
    with pytest.raises(IotapeError, match="no such file"):
        ingest(store, tmp_path / "missing.iot")
    with pytest.raises(IotapeError, match=r"without plan\.json: not a replay job directory"):
        ingest(store, tmp_path)
    cut = tmp_path / "cut.iot"
    data = trace.read_bytes()
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(IotapeError, match="ends without a footer"):
        ingest(store, cut)
    import pyarrow as pa
    import pyarrow.parquet as pq

    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), plain)
    with pytest.raises(IotapeError, match=r"without the iotape\.header metadata"):
        ingest(store, plain)
    assert catalog.all_runs(store, ("loading", "ready")) == []


# --------------------------------------------------------------------------- killed


_CHILD = """
import sys
from analyzer.store import clickhouse_store
from analyzer.store.ingest import ingest
from analyzer.store.opener import open_store
# INSERTs of a quarter million rows, so that chDB holds some of the run's rows when
# the child is killed, and the retry has them to remove.
clickhouse_store.CHDB_INSERT_ROWS = 262_144
store = open_store(sys.argv[1])
said = False
def progress(done, total):
    global said
    if done >= int(sys.argv[3]) and not said:
        print("halfway", flush=True)
        said = True
ingest(store, sys.argv[2], progress=progress)
print("finished", flush=True)
"""


@pytest.mark.parametrize("kind", ["duckdb", "chdb"])
def test_killed_ingest_leaves_no_run_and_a_retry_completes(kind: str, tmp_path: Path) -> None:
    n = 1_500_000
    records = workload_records(n, seed=3)
    big = make_trace(tmp_path / "big.iot", records, chunk_records=8192)
    url = store_url(kind, tmp_path)
    open_store(url).close()  # tables made; the child only ingests
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, url, str(big), str(n // 2)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        line = child.stdout.readline().strip()
        assert line == "halfway", f"the child said {line!r}"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    store = open_store(url)
    try:
        assert catalog.all_runs(store) == []
        retry = ingest(store, big)
        assert not retry.skipped and retry.events == n
        # Whatever the dead ingest had written is gone: no duplicates.
        assert queries.run(store, "run_events", run_id=retry.run_id) == [(n,)]
        (run,) = catalog.all_runs(store)
        assert run["bytes"] == int(records["bytes"].astype(np.uint64).sum())
        assert ingest(store, big).skipped
    finally:
        store.close()


def test_chdb_ingest_in_several_inserts_keeps_every_row(tmp_path: Path, monkeypatch) -> None:
    from analyzer.store import clickhouse_store

    # Batches come 65,536 rows each: two INSERTs, of two batches each.
    monkeypatch.setattr(clickhouse_store, "CHDB_INSERT_ROWS", 100_000)
    n = 200_000
    records = workload_records(n, seed=6)
    trace = make_trace(tmp_path / "t.iot", records, chunk_records=4_096)
    store = open_store(store_url("chdb", tmp_path))
    try:
        r = ingest(store, trace)
        assert r.events == n
        assert queries.run(store, "run_events", run_id=r.run_id) == [(n,)]
        got = store.rows(
            "SELECT sum(tid), min(ts_complete_ns), max(ts_complete_ns), uniqExact(ts_queue_ns) "
            "FROM events"
        )
        ts = records["ts_complete_ns"]
        assert got == [
            (
                int(records["tid"].astype(np.uint64).sum()),
                int(ts.min()),
                int(ts.max()),
                len(np.unique(records["ts_queue_ns"])),
            )
        ]
    finally:
        store.close()
