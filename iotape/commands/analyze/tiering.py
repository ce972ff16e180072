"""`iotape analyze tiering`: what an SSD tier or SSD cache would have done with a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from analyzer.store.opener import opened
from analyzer.tiering import from_store
from analyzer.tiering import options as opt
from base.atomic import replacing
from base.errors import IotapeError
from iotape.cliopts import AsJson, Db, RunRef
from schemas.documents.api import TieringResponse

out = Console()


def tiering_cmd(
    run: RunRef,
    policy: opt.Policy = "tiering",
    preset: opt.Preset = None,
    unit: opt.Unit = None,
    capacity: opt.Capacity = None,
    sweep: Annotated[
        bool, typer.Option("--sweep", help="Also the hit ratio for a sweep of tier sizes.")
    ] = False,
    stats_interval: opt.StatsInterval = None,
    migrate_interval: opt.MigrateInterval = None,
    half_life: opt.HalfLife = None,
    budget: opt.Budget = None,
    headroom: opt.Headroom = None,
    max_io: opt.MaxIo = None,
    reads_only: opt.ReadsOnly = None,
    fast_run: Annotated[
        str | None,
        typer.Option("--fast-run", help="A replay on the fast device (RUN or RUN@DEVICE)."),
    ] = None,
    slow_run: Annotated[
        str | None,
        typer.Option("--slow-run", help="A replay on the slow device (RUN or RUN@DEVICE)."),
    ] = None,
    measured_run: Annotated[
        str | None,
        typer.Option(
            "--measured-run",
            help="A replay split by this placement (iotape replay split): measured vs projected.",
        ),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write the charts to OUT.html.")
    ] = None,
    as_json: AsJson = False,
    db: Db = None,
) -> None:
    """Simulate an SSD tier or SSD read cache over a run: hit ratios by count and bytes,
    migrations, skew, a one-pass sweep of tier sizes, and projected latency from a fast
    and a slow run.

    Example: iotape analyze tiering nightly --policy tiering --preset msa --capacity 200G --sweep
    """
    if plot is not None and plot.suffix.lower() not in (".html", ".htm"):
        raise IotapeError(f"--plot {plot}: only .html is written (SVG charts, no dependency)")
    p = opt.from_args(locals())
    with opened(db, create=False) as store:
        result = from_store.analyze_run(store, run, p, sweep, fast_run, slow_run, measured_run)
    if plot is not None:
        from analyzer.tiering.plot import render_html

        with replacing(plot) as tmp:
            Path(tmp).write_text(render_html(result), encoding="utf-8")
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    _print(result)
    if plot is not None:
        print(f"charts: {plot}")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def _signed(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} %"


def _gib(b: int) -> str:
    return f"{b / (1 << 30):,.2f} GiB"


def _ns(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1e6:.3f} ms" if v >= 1e6 else f"{v / 1e3:.1f} µs"


def _print(r: TieringResponse) -> None:
    p = r["params"]
    preset = f", preset {p['preset']}" if p["preset"] else ""
    out.print(
        f"run [b]{r['run']['name']}[/b]: policy {p['policy']}{preset}, unit {p['unit']:,} B, "
        f"fast tier {_gib(p['capacity'])} ({r['capacity_units']:,} units), {r['simulator']}"
    )
    if r["source"]:
        out.print(f"[dim]preset source: {r['source']}[/dim]")
    t = Table(title="fast-tier hit ratio")
    for c in ("", "all", "read", "write"):
        t.add_column(c, justify="right")
    for kind in ("count", "bytes"):
        h = r["hit_ratio"][kind]
        t.add_row(f"by {kind}", _pct(h["all"]), _pct(h["read"]), _pct(h["write"]))
    out.print(t)
    hr = r["hit_ratio"]
    out.print(
        f"migrated {_gib(hr['migrated_bytes'])} = {_pct(hr['migrated_share'])} of host I/O "
        f"({_gib(hr['bytes_total'])})"
    )
    s = r["skew"]
    out.print(
        f"skew: footprint {_gib(s['footprint_bytes'])}; 80 % of I/O from "
        f"{_gib(s['capacity_for_80pct_io'])}, 100 % from {_gib(s['capacity_for_100pct_io'])}"
    )
    if "sweep" in r:
        how = "one pass" if r["sweep"]["one_pass"] else "one run per size"
        t = Table(title=f"sweep of tier sizes ({how})")
        for c in ("fast tier", "units", "hit ratio (count)", "hit ratio (bytes)"):
            t.add_column(c, justify="right")
        for row in r["sweep"]["points"]:
            t.add_row(
                _gib(row["capacity_bytes"]),
                f"{row['units']:,}",
                _pct(row["hit_ratio_count"]),
                _pct(row["hit_ratio_bytes"]),
            )
        out.print(t)
    if "latency" in r:
        t = Table(title="projected device latency")
        for c in ("", "p50", "p99", "mean"):
            t.add_column(c, justify="right")
        lat = r["latency"]
        for m, label in (
            (lat["slow_only"], f"slow device ({r['slow_run']['name']})"),
            (lat["projected"], "projected (tiered)"),
            (lat["fast_only"], f"fast device ({r['fast_run']['name']})"),
        ):
            t.add_row(label, _ns(m["p50_ns"]), _ns(m["p99_ns"]), _ns(m["mean_ns"]))
        if "measured" in r["latency"]:
            m, e = r["latency"]["measured"], r["latency"]["error"]
            t.add_row(
                f"measured ({r['measured_run']['name']})",
                _ns(m["p50_ns"]),
                _ns(m["p99_ns"]),
                _ns(m["mean_ns"]),
            )
            t.add_row("projection error", *(_signed(e[k]) for k in ("p50", "p99", "mean")))
        out.print(t)
