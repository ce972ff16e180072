"""The store: URLs, backends, DDL, and the analyses agreeing across engines (issue 5).

DuckDB and chDB run here for real. The ClickHouse server test runs when
IOTAPE_TEST_CLICKHOUSE_URL names a server (ClickHouse >= 22.8; not Debian's 18.16).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from store_helpers import store_url
from trace_helpers import make_trace, workload_records

import schemas
from analyzer.store import catalog, queries
from analyzer.store.ingest import ingest
from analyzer.store.interface import StoreError, parse_url
from analyzer.store.opener import open_store
from base.errors import IotapeError
from recorder.tracefile import open_trace
from schemas import tables

CLICKHOUSE_URL = os.environ.get("IOTAPE_TEST_CLICKHOUSE_URL")


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    records = workload_records(30_000, seed=7)
    # Some requests with an unknown issue time: they have no latency.
    records["ts_issue_ns"][::97] = 0
    return make_trace(tmp_path / "t.iot", records, chunk_records=4096)


# --------------------------------------------------------------------------- URLs


def test_urls_name_the_backend(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("IOTAPE_DB", raising=False)
    assert parse_url(f"{tmp_path}/a.duckdb").scheme == "duckdb"
    assert parse_url("duckdb:///x/y.duckdb").path == "/x/y.duckdb"
    assert parse_url("chdb:///x/ch").path == "/x/ch"
    u = parse_url("clickhouse://bob:secret@ch1:9000/lab")
    assert (u.host, u.port, u.user, u.password, u.database) == ("ch1", 9000, "bob", "secret", "lab")
    assert "secret" not in u.display()
    assert parse_url("clickhouse://ch1").port == 8123
    assert parse_url(None).path.endswith(".local/share/iotape/iotape.duckdb")
    monkeypatch.setenv("IOTAPE_DB", "chdb:///elsewhere")
    assert parse_url(None).scheme == "chdb"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgres://h/db", "unknown scheme 'postgres'"),
        ("duckdb://", "no path"),
        ("chdb://:memory:", "chDB needs a directory"),
        ("clickhouse:///db", "no host"),
        ("clickhouse://h:port/db", "port is not a number"),
        ("clickhouse://h/db;drop", "is not a plain name"),
        ("clickhouse://u:pw@h/db?x=1", "unknown options"),
    ],
)
def test_bad_urls_are_one_line_errors(url: str, says: str) -> None:
    with pytest.raises(IotapeError, match=says) as e:
        parse_url(url)
    assert "\n" not in str(e.value)
    assert "pw" not in str(e.value)


def test_unreachable_server_is_a_clear_error() -> None:
    # Port 9 (discard) on localhost: nothing listens, the connection is refused at once.
    with pytest.raises(StoreError, match=r"clickhouse://default@127.0.0.1:9/default: cannot reach"):
        open_store("clickhouse://127.0.0.1:9/default")


def test_wrong_files_are_clear_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.duckdb"
    junk.write_text("this is not a database\n" * 100)
    with pytest.raises(StoreError, match=r"junk\.duckdb: cannot open as a DuckDB store"):
        open_store(str(junk))
    with pytest.raises(StoreError, match="is a directory"):
        open_store(f"duckdb://{tmp_path}")
    with pytest.raises(StoreError, match="is a file; chDB needs a directory"):
        open_store(f"chdb://{junk}")
    with pytest.raises(StoreError, match="no store here yet"):
        open_store(f"{tmp_path}/none.duckdb", create=False)
    assert not (tmp_path / "none.duckdb").exists()


# --------------------------------------------------------------------------- DDL


def test_events_table_is_the_trace_record_plus_run_id() -> None:
    ev = tables.table("events")
    assert ev.column_names() == ["run_id", *schemas.column_names()]
    assert ev.order_by == ("run_id", "ts_complete_ns")


def test_clickhouse_ddl_has_codecs_and_order() -> None:
    sql = "\n".join(tables.ddl("clickhouse"))
    assert '"ts_complete_ns" UInt64 CODEC(DoubleDelta, ZSTD(1))' in sql
    assert '"comm" LowCardinality(String) CODEC(ZSTD(1))' in sql
    assert 'ORDER BY ("run_id", "ts_complete_ns")' in sql
    assert 'ENGINE = ReplacingMergeTree("version")' in sql


def test_cluster_ddl_is_replicated_behind_distributed() -> None:
    stmts = tables.ddl("clickhouse", cluster="lab")
    sql = "\n".join(stmts)
    for t in tables.tables():
        assert f'CREATE TABLE IF NOT EXISTS "{t}_local" ON CLUSTER "lab"' in sql
        assert f'CREATE TABLE IF NOT EXISTS "{t}" ON CLUSTER "lab" AS "{t}_local"' in sql
    assert "ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/events_local'" in sql
    assert (
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/runs_local', "
        "'{replica}', \"version\")" in sql
    )
    assert 'Distributed("lab", currentDatabase(), "events_local", rand())' in sql
    assert 'Distributed("lab", currentDatabase(), "runs_local", cityHash64(id))' in sql
    with pytest.raises(ValueError, match="not a plain identifier"):
        tables.ddl("clickhouse", cluster="lab; DROP TABLE x")
    with pytest.raises(ValueError, match="needs ClickHouse"):
        tables.ddl("duckdb", cluster="lab")


def test_chdb_accepts_its_ddl_twice(tmp_path: Path) -> None:
    for _ in range(2):
        s = open_store(f"chdb://{tmp_path}/ch")
        try:
            assert s.has_tables()
        finally:
            s.close()


# --------------------------------------------------------------------------- backends


def _check_counts(store, trace: Path) -> str:
    r = ingest(store, trace)
    with open_trace(trace) as t:
        records = t.read_all()
        footer_events = t.footer["events"]
    assert r.events == footer_events == len(records)
    assert queries.run(store, "run_events", run_id=r.run_id) == [(len(records),)]
    run = catalog.resolve(store, r.run_id)
    assert run["events"] == len(records)
    assert run["bytes"] == int(records["bytes"].astype(np.uint64).sum())
    assert run["duration_ns"] == int(records["ts_complete_ns"].max())
    assert run["host"] == "lab1" and run["kernel"] == "6.8.0-test"
    firmware = [d[3] for d in queries.run(store, "run_devices", run_id=r.run_id)]
    assert sorted(firmware) == ["GDC5", "SN05"]
    by_op = {x["op"]: x["ios"] for x in queries.op_latency(store, r.run_id)}
    has_lat = records["ts_issue_ns"] > 0
    assert by_op == {
        int(op): int(((records["op"] == op) & has_lat).sum()) for op in np.unique(records["op"])
    }
    return r.run_id


@pytest.mark.parametrize("kind", ["duckdb", "chdb"])
def test_counts_equal_the_trace(kind: str, tmp_path: Path, trace: Path) -> None:
    store = open_store(store_url(kind, tmp_path))
    try:
        _check_counts(store, trace)
    finally:
        store.close()


@pytest.mark.skipif(
    CLICKHOUSE_URL is None,
    reason="needs a ClickHouse server: set IOTAPE_TEST_CLICKHOUSE_URL=clickhouse://USER@HOST:8123/DB",
)
def test_counts_equal_the_trace_on_a_clickhouse_server(trace: Path) -> None:
    store = open_store(CLICKHOUSE_URL)
    try:
        run_id = _check_counts(store, trace)
        assert ingest(store, trace).skipped
        catalog.delete(store, run_id, ("events", "devices", "streams"))
        assert queries.run(store, "run_events", run_id=run_id) == [(0,)]
    finally:
        store.close()


def _analyses(url: str, trace: Path) -> tuple:
    store = open_store(url)
    try:
        run_id = ingest(store, trace).run_id
        return (
            queries.op_latency(store, run_id),
            queries.iops_per_second(store, run_id),
            queries.bytes_by_stream(store, run_id),
        )
    finally:
        store.close()


def test_analyses_agree_on_duckdb_and_chdb(tmp_path: Path, trace: Path) -> None:
    on_duckdb = _analyses(store_url("duckdb", tmp_path), trace)
    on_chdb = _analyses(store_url("chdb", tmp_path), trace)
    assert on_duckdb == on_chdb
    latency, per_second, streams = on_duckdb
    assert len(latency) == 3 and len(per_second) > 0
    assert {s["stream_name"] for s in streams} == {"other", "db-read", "log-write", "mylabel"}


def test_percentiles_are_the_disc_order_statistic(tmp_path: Path) -> None:
    """Known answers: rank ceil(n*q) of the sorted latencies, on both engines, for
    sizes where floor- and ceil-based definitions disagree."""
    for n in (1, 2, 7, 10, 999, 1001):
        records = workload_records(n, seed=n)
        records["op"] = 0
        trace = make_trace(tmp_path / f"p{n}.iot", records)
        lat = np.sort(records["ts_complete_ns"] - records["ts_issue_ns"])
        want = {name: int(lat[max(1, int(np.ceil(n * q))) - 1]) for q, name in queries.LEVELS}
        for kind in ("duckdb", "chdb"):
            url = store_url(kind, tmp_path / f"{kind}{n}")
            (tmp_path / f"{kind}{n}").mkdir()
            (row,), _, _ = _analyses(url, trace)
            assert {k: row[k] for k in want} == want, (kind, n)
            assert row["sum_ns"] == int(lat.sum()) and row["max_ns"] == int(lat[-1])


def test_queries_take_identifiers_only_from_the_schema() -> None:
    with pytest.raises(ValueError, match="not an identifier"):
        tables.quote('x"; DROP TABLE runs; --')
    with pytest.raises(ValueError, match="no column"):
        tables.table("events").column("nope")
    for q in queries.QUERIES.values():
        assert "$" not in q.clickhouse
        assert "{" not in q.sql("duckdb")
