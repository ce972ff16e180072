"""A run's latency histograms as ingest gathers them: histograms.c against numpy's way
(event_histograms.py), whatever the row groups, writers and keys."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from trace_helpers import workload_records

from analyzer.store import event_histograms, native
from analyzer.store.event_batches import chunk_batches


def _need_c() -> None:
    if native.lib(event_histograms.PURE) is None:
        assert os.environ.get("CI") != "true", "build/libingest.so missing: run `make native`"
        pytest.skip("build/libingest.so not built (`make native`)")


def _gathered(
    monkeypatch: pytest.MonkeyPatch, groups: list[pa.Table], pure: bool, writers: int = 1
) -> pa.Table | None:
    """`groups` dealt in turn to `writers`, as event_files' writer threads have them."""
    if pure:
        monkeypatch.setenv(event_histograms.PURE, "1")
    try:
        got = [event_histograms.Gathered() for _ in range(writers)]
        assert all((g.h is None) == pure for g in got)
        for i, t in enumerate(groups):
            got[i % writers].add(t)
        return event_histograms.merged(got)
    finally:
        for g in got:
            g.close()
        monkeypatch.delenv(event_histograms.PURE, raising=False)


def _table(records: np.ndarray) -> pa.Table:
    return pa.Table.from_batches(list(chunk_batches(iter([records]), 9_000)))


def _edge_records(n: int, seed: int) -> np.ndarray:
    records = workload_records(n, seed=seed)
    records["ts_queue_ns"][::7] = 0  # no queue time
    records["ts_issue_ns"][::11] = records["ts_complete_ns"][::11] + 5  # issued after done
    records["flags"][::13] |= event_histograms.UNSEEN  # no device time
    records["ts_complete_ns"][::17] = records["ts_issue_ns"][::17] + np.arange(
        len(records[::17]), dtype=np.uint64
    ) % np.uint64(70)  # under 64 ns: a bucket per ns
    records["ts_complete_ns"][::19] += np.uint64(1 << 45)
    records["ts_complete_ns"][::23] = records["ts_issue_ns"][::23] + np.uint64((1 << 47) - 1)
    return records


def test_c_histograms_are_numpys_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    _need_c()
    t = _table(_edge_records(40_000, seed=12))
    for groups in ([t], [t.slice(0, 0)], [], [t.slice(5_000, 20_000)]):
        want = _gathered(monkeypatch, groups, pure=True)
        got = _gathered(monkeypatch, groups, pure=False)
        assert want is not None and got is not None
        # The same rows in the same (key) order, the same types.
        assert got.equals(want)
    whole = _gathered(monkeypatch, [t], pure=False)
    assert whole is not None
    keys = whole["k"].to_numpy()
    assert len(keys) > 1_000 and bool((np.diff(keys) > 0).all())


def test_row_groups_on_two_writers_are_one_histogram(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups dealt to two writers, each gathering its own, then merged: the rows
    of one writer that saw them all, in C and numpy's way (folded every few)."""
    _need_c()
    t = _table(_edge_records(60_000, seed=3))
    groups = [t.slice(i, 7_000) for i in range(0, t.num_rows, 7_000)]
    whole = _gathered(monkeypatch, [t], pure=True)
    monkeypatch.setattr(event_histograms, "FOLD_PARTIALS", 2)
    for pure in (True, False):
        for writers in (1, 2, 3):
            got = _gathered(monkeypatch, groups, pure, writers)
            assert got is not None and whole is not None and got.equals(whole), (pure, writers)


def test_many_groups_are_gathered_as_numpy_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of (dev, op, stream) groups: more than the C side's cache of recent
    groups holds, and its hash grown several times over."""
    _need_c()
    rng = np.random.default_rng(8)
    records = _edge_records(50_000, seed=8)
    records["dev"] = rng.integers(1, 60, len(records)) << 20
    records["op"] = rng.integers(0, 12, len(records))
    records["stream"] = rng.integers(0, 256, len(records))
    t = _table(records)
    want = _gathered(monkeypatch, [t], pure=True)
    got = _gathered(monkeypatch, [t.slice(0, 30_000), t.slice(30_000)], pure=False, writers=2)
    assert want is not None and got is not None and got.equals(want)
    groups = np.unique(want["k"].to_numpy() >> np.uint64(15))
    assert len(groups) > 5_000
    # Memory bounded: past MAX_BYTES of cells the rows so far are set aside, many
    # times over here; the same rows in the end.
    monkeypatch.setattr(event_histograms, "MAX_BYTES", 1 << 16)
    g = event_histograms.Gathered()
    try:
        g.add(t)
        assert len(g.parts) > 10
        got = event_histograms.merged([g])
    finally:
        g.close()
    assert got is not None and got.equals(want)


def test_a_latency_past_the_limit_means_no_histogram(monkeypatch: pytest.MonkeyPatch) -> None:
    _need_c()
    records = _edge_records(20_000, seed=5)
    records["ts_complete_ns"][3] = records["ts_issue_ns"][3] + np.uint64(1 << 47)
    t = _table(records)
    for pure in (True, False):
        assert _gathered(monkeypatch, [t.slice(0, 10), t], pure, writers=2) is None
        assert _gathered(monkeypatch, [t.slice(10)], pure) is not None
