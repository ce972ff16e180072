"""`iotape replay tiering-check`: the tiering projection checked on two real devices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from analyzer.tiering import options as opt
from iotape.cliopts import AsJson, Force
from iotape.commands.replay.options import DestroyDataOn, err


def tiering_check(
    trace: Annotated[Path, typer.Argument(help="Trace file (.iot).", show_default=False)],
    fast: Annotated[
        str, typer.Option("--fast", help="The fast device (SSD tier).", show_default=False)
    ],
    slow: Annotated[
        str, typer.Option("--slow", help="The slow device (HDD tier).", show_default=False)
    ],
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="Directory for the replays.", show_default=False),
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
    destroy_data_on: DestroyDataOn = None,
    force: Force = False,
    as_json: AsJson = False,
) -> None:
    """Check a tiering projection on two real devices: replay the trace on the slow one,
    on the fast one, and split by the simulated placement across both (recorded), then
    compare the measured latency with the projection.

    Example: iotape replay tiering-check run.iot --fast /dev/nvme1n1 --slow /dev/sdc -o chk/
    --capacity 64G
    """
    from replayer.run import tiering_check as tc

    p = opt.from_args(locals())
    with err.status("tiering check") as status:
        res = tc.check(
            trace, fast, slow, p, output, destroy_data_on, force, say=lambda s: status.update(s)
        )
    if as_json:
        print(json.dumps(res, indent=2, default=str))
        return
    _print_check(res, fast, slow, output)


def _print_check(res: dict[str, Any], fast: str, slow: str, output: Path) -> None:
    lat = res["latency"]
    t = Table("device latency", "p50 µs", "p99 µs", "mean µs")
    for key, label in (
        ("slow_only", f"slow ({slow})"),
        ("projected", "projected"),
        ("measured", "measured (split replay)"),
        ("fast_only", f"fast ({fast})"),
    ):
        m = lat[key]
        t.add_row(label, *(f"{m[k] / 1e3:.1f}" for k in ("p50_ns", "p99_ns", "mean_ns")))
    e = lat["error"]
    t.add_row("projection error", *(f"{100 * e[k]:+.1f} %" for k in ("p50", "p99", "mean")))
    Console().print(t)
    print(f"fast share of requests: {100 * res['split']['fast_share_of_reads_writes']:.1f} %")
    print(f"details: {output / 'result.json'}")
