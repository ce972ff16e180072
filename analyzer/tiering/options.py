"""The tiering simulation's command-line options, shared by `iotape analyze tiering`
and `iotape replay split` so both describe a policy the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from analyzer.tiering.params import Params, parse_size
from analyzer.tiering.presets import params_for
from base.errors import IotapeError

Policy = Annotated[str, typer.Option("--policy", help="tiering, lru, s3fifo, oracle or belady.")]
Preset = Annotated[
    str | None,
    typer.Option(
        "--preset",
        help="Array preset: msa, compellent, fastvp, easytier (tiering and oracle default to msa).",
    ),
]
Unit = Annotated[str | None, typer.Option("--unit", help="Unit (extent) size, e.g. 4M, 256M, 1G.")]
Capacity = Annotated[
    str | None,
    typer.Option("--capacity", help="Fast-tier size, e.g. 200G; default 10 % of footprint."),
]
StatsInterval = Annotated[
    float | None, typer.Option("--stats-interval", help="Seconds per heat statistic.")
]
MigrateInterval = Annotated[
    float | None, typer.Option("--migrate-interval", help="Seconds between migrations.")
]
HalfLife = Annotated[float | None, typer.Option("--half-life", help="Heat half-life in seconds.")]
Budget = Annotated[
    str | None, typer.Option("--budget", help="Most bytes moved per migration, e.g. 1G.")
]
Headroom = Annotated[
    float | None, typer.Option("--headroom", help="Share of the fast tier kept free.")
]
MaxIo = Annotated[
    str | None, typer.Option("--max-io", help="Larger I/Os are not counted, e.g. 64K.")
]
ReadsOnly = Annotated[
    bool | None,
    typer.Option(
        "--reads-only/--reads-and-writes",
        help="Which I/Os count as heat or are cached (caches default to reads only).",
        show_default=False,
    ),
]


def size(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_size(text)
    except IotapeError as e:
        raise IotapeError(f"{what}: {e}") from None


def params(
    policy: str,
    preset: str | None,
    unit: str | None,
    capacity: str | None,
    stats_interval: float | None,
    migrate_interval: float | None,
    half_life: float | None,
    budget: str | None,
    headroom: float | None,
    max_io: str | None,
    reads_only: bool | None,
) -> Params:
    """The options as simulation parameters (None: the policy's or preset's default)."""
    return params_for(
        policy,
        preset,
        unit=size(unit, "--unit"),
        capacity=size(capacity, "--capacity"),
        stats_interval_s=stats_interval,
        migrate_interval_s=migrate_interval,
        half_life_s=half_life,
        budget_bytes=size(budget, "--budget"),
        headroom=headroom,
        max_io_bytes=size(max_io, "--max-io"),
        count_writes=None if reads_only is None else not reads_only,
    )


NAMES = (
    "policy",
    "preset",
    "unit",
    "capacity",
    "stats_interval",
    "migrate_interval",
    "half_life",
    "budget",
    "headroom",
    "max_io",
    "reads_only",
)


def from_args(args: Mapping[str, Any]) -> Params:
    """The parameters from a command's arguments, named as the options above
    (a command passes its `locals()`)."""
    return params(**{k: args[k] for k in NAMES})
