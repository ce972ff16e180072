"""`iotape replay split`: a trace split by a simulated tier's placement into a fast
and a slow replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from analyzer.tiering import options as opt
from analyzer.tiering.params import Params
from iotape.cliopts import AsJson, Force


def split(
    trace: Annotated[Path, typer.Argument(help="Trace file (.iot).", show_default=False)],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Split trace to write.", show_default=False)
    ],
    policy: opt.Policy = "lru",
    preset: opt.Preset = None,
    unit: opt.Unit = None,
    capacity: opt.Capacity = None,
    stats_interval: opt.StatsInterval = None,
    migrate_interval: opt.MigrateInterval = None,
    half_life: opt.HalfLife = None,
    budget: opt.Budget = None,
    headroom: opt.Headroom = None,
    max_io: opt.MaxIo = None,
    reads_only: opt.ReadsOnly = None,
    force: Force = False,
    as_json: AsJson = False,
) -> None:
    """Split a trace across devices `fast` and `slow` by a tiering or cache simulation's
    placement, to replay it as the hybrid array would have served it.

    Example: iotape replay split run.iot -o split.iot --policy lru --unit 4K --capacity 64M
    """
    from replayer.plan import split as splitmod

    p = opt.from_args(locals())
    res = splitmod.split(trace, output, p, force)
    if as_json:
        print(json.dumps(res, indent=2, default=str))
        return
    _print_split(res, output, p)


def _print_split(res: dict[str, Any], output: Path, p: Params) -> None:
    share = res["fast_share_of_reads_writes"]
    Console().print(
        f"{output}: {res['fast_requests']:,} requests on `fast`, {res['slow_requests']:,} on "
        f"`slow` ({100 * share:.1f} % of reads and writes fast); policy {p.policy}, unit "
        f"{p.unit:,} B, fast tier {res['params']['capacity']:,} B\n"
        f"next: iotape replay plan {output} -o JOBDIR "
        + " ".join(f"--target {d}=DEV" for d in res["devices"])
    )
