"""A simulation's parameters: the policy, the fast tier's units and intervals, and
the byte sizes the command line and the API accept."""

from __future__ import annotations

import math
from dataclasses import dataclass

from base.errors import IotapeError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
POLICIES = ("tiering", "lru", "s3fifo", "oracle", "belady")


class TieringError(IotapeError):
    """Parameters that contradict each other or a run with nothing to simulate."""


@dataclass(frozen=True)
class Params:
    """One simulation. Sizes in bytes, times in seconds."""

    policy: str = "tiering"
    unit: int = 4 * MiB
    capacity: int | None = None  # fast tier; None: 10 % of the run's footprint
    stats_interval_s: float = 5.0  # heat is counted per interval
    migrate_interval_s: float = 5.0  # placement changes at these boundaries
    half_life_s: float | None = 60.0  # heat decays by half over this; None: no decay
    history_s: float | None = None  # instead of decay: heat summed over this window
    budget_bytes: int | None = None  # most bytes moved per migration; None: no limit
    headroom: float = 0.0  # share of the fast tier kept free
    max_io_bytes: int | None = None  # larger I/Os are not counted (Easy Tier: 64 KiB)
    count_writes: bool = True  # writes count as heat / are admitted by a cache
    report_interval_s: float | None = None  # timeline step; None: about 100 points
    preset: str | None = None

    def units(self, capacity: int) -> int:
        """Fast-tier capacity in whole units, less the headroom."""
        return int(capacity * (1.0 - self.headroom)) // self.unit


MAX_INTERVALS_PER_MIGRATION = 1e12


def check(p: Params) -> None:
    if p.unit < 512 or p.unit & (p.unit - 1):
        raise TieringError(f"unit {p.unit}: must be a power of two of at least 512 bytes")
    if p.capacity is not None and p.capacity < 0:
        raise TieringError(f"capacity {p.capacity}: must not be negative")
    if not 0.0 <= p.headroom < 1.0:
        raise TieringError(f"headroom {p.headroom}: must be in [0, 1)")
    if p.stats_interval_s <= 0 or p.migrate_interval_s <= 0:
        raise TieringError("statistics and migration intervals must be positive")
    if p.migrate_interval_s < p.stats_interval_s:
        raise TieringError(
            f"migration interval {p.migrate_interval_s} s is shorter than the statistics "
            f"interval {p.stats_interval_s} s"
        )
    # Past this the count of statistics intervals per migration is no number the
    # simulation can step through (1e7 / 1e-300 is infinite).
    if p.migrate_interval_s / p.stats_interval_s > MAX_INTERVALS_PER_MIGRATION:
        raise TieringError(
            f"migration interval {p.migrate_interval_s} s is more than "
            f"{MAX_INTERVALS_PER_MIGRATION:.0e} statistics intervals of {p.stats_interval_s} s"
        )
    if p.half_life_s is not None and p.half_life_s <= 0:
        raise TieringError(f"half-life {p.half_life_s} s: must be positive")
    if p.budget_bytes is not None and p.budget_bytes < 0:
        raise TieringError(f"budget {p.budget_bytes}: must not be negative")


_SIZE_SUFFIX = {"": 1, "b": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'4M', '4MiB', '256MB', '1g', '65536' -> bytes (binary multiples, as arrays mean them)."""
    s = text.strip().lower().replace("ib", "").removesuffix("b") if text else ""
    num = s.rstrip("kmgt")
    suffix = s[len(num) :]
    try:
        value = float(num)
    except ValueError:
        raise TieringError(f"size {text!r}: not a number with an optional K/M/G/T suffix") from None
    if suffix not in _SIZE_SUFFIX or value < 0 or not math.isfinite(value):
        raise TieringError(f"size {text!r}: not a number with an optional K/M/G/T suffix")
    return int(value * _SIZE_SUFFIX[suffix])
