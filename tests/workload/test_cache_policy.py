"""The engine's read cache (workload/src/cachepolicy.c, through its test driver
build/iotape-cache-policy, admitting each miss at once) decides as the offline
simulator's LRU (analyzer.tiering.native.lru_reference and, for a run's events, the
`lru` policy with count_writes=False that `iotape lab hybrid` predicts with): the
same hit, admission and eviction per read, the same unit evicted. What differs in
the engine is only when a miss is admitted: when its copy is done (the lab's
report gives the copies' times from the fill lines)."""

from __future__ import annotations

import subprocess
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from analyzer.tiering.events import Events
from analyzer.tiering.native import lru_reference
from analyzer.tiering.params import Params
from analyzer.tiering.simulate import placement

DRIVER = Path(__file__).resolve().parents[2] / "workload" / "build" / "iotape-cache-policy"


def _drifting(seed: int, n: int, n_units: int) -> np.ndarray:
    """Zipf-like popularity whose hot set moves halfway: hits, misses and evictions."""
    rng = np.random.default_rng(seed)
    u = (rng.zipf(1.2, n) - 1) % n_units
    u[n // 2 :] = (u[n // 2 :] + n_units // 3) % n_units
    return u.astype(np.int32)


def _c_cache(ids: np.ndarray, n_units: int, k: int) -> tuple[np.ndarray, list[int]]:
    feed = "".join(f"{u}\n" for u in ids.tolist())
    out = subprocess.run(
        [str(DRIVER), str(n_units), str(k)], input=feed, capture_output=True, text=True,
        check=True,
    ).stdout.split("\n")  # fmt: skip
    rows = [line.split() for line in out if line]
    return np.array([int(f) for f, _ in rows], dtype=np.uint8), [int(v) for _, v in rows]


def _victims(ids: np.ndarray, k: int) -> list[int]:
    """The unit an LRU of k evicts at each read (-1: none), as lru_reference orders them."""
    cached: OrderedDict[int, None] = OrderedDict()
    out = []
    for u in ids.tolist():
        if u in cached:
            cached.move_to_end(u)
            out.append(-1)
            continue
        out.append(cached.popitem(last=False)[0] if len(cached) == k else -1)
        cached[u] = None
    return out


@pytest.mark.parametrize(("k", "n_units", "seed"), [(1, 10, 1), (8, 200, 2), (50, 200, 3),
                                                    (199, 200, 4), (400, 200, 5)])  # fmt: skip
def test_c_cache_equals_simulator_lru(k: int, n_units: int, seed: int) -> None:
    ids = _drifting(seed, 20_000, n_units)
    flags, victims = _c_cache(ids, n_units, k)
    ref = lru_reference(ids, k)
    assert np.array_equal(flags, ref), f"first difference at {np.flatnonzero(flags != ref)[:1]}"
    assert victims == _victims(ids, k)
    assert (flags == 1).any() and ((flags & 4).any() or k >= n_units)


def test_c_cache_equals_the_lab_prediction_policy() -> None:
    """Reads and writes of one device: writes neither hit nor admit (count_writes=False),
    and a read is a hit exactly where the driver, fed only the reads, says so."""
    rng = np.random.default_rng(7)
    n, unit, n_units, k = 5_000, 1 << 20, 64, 12
    units = _drifting(8, n, n_units).astype(np.int64)
    ev = Events(
        t_ns=np.arange(n, dtype=np.int64) * 1000, dev=np.zeros(n, dtype=np.int64),
        offset=units * unit + 8192, nbytes=np.full(n, 32768, dtype=np.int64),
        op=(rng.random(n) < 0.4).astype(np.int8), lat_ns=np.full(n, 1000, dtype=np.int64),
    )  # fmt: skip
    p = Params(policy="lru", unit=unit, capacity=k * unit, count_writes=False)
    hit, _ = placement(ev, p)
    reads = ev.op == 0
    # The simulator numbers units densely in offset order; the driver takes them as given.
    dense = np.unique(units, return_inverse=True)[1]
    flags, _ = _c_cache(dense[reads], n_units, k)
    assert np.array_equal(hit[reads], flags == 1)
