"""The engine's tiering policy (workload/src/tierpolicy.c, through its test driver
build/iotape-tier-policy) decides as the offline simulator does
(analyzer.tiering.migration.tiering): one access sequence, the same hit per access
and the same promotions and demotions per migration."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from analyzer.tiering.migration import tiering
from analyzer.tiering.params import Params

DRIVER = Path(__file__).resolve().parents[2] / "workload" / "build" / "iotape-tier-policy"
UNIT = 4 << 20


def _sequence(seed: int, n: int, n_units: int) -> tuple[np.ndarray, np.ndarray]:
    """Zipf-like unit popularity that drifts: the hot set moves halfway, so
    migrations both promote and demote."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, 60_000_000_000, n)).astype(np.int64)
    u = (rng.zipf(1.3, n) - 1) % n_units
    u[n // 2 :] = (u[n // 2 :] + n_units // 3) % n_units
    return t, u.astype(np.int32)


def _c_policy(p: Params, k: int, t: np.ndarray, u: np.ndarray, n_units: int) -> tuple:
    budget = -1 if p.budget_bytes is None else p.budget_bytes // p.unit
    argv = [str(DRIVER), str(k), str(budget), repr(p.stats_interval_s),
            repr(p.migrate_interval_s), repr(p.half_life_s or 0), str(n_units), "0"]  # fmt: skip
    feed = "".join(f"{a} {b}\n" for a, b in zip(t.tolist(), u.tolist(), strict=True))
    out = subprocess.run(argv, input=feed, capture_output=True, text=True, check=True).stdout
    hits = [line == "h 1" for line in out.splitlines() if line.startswith("h ")]
    moves = [tuple(map(int, line.split()[1:])) for line in out.splitlines() if line[0] == "m"]
    return np.array(hits), moves


@pytest.mark.parametrize(
    ("k", "budget_units", "half_life", "stats", "migrate", "seed"),
    [
        (8, None, 60.0, 5.0, 5.0, 1),  # the msa preset, no budget
        (8, 3, 60.0, 5.0, 5.0, 2),  # a budget smaller than a full turnover
        (20, 5, 10.0, 1.0, 3.0, 3),  # several statistics intervals per migration
        (5, 2, None, 0.5, 0.5, 4),  # no decay: counts only grow
        (50, 7, 0.1, 2.0, 2.0, 5),  # a half-life far below the interval
    ],
)
def test_c_policy_equals_simulator(
    k: int, budget_units: int | None, half_life: float | None, stats: float, migrate: float,
    seed: int,
) -> None:  # fmt: skip
    n_units = 200
    t, u = _sequence(seed, 20_000, n_units)
    budget = None if budget_units is None else budget_units * UNIT
    p = Params(unit=UNIT, stats_interval_s=stats, migrate_interval_s=migrate,
               half_life_s=half_life, budget_bytes=budget)  # fmt: skip
    hit, moves = tiering(p, t, u, np.ones(len(u), dtype=bool), n_units, k, 0)
    c_hit, c_moves = _c_policy(p, k, t, u, n_units)
    assert [tuple(m) for m in moves] == c_moves
    assert np.array_equal(hit, c_hit)
    assert sum(m.promoted for m in moves) > k  # the hot set moved: demotions were decided
    assert any(m.demoted for m in moves)
    if budget_units is not None:
        assert all(m.promoted + m.demoted <= budget_units for m in moves)
