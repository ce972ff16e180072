"""The pairs an ordered sink waits for (replayer/run/waiting.py): handed on in the
original's (t, n) order, each settle exactly what a store holding everything in
memory hands on, whether they wait in memory, on the file, or apart as late."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_fidelity_stream import _files, _orig, _replay, _same

from replayer.run import fidelity, later, ordered, quantiles, waiting

ORIG = np.dtype([("t", "<i8"), ("n", "<i8"), ("stream", "u1")])


def _steps(seed: int, n: int = 6000, lost_every: int = 97) -> list[tuple[np.ndarray, int | None]]:
    """(pairs of a step, before) as drive_batches makes them: each step's run in
    order; a pair held one to several steps comes in a later run, before the end
    of earlier ones; a lost original holds `before` back for 20 steps."""
    rng = np.random.default_rng(seed)
    o = np.zeros(n, ordered.COMPACT)
    o["t"] = np.sort(rng.integers(0, 10**7, size=n) // 7 * 7)  # equal times too
    o["n"] = np.arange(n)
    o["stream"] = rng.integers(0, 4, size=n)
    bounds = np.r_[np.sort(rng.choice(o["t"][1:-1], size=60, replace=False)), o["t"][-1] + 1]
    natural = np.searchsorted(bounds, o["t"], "right")
    delay = np.where(rng.random(n) < 0.15, rng.integers(1, 12, size=n), 0)
    lost = np.arange(n) % lost_every == 5
    out: list[tuple[np.ndarray, int | None]] = []
    for k in range(len(bounds)):
        now = np.flatnonzero((natural + delay == k) & ~lost)
        held = (natural <= k) & (((natural + delay > k) & ~lost) | (lost & (natural + 20 > k)))
        before = int(min(bounds[k], o["t"][held].min() if held.any() else bounds[k]))
        out.append((o[now], before))
    out.append((o[:0], None))
    return out


def _reference(steps: list[tuple[np.ndarray, int | None]]) -> list[np.ndarray]:
    """Every pair held in memory; each settle hands on those before `before`, sorted."""
    held = np.empty(0, ordered.COMPACT)
    got = []
    for rows, before in steps:
        held = np.concatenate([held, rows])
        held = held[np.lexsort((held["n"], held["t"]))]
        cut = len(held) if before is None else int(np.searchsorted(held["t"], before, "left"))
        got.append(held[:cut])
        held = held[cut:]
    return got


def _run(steps, budget: int, keep=(ORIG, later.REP)) -> tuple[list, waiting.Waiting]:
    w = waiting.Waiting(keep, budget)
    got = []
    spilled = 0
    try:
        for rows, before in steps:
            # The replay's rows: the original's, marked, so that pairs stay aligned.
            rep = rows.copy()
            rep["t"] = rows["t"] + 1000
            rep["bytes"] = rows["n"] % 1000
            calls = list(w.settle(rows, rep, before))
            o = [c[0] for c in calls]
            r = [c[1] for c in calls]
            for a, b in zip(o, r, strict=True):
                assert len(a)  # (an empty call would tell a sink of pairs it never had)
                assert np.array_equal(b["t"], a["t"] + 1000)
                assert np.array_equal(b["bytes"], a["n"] % 1000)
            got.append(np.concatenate([a[["t", "n", "stream"]] for a in o]) if o else None)
        spilled = w.spilled
    finally:
        w.close()
    assert spilled == w.spilled
    return got, w


@pytest.mark.parametrize("budget", [10**9, 300, 40])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_waiting_pairs_come_in_order_as_if_all_were_held(
    monkeypatch, budget: int, seed: int
) -> None:
    monkeypatch.setattr(waiting, "READ", 64)  # several reads of the file per settle
    steps = _steps(seed)
    ref = _reference(steps)
    got, w = _run(steps, budget)
    assert sum(len(r) for r in ref) == sum(len(s[0]) for s in steps) > 5000
    for g, r in zip(got, ref, strict=True):
        if not len(r):
            assert g is None or not len(g)
            continue
        assert g is not None
        for col in ("t", "n", "stream"):
            assert np.array_equal(g[col], r[col])
    if budget < 1000:
        assert w.spilled > 10 * budget  # most of what waited went to the file


def test_a_pair_held_behind_the_file_is_merged_in_its_place(monkeypatch) -> None:
    """Pairs a step or more late, after the earliest held ones went to the file: kept
    apart (late) and handed on in their place among the file's."""
    monkeypatch.setattr(waiting, "READ", 16)
    seen_late = []
    real = waiting.Waiting._add

    def spy(self, o, r):
        real(self, o, r)
        seen_late.append(self._late is not None)

    monkeypatch.setattr(waiting.Waiting, "_add", spy)
    steps = _steps(4, lost_every=41)
    ref = _reference(steps)
    got, w = _run(steps, 20)
    assert any(seen_late) and w.spilled
    both = [(g, r) for g, r in zip(got, ref, strict=True) if len(r)]
    assert all(g is not None and np.array_equal(g["n"], r["n"]) for g, r in both)


def test_rows_kept_whole_where_the_sink_names_no_columns() -> None:
    steps = _steps(5)
    got, w = _run(steps, 50, keep=(None, None))
    ref = _reference(steps)
    assert w.spilled
    assert np.array_equal(
        np.concatenate([g["n"] for g in got if g is not None]), np.concatenate(ref)["n"]
    )


@pytest.mark.parametrize("one_stream", [False, True])
def test_fidelity_with_what_waits_on_file_is_the_in_memory_answer(
    tmp_path: Path, monkeypatch, one_stream: bool
) -> None:
    """A replay that lost 2 % of its requests: each lost one holds every later pair
    back a horizon; with a budget of 64 pairs nearly all of them wait on the file,
    and the calls waiting for the clock offset all go to theirs (later.py)."""
    monkeypatch.setattr(ordered, "BATCH", 250)
    monkeypatch.setattr(quantiles, "KEEP", 300)
    monkeypatch.setattr(later, "MEM_BYTES", 0)
    monkeypatch.setattr(waiting, "BUDGET", 64)
    monkeypatch.setattr(waiting, "READ", 100)
    spilled: list[int] = []
    real = waiting.Waiting.close

    def close(w: waiting.Waiting) -> None:
        spilled.append(w.spilled)
        real(w)

    monkeypatch.setattr(waiting.Waiting, "close", close)
    o = _orig(6000, seed=13)
    if one_stream:
        o["stream"] = o["stream"][0]
    po, pr = _files(tmp_path, o, _replay(o, 13))
    ref = fidelity.compare_in_memory(po, pr, 2.5)
    got = fidelity.compare(po, pr, 2.5)
    assert ref["overall"]["match_share"] < 0.99 and len(ref["windows"]) > 3
    assert spilled and spilled[0] > 3000
    _same(got, ref)
