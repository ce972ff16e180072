"""`iotape analyze tiering`: what an SSD tier or SSD cache would have done with a run.

iotape/cli.py registers the group:

    app.add_typer(analyze_cli.app, name="analyze")
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from iotape.analyzer import tiering
from iotape.analyzer.cli import Db, RunRef
from iotape.analyzer.store import opened
from iotape.errors import IotapeError

app = typer.Typer(
    help="Analyses of a stored run from the terminal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()


def _size(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    try:
        return tiering.parse_size(text)
    except IotapeError as e:
        raise IotapeError(f"{what}: {e}") from None


@app.command("tiering")
def tiering_cmd(
    run: RunRef,
    policy: Annotated[
        str, typer.Option("--policy", help="tiering, lru, s3fifo, oracle or belady.")
    ] = "tiering",
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help="Array preset: msa, compellent, fastvp, easytier (tiering and oracle "
            "default to msa).",
        ),
    ] = None,
    unit: Annotated[
        str | None, typer.Option("--unit", help="Unit (extent) size, e.g. 4M, 256M, 1G.")
    ] = None,
    capacity: Annotated[
        str | None,
        typer.Option("--capacity", help="Fast-tier size, e.g. 200G; default 10 % of footprint."),
    ] = None,
    sweep: Annotated[
        bool, typer.Option("--sweep", help="Also the hit ratio for a sweep of tier sizes.")
    ] = False,
    stats_interval: Annotated[
        float | None, typer.Option("--stats-interval", help="Seconds per heat statistic.")
    ] = None,
    migrate_interval: Annotated[
        float | None, typer.Option("--migrate-interval", help="Seconds between migrations.")
    ] = None,
    half_life: Annotated[
        float | None, typer.Option("--half-life", help="Heat half-life in seconds.")
    ] = None,
    budget: Annotated[
        str | None, typer.Option("--budget", help="Most bytes moved per migration, e.g. 1G.")
    ] = None,
    headroom: Annotated[
        float | None, typer.Option("--headroom", help="Share of the fast tier kept free.")
    ] = None,
    max_io: Annotated[
        str | None, typer.Option("--max-io", help="Larger I/Os are not counted, e.g. 64K.")
    ] = None,
    reads_only: Annotated[
        bool | None,
        typer.Option(
            "--reads-only/--reads-and-writes",
            help="Which I/Os count as heat or are cached (caches default to reads only).",
            show_default=False,
        ),
    ] = None,
    fast_run: Annotated[
        str | None, typer.Option("--fast-run", help="A replay on the fast device (latency).")
    ] = None,
    slow_run: Annotated[
        str | None, typer.Option("--slow-run", help="A replay on the slow device (latency).")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write the charts to OUT.html.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the whole result as JSON.")
    ] = False,
    db: Db = None,
) -> None:
    """Simulate an SSD tier or SSD read cache over a run: hit ratios by count and bytes,
    migrations, skew, a one-pass sweep of tier sizes, and projected latency from a fast
    and a slow run.

    Example: iotape analyze tiering nightly --policy tiering --preset msa --capacity 200G --sweep
    """
    if plot is not None and plot.suffix.lower() not in (".html", ".htm"):
        raise IotapeError(f"--plot {plot}: only .html is written (SVG charts, no dependency)")
    p = tiering.params_for(
        policy,
        preset,
        unit=_size(unit, "--unit"),
        capacity=_size(capacity, "--capacity"),
        stats_interval_s=stats_interval,
        migrate_interval_s=migrate_interval,
        half_life_s=half_life,
        budget_bytes=_size(budget, "--budget"),
        headroom=headroom,
        max_io_bytes=_size(max_io, "--max-io"),
        count_writes=None if reads_only is None else not reads_only,
    )
    with opened(db, create=False) as store:
        result = tiering.analyze_run(store, run, p, sweep, fast_run, slow_run)
    if plot is not None:
        from iotape.analyzer.tiering_plot import render_html

        _write_atomic(plot, render_html(result))
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    _print(result)
    if plot is not None:
        print(f"charts: {plot}")


def _write_atomic(path: Path, text: str) -> None:
    """Write beside the target and rename, so a failure leaves nothing half-written."""
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def _gib(b: int) -> str:
    return f"{b / (1 << 30):,.2f} GiB"


def _ns(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1e6:.3f} ms" if v >= 1e6 else f"{v / 1e3:.1f} µs"


def _print(r: dict) -> None:
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
        for name, label in (
            ("slow_only", f"slow device ({r['slow_run']['name']})"),
            ("projected", "projected (tiered)"),
            ("fast_only", f"fast device ({r['fast_run']['name']})"),
        ):
            m = r["latency"][name]
            t.add_row(label, _ns(m["p50_ns"]), _ns(m["p99_ns"]), _ns(m["mean_ns"]))
        out.print(t)
