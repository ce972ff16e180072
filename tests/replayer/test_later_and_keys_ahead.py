"""What `replay fidelity` keeps for later and makes ahead, apart from its answers
(test_fidelity_stream.py holds those to the in-memory reference): the calls
that wait for the replay's clock offset (later.py) and the original's keys made
in the thread that reads it (pairing.KeysAhead)."""

from __future__ import annotations

import numpy as np

from replayer.run import later, ordered
from replayer.run.ahead import ahead
from replayer.run.pairing import KeysAhead, keys


def test_later_gives_back_each_call_in_memory_then_on_file() -> None:
    """Calls kept in memory while they fit the budget, the rest on the file: all come
    back narrowed to REP and PAIR, with the same values, in order."""
    rng = np.random.default_rng(5)

    def rows(n: int) -> np.ndarray:
        r = np.zeros(n, ordered.COMPACT)
        r["t"] = np.sort(rng.integers(-(10**9), 10**10, size=n))
        r["bytes"] = rng.choice([512, 4096, 65536], size=n)
        r["op"], r["stream"] = rng.integers(0, 3, size=n), rng.integers(0, 4, size=n)
        r["offset"] = rng.integers(0, 1 << 40, size=n)  # (not kept: REP has no offset)
        return r

    def pair(r: np.ndarray) -> np.ndarray:
        p = np.empty(len(r), later.PAIR)
        p["t_o"], p["gap"], p["stream"] = r["t"] - 5, 5, r["stream"]
        return p

    given = []
    for i, n in enumerate([100, 0, 300, 70, 500, 1]):
        r = rows(n)
        kind = [later.REP_ROWS, later.LOST_ROWS, later.PAIRED][i % 3]
        given.append((kind, [pair(r), r] if kind == later.PAIRED else [r]))
    keep = later.Later(mem_bytes=(100 + 300) * later.REP.itemsize + 300 * later.PAIR.itemsize)
    try:
        for kind, parts in given:
            keep.add(kind, *parts)
        back = list(keep.calls())
        assert len(keep._mem) == 3  # the first three calls fit the budget
        assert keep._file is not None  # the rest went to the file
    finally:
        keep.close()
    assert [k for k, _ in back] == [k for k, _ in given]
    for (_, got), (_, parts) in zip(back, given, strict=True):
        assert len(got) == len(parts) and got[-1].dtype == later.REP
        for g, p in zip(got, parts, strict=True):
            for col in g.dtype.names:
                assert np.array_equal(g[col], p[col])


def test_keys_made_ahead_are_the_keys_of_what_the_pairing_asks() -> None:
    """KeysAhead: each batch keyed in the reading thread is the batch's keys; a join
    of batches (fidstream._at_least) is keyed where asked, and what was made for
    the batches it joined is dropped (only the batches in flight are held)."""
    rng = np.random.default_rng(9)
    batches = []
    for n in (50, 70, 20, 90, 10, 40):
        b = np.zeros(n, ordered.COMPACT)
        b["offset"], b["bytes"] = rng.integers(0, 1 << 30, size=n), 4096
        batches.append(b)
    calls: list[int] = []

    def fn(a: np.ndarray) -> np.ndarray:
        calls.append(len(a))
        return keys(a)

    ka = KeysAhead(fn)
    got = ka.given(ahead(ka.made(iter(batches))))
    b0 = next(got)
    assert np.array_equal(ka(b0), keys(b0))
    joined = ordered.cat([next(got), next(got)])  # 70 + 20 rows, joined
    assert np.array_equal(ka(joined), keys(joined))
    for b in got:
        assert np.array_equal(ka(b), keys(b)) and len(ka._made) <= 2
    assert sorted(calls) == sorted([50, 70, 20, 90, 10, 40, 90])  # the join, once more
    assert not ka._made and np.array_equal(ka(batches[0][:0]), keys(batches[0][:0]))


def test_each_replayed_request_is_kept_for_later_once(tmp_path, monkeypatch) -> None:
    """Every replayed request is kept once, paired or not (fidstream.Figures): a
    replay's rows were kept a second time as they came (45 bytes a request, not 31)."""
    from test_fidelity_stream import _files, _orig, _replay

    from replayer.run import fidelity

    kept: list[tuple[int, int]] = []
    real = later.Later.add

    def add(self, kind: int, *parts: np.ndarray) -> None:
        kept.append((kind, len(parts[-1])))
        real(self, kind, *parts)

    monkeypatch.setattr(later.Later, "add", add)
    monkeypatch.setattr(ordered, "BATCH", 250)
    o = _orig(4000, seed=17)
    out = fidelity.compare(*_files(tmp_path, o, _replay(o, 17)), 2.5)
    replayed = out["overall"]["requests"][1]
    assert sum(n for _, n in kept) == replayed
    assert {k for k, _ in kept} == {later.PAIRED, later.LOST_ROWS}
    paired = sum(n for k, n in kept if k == later.PAIRED)
    assert paired == out["pairing"]["paired"] < replayed
