"""The pairing's C matcher (src/pairmatch.c through run/pairmatch.py) against
numpy's (pairing.Pairer._match with IOTAPE_PAIRING_PURE's path): the same pairs,
in the same order, and the same requests dropped, step by step."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from replayer.run import ordered, pairing, pairmatch
from replayer.run.pairing import Pairer


@pytest.fixture
def pure(monkeypatch):
    """Switch Pairer between numpy (True) and C (False)."""

    def use(on: bool) -> None:
        monkeypatch.setattr(pairmatch, "available", lambda: not on)

    return use


def _rows(n: int, keys: int, span_ns: int, rng: np.random.Generator, grain: int) -> np.ndarray:
    a = np.zeros(n, ordered.COMPACT)
    a["t"] = np.sort(rng.integers(0, span_ns // grain, size=n)) * grain
    a["n"] = np.arange(n)
    a["op"] = rng.integers(0, 2, size=n)
    a["offset"] = rng.integers(0, keys, size=n) * 4096
    a["bytes"] = 4096
    return a


def _steps(o: np.ndarray, r: np.ndarray, cuts: list[int], horizon: int) -> list:
    """Both traces through one Pairer, a batch before each cut, the rest last."""
    p = Pairer(horizon_ns=horizon)
    edges = [None, *cuts, None]
    out = []
    for lo, hi in itertools.pairwise(edges):
        parts = []
        for x in (o, r):
            m = np.ones(len(x), bool)
            if lo is not None:
                m &= x["t"] >= lo
            if hi is not None:
                m &= x["t"] < hi
            parts.append(x[m])
        out.append(p.step(parts[0], parts[1], hi))
    return out


@pytest.mark.parametrize(("keys", "horizon"), [(50, 10**9), (3, 10**8), (2000, 5 * 10**9)])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("grain", [1, 10**8])
def test_c_steps_are_numpys(pure, keys: int, horizon: int, seed: int, grain: int) -> None:
    """Few keys and a short horizon (chance pairs far apart, many rounds of drops,
    and keys past MAX_ROUNDS), lost requests on both sides, batches cut anywhere,
    times in ns or on a coarse grid (ties between far pairs): every step's pairs,
    lost requests and held requests are the same."""
    rng = np.random.default_rng(seed)
    o = _rows(3000, keys, 20 * 10**9, rng, grain)
    r = o[rng.random(len(o)) > 0.05].copy()
    r["t"] += rng.integers(-2, 3, size=len(r)) * horizon // grain * grain
    extra = _rows(200, keys, 20 * 10**9, rng, grain)
    r = np.concatenate([r, extra])
    r = r[np.argsort(r["t"], kind="stable")]
    r["n"] = np.arange(len(r))
    cuts = sorted(rng.integers(10**9, 19 * 10**9, size=6).tolist())
    pure(True)
    ref = _steps(o, r, cuts, horizon)
    pure(False)
    got = _steps(o, r, cuts, horizon)
    assert sum(len(s.orig) for s in ref) > 100
    assert sum(len(s.lost_orig) for s in ref) > 10
    for a, b in zip(ref, got, strict=True):
        for f in ("orig", "rep", "lost_orig", "lost_rep"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_past_max_rounds_drops_every_far_pair(pure) -> None:
    """One key, the original at 0..99 s, the replay 100 s later: every pair is
    beyond a 1 s horizon; after MAX_ROUNDS drops the rest are all left out, in C
    as in numpy."""
    o = np.zeros(100, ordered.COMPACT)
    o["t"], o["n"], o["offset"], o["bytes"] = np.arange(100) * 10**9, np.arange(100), 0, 512
    r = o.copy()
    r["t"] += 100 * 10**9
    res = []
    for on in (True, False):
        pure(on)
        res.append(Pairer(horizon_ns=10**9)._match(o, r))
    (ia, ib, ga, gb), (ja, jb, ha, hb) = res
    assert len(ia) == 0 and ga.sum() > pairing.MAX_ROUNDS
    assert np.array_equal(ia, ja) and np.array_equal(ib, jb)
    assert np.array_equal(ga, ha) and np.array_equal(gb, hb)


def test_empty_sides_pair_nothing(pure) -> None:
    pure(False)
    o = np.zeros(3, ordered.COMPACT)
    ia, ib, ga, gb = Pairer()._match(o, o[:0])
    assert len(ia) == len(ib) == 0 and ga.tolist() == [False] * 3 and len(gb) == 0
