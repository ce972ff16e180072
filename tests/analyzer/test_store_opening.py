"""`opener.opening`: the store opened on a thread of its own while the caller goes on
(`iotape ingest`), its error raised where the caller asks for it, and the store
closed on the way out, also when the caller fails first."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.store.interface import StoreError
from analyzer.store.opener import opened, opening


def test_opening_gives_the_store_and_closes_it(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with opening(str(db)) as store:
        s = store()
        assert s.has_tables()
        s.execute("INSERT INTO streams VALUES ('r', 1, 'x')")
    # What was written through it is there when the file is opened again.
    with opened(str(db)) as again:
        assert again.rows("SELECT name FROM streams") == [("x",)]


def test_opening_error_raised_where_the_store_is_asked_for(tmp_path: Path) -> None:
    bad = tmp_path / "dir.duckdb"
    bad.mkdir()
    with opening(str(bad)) as store, pytest.raises(StoreError, match="is a directory"):
        store()


def test_opening_closes_the_store_when_the_caller_fails(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with pytest.raises(ValueError, match="the caller's"), opening(str(db)):
        raise ValueError("the caller's")  # before it asked for the store
    with opened(str(db)) as again:
        assert again.has_tables()


def test_opening_removes_a_store_it_made_that_was_never_used(tmp_path: Path) -> None:
    """`iotape ingest missing.iot` into a new store fails on its input while the store
    opens ahead: no store is left behind. One that was there stays."""
    db = tmp_path / "new.duckdb"
    with pytest.raises(ValueError), opening(str(db)):
        raise ValueError("the input cannot be read")
    assert list(tmp_path.iterdir()) == []
    with opened(str(db)):
        pass
    with pytest.raises(ValueError), opening(str(db)):
        raise ValueError("the input cannot be read")
    assert db.exists() and Path(f"{db}.events").is_dir()


def test_opening_leaves_no_directory_it_made_for_a_store_never_used(tmp_path: Path) -> None:
    """`iotape ingest missing.iot --db new/dir/s.duckdb`: no store, and none of the
    directories made for it; a directory that was there stays."""
    with pytest.raises(ValueError), opening(str(tmp_path / "new" / "dir" / "s.duckdb")):
        raise ValueError("the input cannot be read")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    with pytest.raises(ValueError), opening(str(tmp_path / "kept" / "sub" / "s.duckdb")):
        raise ValueError("the input cannot be read")
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"]
    assert list((tmp_path / "kept").iterdir()) == []


def test_opening_removes_a_new_store_whose_first_transaction_failed(tmp_path: Path) -> None:
    """A trace that breaks half-way through its ingest into a new store: the store it
    was going into goes too. Once something was committed, the store stays."""
    db = tmp_path / "new" / "s.duckdb"
    with pytest.raises(ValueError), opening(str(db)) as store:
        s = store()
        with s.transaction():
            s.execute("INSERT INTO streams VALUES ('r', 1, 'x')")
            raise ValueError("chunk 209: payload checksum mismatch")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError), opening(str(db)) as store:
        s = store()
        with s.transaction():
            s.execute("INSERT INTO streams VALUES ('r', 1, 'x')")
        raise ValueError("the second file broke")
    with opened(str(db)) as again:
        assert again.rows("SELECT name FROM streams") == [("x",)]
    # Written outside a transaction: kept as well.
    other = tmp_path / "other.duckdb"
    with pytest.raises(ValueError), opening(str(other)) as store:
        store().execute("INSERT INTO streams VALUES ('r', 1, 'y')")
        raise ValueError("later")
    with opened(str(other)) as again:
        assert again.rows("SELECT name FROM streams") == [("y",)]
