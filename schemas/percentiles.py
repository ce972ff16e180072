"""Latency percentiles: each level's name, the one table (contracts.toml [[percentile]]).

`LEVELS` pairs a level with its name (`p99.9`, the API's JSON keys); `IDENT_LEVELS`
with the same name as an identifier (`p999`), for SQL columns and `p999_ms`-style keys.
"""

from __future__ import annotations

from schemas import contracts


def ident(name: str) -> str:
    """A percentile's name as an identifier: p99.9 -> p999."""
    return name.replace(".", "")


LEVELS: tuple[tuple[float, str], ...] = tuple(
    (float(p["level"]), str(p["name"])) for p in contracts()["percentile"]
)
IDENT_LEVELS: tuple[tuple[float, str], ...] = tuple((q, ident(n)) for q, n in LEVELS)
NAMES: tuple[str, ...] = tuple(n for _, n in LEVELS)
