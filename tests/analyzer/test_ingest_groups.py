"""Row groups near the end of a run are smaller (event_files.group_rows, issue 36): the
writers finish soon after the last batch, and the run's files hold the same rows and
histograms as with whole row groups."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from trace_helpers import make_trace, workload_records

from analyzer.store import event_files
from analyzer.store.event_batches import chunk_batches
from recorder.tracefile import open_trace

BATCH = 512


def test_group_rows_whole_then_halving_to_a_batch() -> None:
    whole = event_files.ROW_GROUP_ROWS
    least = whole // 8
    assert event_files.group_rows(None, 0) == whole
    expect = 2_000_000
    fed, sizes = 0, []
    while fed < expect:
        g = event_files.group_rows(expect, fed)
        assert least <= g <= whole
        # Whole groups while at least two are left; then never more than what is
        # left after it, down to a batch's.
        if expect - fed >= 2 * whole:
            assert g == whole
        assert g <= max(least, (expect - fed) // 2)
        sizes.append(g)
        fed += g
    assert sizes[:2] == [whole, whole] and sizes[-1] == least
    assert sizes == sorted(sizes, reverse=True)
    # Past what was expected (a footer that said less), or nothing expected: whole.
    assert event_files.group_rows(expect, expect + 5) == whole
    assert event_files.group_rows(0, 10) == whole


def _write(trace: Path, parts: Path, expect: int | None) -> event_files.Written:
    with open_trace(trace) as t:
        return event_files.write(parts, "abc", chunk_batches(t.iter_chunks(), BATCH), expect)


def _groups(w: event_files.Written) -> list[int]:
    out = []
    for p in sorted(w.paths):
        md = pq.ParquetFile(p).metadata
        out += [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    return out


def _rows(w: event_files.Written) -> pa.Table:
    t = pa.concat_tables(pq.read_table(p) for p in w.paths)
    t = t.set_column(t.schema.get_field_index("comm"), "comm", t["comm"].cast(pa.string()))
    return t.sort_by([(c, "ascending") for c in t.column_names])


def test_a_run_written_with_what_it_expects_holds_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_files, "ROW_GROUP_ROWS", 8 * BATCH)
    n = 40 * BATCH + 77
    trace = make_trace(tmp_path / "t.iot", workload_records(n, seed=3), chunk_records=BATCH)
    whole = _write(trace, tmp_path / "whole", None)
    planned = _write(trace, tmp_path / "planned", n)
    assert whole.rows == planned.rows == n
    # Whole groups, the last halved between the writers, against groups that shrink
    # towards the end, in batches.
    assert sorted(_groups(whole)) == sorted([8 * BATCH] * 5 + [77])
    got = sorted(_groups(planned), reverse=True)
    assert sum(got) == n and got[:2] == [8 * BATCH] * 2
    assert got[-2:] == [BATCH, 77] and len(got) > len(_groups(whole))
    assert _rows(whole).equals(_rows(planned))
    assert whole.histograms is not None and planned.histograms is not None
    assert whole.histograms.equals(planned.histograms)


def test_a_footer_that_expects_too_few_or_too_many_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_files, "ROW_GROUP_ROWS", 8 * BATCH)
    n = 20 * BATCH
    trace = make_trace(tmp_path / "t.iot", workload_records(n, seed=4), chunk_records=BATCH)
    want = _rows(_write(trace, tmp_path / "none", None))
    for expect in (1, n // 3, 10 * n):
        w = _write(trace, tmp_path / f"e{expect}", expect)
        assert w.rows == n and sum(_groups(w)) == n
        assert _rows(w).equals(want)
