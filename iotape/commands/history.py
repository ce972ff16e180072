"""`iotape history`: a device model across firmware versions, with change points."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from analyzer.analyses import comparison
from analyzer.analyses import history as hist
from analyzer.analyses.filters import FilterArgs
from analyzer.store.opener import opened
from iotape.cliopts import AsJson, Db
from iotape.commands.analysis_options import (
    End,
    MaxBytes,
    MinBytes,
    Op,
    Start,
    Stream,
    dump,
    ns,
    out,
)


def history(
    model: Annotated[str, typer.Option("--model", help="The device model, as the runs list it.")],
    tag: Annotated[
        str | None,
        typer.Option(
            "--tag",
            help="Take the version from this tag (e.g. firmware), not the devices' firmware.",
        ),
    ] = None,
    order: Annotated[
        str, typer.Option("--order", help="version (natural sort) or time (first run).")
    ] = "version",
    metric: Annotated[
        str, typer.Option("--metric", help="Metrics to find change points in, comma-separated.")
    ] = ",".join(hist.DEFAULT_CHANGE_METRICS),
    op: Op = None,
    stream: Stream = None,
    min_bytes: MinBytes = None,
    max_bytes: MaxBytes = None,
    start: Start = None,
    end: End = None,
    as_json: AsJson = False,
    db: Db = None,
) -> None:
    """A device model across firmware versions: per op and stream, each version's
    percentiles, mean and IOPS with confidence intervals (repeated runs of a version
    pooled), and the change points E-Divisive finds, each naming the first version
    after the change.

    Example: iotape history --model "Samsung PM9A3" --tag firmware --metric p99,iops
    """
    metrics = comparison.parse_metrics(metric)
    args = FilterArgs(op, stream, None, min_bytes, max_bytes, start, end)
    with opened(db, create=False) as store:
        res = hist.history(store, model, tag, args, order, change_metrics=metrics)
    if as_json:
        dump(res)
        return
    conf = f"{100 * res['confidence']:.0f} %"
    out.print(f"model [b]{res['model']}[/b]: {len(res['versions'])} versions (from "
              f"{res['version_from']}, ordered by {res['order']}); intervals {conf}")  # fmt: skip
    for s in res["skipped"]:
        out.print(f"[dim]skipped {s['run']}: {s['why']}[/dim]")
    for g in res["groups"]:
        marks: dict[str, list[str]] = {}
        for m, cps in g["change_points"].items():
            for cp in cps:
                marks.setdefault(cp["version"], []).append(f"{m} {cp['change_pct']:+.0f} %")
        t = Table(title=f"{g['op_name']} / {g['stream_name']}", title_justify="left")
        for col in ("version", "runs", "requests", "p50", "p99", "mean", "IOPS", "change"):
            t.add_column(col, justify="left" if col in ("version", "change") else "right")
        for p in g["points"]:

            def ci(m: str, p=p) -> str:
                x = p[m]
                if m == "iops":
                    return f"{x['value']:,.1f} [{x['ci_low']:,.1f}, {x['ci_high']:,.1f}]"
                return f"{ns(x['value'])} [{ns(x['ci_low'])}, {ns(x['ci_high'])}]"

            t.add_row(p["version"], str(len(p["runs"])), f"{p['count']:,}", ci("p50"), ci("p99"),
                      ci("mean"), ci("iops"), "; ".join(marks.get(p["version"], [])))  # fmt: skip
        out.print(t)
    n = sum(len(c) for g in res["groups"] for c in g["change_points"].values())
    out.print(f"{n} change point(s): {res['method']['change_points']}")
