"""The dependent planner's one-search forms (docs/benchmarks.md "Planning a
dependent replay"): each the same answer as the thread-by-thread search it
replaced, ties, zero-length requests and its slow way included; and its log
lines the same whatever block they were made in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_replay_dependent import MIB
from test_replay_dependent_chunks import _mixed
from trace_helpers import header

from recorder.tracefile import TraceWriter
from replayer.plan import crossedges, deplines, nearest
from replayer.plan.build import PlanOptions, plan

BIG = np.iinfo(np.int64).max


def _random(rng: np.random.Generator, n: int, threads: int) -> tuple[np.ndarray, ...]:
    """Issues and completions on a coarse grid (many ties, some zero-length
    requests) and each request's thread (0..threads-1)."""
    start = rng.integers(0, 40, n).astype(np.int64) * 10
    end = start + rng.integers(0, 4, n) * 10
    return start, end, rng.integers(0, threads, n).astype(np.int64)


def _by_thread(start, end, tix, rows):
    """latest_of_others as its definition says it: thread by thread, each one's
    latest completion at or before the issue (of equal ones its last row)."""
    n = len(start)
    out, lead = np.full(n, -1, np.int64), np.full(n, BIG, np.int64)
    for i in range(n):
        best = None
        for u in sorted(set(tix[rows].tolist()) - {int(tix[i])}):
            mine = [int(r) for r in rows if tix[r] == u]
            done = [r for r in mine if end[r] <= start[i]]
            later = [int(end[r]) for r in mine if end[r] > start[i]]
            if later:
                lead[i] = min(lead[i], min(later) - start[i])
            if not done:
                continue
            j = max(done, key=lambda r: (end[r], r))
            if start[j] < start[i] and j != i and (best is None or end[j] > end[best]):
                best = j
        out[i] = -1 if best is None else best
    return out, lead


@pytest.mark.parametrize("rounds", [0, 1, crossedges.ROUNDS])
def test_the_latest_of_other_threads_is_the_thread_by_thread_answer(monkeypatch, rounds) -> None:
    """With every step back, one, or none (all the slow way): the same rows."""
    monkeypatch.setattr(crossedges, "ROUNDS", rounds)
    monkeypatch.setattr(crossedges, "QUERIES", 7)  # several blocks of requests
    rng = np.random.default_rng(34)
    stepped = 0
    for _ in range(40):
        n = int(rng.integers(2, 60))
        start, end, tix = _random(rng, n, int(rng.integers(2, 5)))
        rows = np.flatnonzero(rng.random(n) < 0.7)
        got, lead = crossedges.latest_of_others(start, end, tix, rows, True)
        want, want_lead = _by_thread(start, end, tix, rows)
        assert got.tolist() == want.tolist()
        assert lead.tolist() == want_lead.tolist()
        # requests whose latest other-thread completion was issued at or after
        # them: the search stepped past it
        pos = [i for i in range(n) if want[i] >= 0]
        stepped += sum(1 for i in pos if end[want[i]] < max(end[rows][end[rows] <= start[i]]))
    assert stepped > 10


def test_the_nearest_other_submitters_completions_are_the_per_submitter_answer() -> None:
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(2, 60))
        start, end, tix = _random(rng, n, int(rng.integers(2, 5)))
        near, lead = nearest.others_around(start, end, tix)
        for i in range(n):
            other = tix != tix[i]
            before = end[other & (end <= start[i])]
            after = end[other & (end > start[i])]
            assert near[i] == (start[i] - before.max() if len(before) else BIG)
            assert lead[i] == (after.min() - start[i] if len(after) else BIG)


def test_a_plans_lines_are_the_same_made_a_few_at_a_time(tmp_path: Path, monkeypatch) -> None:
    """Lines made in blocks of 7 rows (a job's lines cut across blocks): the
    job directory byte for byte as made in one block."""
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    h = header()
    h["devices"] = h["devices"][:1]
    trace = tmp_path / "t.iot"
    with TraceWriter(trace, h) as w:
        w.write(_mixed())
        w.close({})
    tg = [f"all={target}"]
    plan(PlanOptions(trace, tmp_path / "one", targets=tg, timing="dependent"))
    monkeypatch.setattr(deplines, "BLOCK", 7)
    plan(PlanOptions(trace, tmp_path / "many", targets=tg, timing="dependent"))
    one = sorted((tmp_path / "one" / "iologs").glob("*.log"))
    assert len(one) >= 4
    for p in one:
        text = p.read_bytes()
        assert text.count(b"\n") > 2 * 7
        assert (tmp_path / "many" / "iologs" / p.name).read_bytes() == text
    assert (tmp_path / "many" / "replay.fio").read_text() == (
        tmp_path / "one" / "replay.fio"
    ).read_text()
