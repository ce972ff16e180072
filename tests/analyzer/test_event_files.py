"""The DuckDB store's events as Parquet files, and the fast path from a trace to them (issue 19)."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from trace_helpers import make_trace, workload_records

import schemas
from analyzer.store import catalog, event_files, event_histograms, queries
from analyzer.store.event_batches import chunk_batches, comm_dictionary
from analyzer.store.export import export_run
from analyzer.store.ingest import DATA_TABLES, file_sha256, ingest, source_sha256
from analyzer.store.opener import open_read_only, open_store
from recorder.tracefile import (
    CHUNK_HEADER_SIZE,
    content_sha256,
    decode_comm,
    open_trace,
    records_to_arrow,
)


def test_chunk_batches_hold_what_records_to_arrow_gives(tmp_path: Path) -> None:
    records = workload_records(20_000, seed=4)
    trace = make_trace(tmp_path / "t.iot", records, chunk_records=3_000)
    with open_trace(trace) as t:
        got = pa.Table.from_batches(list(chunk_batches(t.iter_chunks(), 7_000)))
    assert [b.num_rows for b in got.to_batches()][:2] == [9_000, 9_000]
    want = pa.Table.from_batches([records_to_arrow(records)])
    assert got.column("comm").type == pa.dictionary(pa.int32(), pa.string())
    assert got.column_names == want.column_names
    for name in want.column_names:
        col = got[name].cast(pa.string()) if name == "comm" else got[name]
        assert col.combine_chunks().equals(want[name].combine_chunks()), name


def test_comm_dictionary_cuts_at_nul_and_escapes_bytes_like_decode_comm() -> None:
    comm = np.array(
        [b"ese-user0", b"ab\0xyz", b"ab", b"\xff\xfeq", b"0123456789abcdef", b""], dtype="S16"
    )
    got = comm_dictionary(comm)
    assert got.cast(pa.string()).to_pylist() == decode_comm(comm).to_pylist()
    # "ab\0xyz" and "ab" are one name: one dictionary entry.
    assert len(got.dictionary) == len(set(got.cast(pa.string()).to_pylist()))


@pytest.mark.parametrize("pure", [False, True])
def test_comm_dictionary_of_one_name_is_the_general_answer(
    pure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of one name takes a shortcut (names.c's pass, or numpy's test of one
    name); the answer is the same as the general path's, against the same growing
    dictionary."""
    from analyzer.store.event_batches import NAMES_PURE, Names

    if pure:
        monkeypatch.setenv(NAMES_PURE, "1")

    first = np.array([b"kworker/0:1", b"ese-user0"], dtype="S16")
    for name in (b"fio", b"\xff\xfeq", b"0123456789abcdef", b"ese-user0"):
        one = np.full(1000, name, dtype="S16")
        seen = Names()
        comm_dictionary(first, seen)
        got = comm_dictionary(one, seen)
        assert got.cast(pa.string()).to_pylist() == decode_comm(one).to_pylist()
        assert got.dictionary.to_pylist() == seen.words
        # Another path (a second name in the batch) indexes the same entries.
        mixed = comm_dictionary(np.append(one, first[:1]), seen)
        assert mixed.indices.to_pylist()[:1000] == got.indices.to_pylist()


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("k", [2, 4, 8, 9, 40])
def test_comm_dictionary_of_a_few_names_is_the_hashed_answer(
    k: int, pure: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of a few names (up to FEW_NAMES) are coded in one pass (names.c) or
    numpy's way (one name at a time), more by Arrow's hash; all give the same
    indices into the same growing dictionary, names equal up to their first NUL one
    entry, in order of first sight."""
    import os

    from analyzer.store import native
    from analyzer.store.event_batches import FEW_NAMES, NAMES_PURE, Names, _hashed_names

    if pure:
        monkeypatch.setenv(NAMES_PURE, "1")
    elif native.lib(NAMES_PURE) is None:
        assert os.environ.get("CI") != "true", "build/libingest.so missing: run `make native`"
        pytest.skip("build/libingest.so not built (`make native`)")

    rng = np.random.default_rng(k)
    names = [f"w{i}".encode() for i in range(k - 1)] + [b"ab"]
    pick = rng.integers(0, k, 5_000)
    comm = np.array([names[i] for i in pick], dtype="S16")
    comm[::7][comm[::7] == b"ab"] = b"ab\0tail"  # one name, two byte strings
    seen, hashed = Names(), Names()
    comm_dictionary(np.array([b"w1", b"first"], dtype="S16"), seen)
    comm_dictionary(np.array([b"w1", b"first"], dtype="S16"), hashed)
    got = comm_dictionary(comm, seen)
    want = _hashed_names(np.ascontiguousarray(comm).view(np.uint8), len(comm), hashed)
    assert got.indices.to_numpy().tolist() == want.tolist()
    assert seen.words == hashed.words
    assert got.cast(pa.string()).to_pylist() == decode_comm(comm).to_pylist()
    assert seen.many == (len(set(comm.tolist())) > FEW_NAMES)  # distinct byte strings


def _two_traces(tmp_path: Path) -> tuple[Path, Path]:
    r = workload_records(5_000, seed=5)
    a = make_trace(tmp_path / "a.iot", r, chunk_records=1_000)
    r2 = r.copy()
    r2["bytes"][4_321] += 512
    b = make_trace(tmp_path / "b.iot", r2, chunk_records=1_000)
    return a, b


def test_a_trace_is_keyed_by_its_chunk_checksums_not_its_bytes(tmp_path: Path) -> None:
    a, b = _two_traces(tmp_path)
    copy = tmp_path / "copy.iot"
    shutil.copy(a, copy)
    assert source_sha256(a) == source_sha256(copy) == content_sha256(a)
    # One record differs: its chunk's CRC differs, so does the key.
    assert source_sha256(a) != source_sha256(b)
    assert source_sha256(a) != file_sha256(a)
    # A file not laid out as a whole trace falls back to its bytes.
    cut = tmp_path / "cut.iot"
    cut.write_bytes(a.read_bytes()[: -CHUNK_HEADER_SIZE * 3])
    assert content_sha256(cut) is None and source_sha256(cut) == file_sha256(cut)


def test_runs_events_are_files_that_delete_removes(tmp_path: Path) -> None:
    a, b = _two_traces(tmp_path)
    db = tmp_path / "s.duckdb"
    store = open_store(str(db))
    try:
        ra, rb = ingest(store, a), ingest(store, b)
        parts = event_files.parts_dir(str(db))
        da, db_ = event_files.run_dir(parts, ra.run_id), event_files.run_dir(parts, rb.run_id)
        assert sorted(p.name for p in da.iterdir()) == ["events-0.parquet"]
        assert queries.run(store, "run_events", run_id=ra.run_id) == [(5_000,)]
        catalog.delete(store, ra.run_id, DATA_TABLES)
        assert not da.exists() and db_.exists()
        assert queries.run(store, "run_events", run_id=ra.run_id) == [(0,)]
        assert queries.run(store, "run_events", run_id=rb.run_id) == [(5_000,)]
    finally:
        store.close()
    # A read-only open (the server) sees the same events.
    ro = open_read_only(str(db))
    try:
        assert queries.run(ro, "run_events", run_id=rb.run_id) == [(5_000,)]
    finally:
        ro.close()


def test_a_failed_ingest_leaves_no_files(tmp_path: Path) -> None:
    records = workload_records(4_000, seed=6)
    trace = make_trace(tmp_path / "t.iot", records, chunk_records=1_000)
    data = bytearray(trace.read_bytes())
    data[-2_000] ^= 0xFF  # a record in the last chunk: its CRC no longer matches
    bad = tmp_path / "bad.iot"
    bad.write_bytes(bytes(data))
    db = tmp_path / "s.duckdb"
    store = open_store(str(db))
    try:
        with pytest.raises(Exception, match="checksum mismatch"):
            ingest(store, bad)
        assert catalog.all_runs(store, ("loading", "ready")) == []
        left = [p for p in event_files.parts_dir(str(db)).rglob("*") if p.is_file()]
        assert [p.parent.name for p in left] == [f"run_id={event_files.EMPTY_RUN}"]
    finally:
        store.close()


def test_a_store_in_memory_removes_its_files_on_close(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t.iot", workload_records(100, seed=7))
    store = open_store("duckdb://:memory:")
    ingest(store, trace)
    parts = store.parts
    assert any(parts.rglob("events-0.parquet"))
    store.close()
    assert not parts.exists()


def test_a_store_from_before_the_files_moves_its_events_table(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t.iot", workload_records(3_000, seed=8))
    db = tmp_path / "old.duckdb"
    store = open_store(str(db))
    r = ingest(store, trace)
    want = queries.op_latency(store, r.run_id)
    store.close()
    # Make it look like a store written before: its events in a table of the file.
    shutil.rmtree(event_files.parts_dir(str(db)))
    con = duckdb.connect(str(db))
    con.execute(schemas.sql_ddl("events", [("run_id", "VARCHAR")]))
    cols = ", ".join(f'"{c}"' for c in schemas.column_names())
    tab = pa.Table.from_batches([records_to_arrow(open_trace(trace).read_all())])
    con.register("src", tab)
    con.execute(f"INSERT INTO events SELECT $r, {cols} FROM src", {"r": r.run_id})
    con.close()
    ro = open_read_only(str(db))  # read-only: the table is read as it is
    try:
        assert queries.op_latency(ro, r.run_id) == want
    finally:
        ro.close()
    store = open_store(str(db))
    try:
        assert queries.op_latency(store, r.run_id) == want
        tables = store.rows(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' AND table_name = 'events'"
        )
        assert tables == []
        out = export_run(store, r.run_id, tmp_path / "out.parquet")
        assert out["rows"] == 3_000
    finally:
        store.close()


def test_histograms_built_at_ingest_are_the_rows_the_query_gives(tmp_path: Path) -> None:
    from trace_helpers import random_records

    from analyzer.store.queries import EventFilter

    records = workload_records(60_000, seed=9)
    records["ts_issue_ns"][::7] = 0  # unknown issue times: no device latency
    records["ts_queue_ns"][::5] = records["ts_issue_ns"][::5] + 1  # queued after issue
    records["ts_complete_ns"][::11] += np.arange(len(records[::11]), dtype=np.uint64) << 20
    trace = make_trace(tmp_path / "t.iot", records, chunk_records=4_000)
    # Latencies of any size: too large for the stored buckets, so the query answers.
    wild = make_trace(tmp_path / "w.iot", random_records(5_000, seed=9))
    store = open_store(str(tmp_path / "s.duckdb"))
    try:
        r, w = ingest(store, trace), ingest(store, wild)
        for metric in ("device", "queue"):
            want = queries.run(store, f"hist_{metric}", **EventFilter().params(r.run_id))
            assert len(want) > 100
            assert event_histograms.stored(store, r.run_id, metric) == want
        assert event_histograms.stored(store, w.run_id, "device") is None
        catalog.delete(store, r.run_id, DATA_TABLES)
        assert event_histograms.stored(store, r.run_id, "device") is None
    finally:
        store.close()
