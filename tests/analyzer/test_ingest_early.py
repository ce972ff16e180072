"""A file opened before the store (`open_early`, what `iotape ingest` does with its
first file): the same run as an ingest that opens it itself, the trace's helper
thread stopped however it ends, and other kinds of sources opened when taken."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from store_helpers import store_url
from trace_helpers import make_trace, workload_records

from analyzer.store import catalog
from analyzer.store.ingest import ingest, open_early
from analyzer.store.opener import open_store
from analyzer.store.trace_source import AHEAD_BATCHES, BATCH_ROWS, TraceSource
from base.errors import IotapeError
from recorder.tracefile.convert import convert


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "iotape-ingest-convert"]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    # More batches than the helper converts ahead, so that it waits for the consumer.
    n = BATCH_ROWS * (AHEAD_BATCHES + 2) + 123
    return make_trace(tmp_path / "t.iot", workload_records(n, seed=5), chunk_records=8192)


def test_early_is_the_same_run(trace: Path, tmp_path: Path) -> None:
    """Byte for byte: the events' Parquet files, the histograms and the run's row."""
    got = {}
    for how in ("early", "plain"):
        d = tmp_path / how
        store = open_store(store_url("duckdb", d))
        try:
            early = open_early(trace) if how == "early" else None
            assert early is None or (isinstance(early.source, TraceSource) and _helpers())
            r = ingest(store, trace, early=early, tags={"k": "v"})
            assert not _helpers() and (early is None or early.source is None)
            assert not r.skipped and r.events == BATCH_ROWS * (AHEAD_BATCHES + 2) + 123
            again = ingest(store, trace)
            assert again.skipped and again.run_id == r.run_id
            run = catalog.resolve(store, r.run_id)
            hist = store.rows("SELECT * FROM run_histograms ORDER BY ALL")
        finally:
            store.close()
        files = {
            p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).digest()
            for p in sorted(d.rglob("*.parquet"))
        }
        keep = ("id", "name", "events", "bytes", "duration_ns", "tags", "state")
        got[how] = (files, hist, {k: run[k] for k in keep})
    assert len(got["early"][0]) == 3 and got["early"][1]
    assert got["early"] == got["plain"]


def test_early_of_a_run_already_there_stops_its_helper(store, trace: Path) -> None:
    ingest(store, trace)
    early = open_early(trace)
    assert _helpers()
    r = ingest(store, trace, early=early)
    assert r.skipped and not _helpers() and early.source is None


def test_early_not_ingested_is_closed(trace: Path) -> None:
    early = open_early(trace)
    src = early.source
    assert isinstance(src, TraceSource) and _helpers()
    early.close()
    early.close()
    assert not _helpers() and src.trace._mm is None


def test_early_of_parquet_opens_it_when_taken(store, trace: Path, tmp_path: Path) -> None:
    pq_path = tmp_path / "t.parquet"
    convert(trace, pq_path)
    early = open_early(pq_path)
    assert early.source is None and not _helpers()
    r = ingest(store, pq_path, early=early)
    assert not r.skipped and r.events == BATCH_ROWS * (AHEAD_BATCHES + 2) + 123


def test_early_of_a_bad_file_fails_before_any_store(tmp_path: Path) -> None:
    junk = tmp_path / "junk.iot"
    junk.write_bytes(b"not a trace at all, and long enough for a header")
    with pytest.raises(IotapeError, match="not an iotape trace"):
        open_early(junk)
    assert not _helpers()


def test_early_is_for_its_own_file(store, trace: Path, tmp_path: Path) -> None:
    early = open_early(trace)
    try:
        with pytest.raises(ValueError, match="opened early"):
            ingest(store, tmp_path / "other.iot", early=early)
    finally:
        early.close()
    assert not _helpers()


def test_early_says_what_the_plain_ingest_says_of_a_bad_file(store, trace: Path, tmp_path: Path):
    """The conversion starts before the hash is taken (analyzer/store/early.py); a
    file it cannot start on fails with the line the plain route gives."""
    cut = tmp_path / "cut.iot"
    cut.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    junk = tmp_path / "junk.iot"
    junk.write_bytes(b"not a trace at all, and long enough for a header")
    empty = tmp_path / "empty.iot"
    empty.write_bytes(b"")
    folder = tmp_path / "folder.iot"
    folder.mkdir()
    for bad in (tmp_path / "missing.iot", cut, junk, empty, folder):
        with pytest.raises(Exception) as plain:
            ingest(store, bad)
        with pytest.raises(Exception) as early:
            open_early(bad)
        assert (type(early.value), str(early.value)) == (type(plain.value), str(plain.value))
        assert not _helpers(), bad


def test_early_starts_without_the_catalog() -> None:
    """What the conversion needs, and not the catalog's modules (imported after it
    started: iotape/ingest_command.py)."""
    code = (
        "import sys\n"
        "import analyzer.store.early\n"
        "print(sorted(m for m in ('analyzer.store.catalog', 'analyzer.store.queries', 'duckdb')"
        " if m in sys.modules))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr
