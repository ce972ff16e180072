"""`iotape compare`: a CI gate over the store. Exit 0 when no candidate regressed, 1 when
one did (beyond the noise, the threshold and the minimum effect), 2 on bad input, runs
that do not exist, or runs of different workloads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer
from rich.table import Table

from analyzer.analyses import comparison, junit
from analyzer.analyses.filters import FilterArgs
from analyzer.store.opener import opened
from iotape.cliopts import AsJson, Db
from iotape.commands.analysis_options import (
    Device,
    End,
    Fmt,
    Format,
    MaxBytes,
    MinBytes,
    Mode,
    ModeOpt,
    Op,
    Start,
    Stream,
    delta,
    dump,
    fmt_choice,
    out,
    val,
)


def compare(
    base: Annotated[str, typer.Argument(help="The base run (the last good one).", metavar="BASE")],
    candidates: Annotated[
        list[str], typer.Argument(help="One or more candidate runs.", metavar="CANDIDATE...")
    ],
    threshold: Annotated[
        str, typer.Option("--threshold", help="Smallest change that fails, e.g. 5%.")
    ] = "5%",
    min_effect: Annotated[
        str,
        typer.Option(
            "--min-effect",
            help="Smallest absolute change that fails: a time for latency, a rate for IOPS, "
            "e.g. 50us,10iops; 0 for none.",
        ),
    ] = comparison.DEFAULT_MIN_EFFECT,
    metric: Annotated[
        str,
        typer.Option(
            "--metric",
            help=f"Metrics that fail the gate, comma-separated: {', '.join(comparison.METRICS)}.",
        ),
    ] = ",".join(comparison.DEFAULT_METRICS),
    confidence: Annotated[
        float, typer.Option("--confidence", min=0.5, max=0.999, help="Of the intervals.")
    ] = 0.95,
    mode: ModeOpt = Mode.performance,
    op: Op = None,
    stream: Stream = None,
    device: Device = None,
    min_bytes: MinBytes = None,
    max_bytes: MaxBytes = None,
    start: Start = None,
    end: End = None,
    as_json: AsJson = False,
    fmt: Fmt = Format.table,
    db: Db = None,
) -> None:
    """Compare candidate runs with a base run, per device model, op and stream: did a
    candidate get slower beyond the noise (a bootstrap confidence interval that excludes
    no change), the relative threshold and the absolute minimum effect? Each verdict
    names the one that decided it; each run's Jetstress verdict is shown too.

    Exit status: 0 no regression, 1 a regression, 2 bad input or runs of different
    workloads (another source trace, or the same trace scaled differently).

    Example: iotape compare fw-1.4 fw-1.5 --threshold 5% --min-effect 10us --format junit
    """
    fmt = fmt_choice(as_json, fmt, tuple(Format))
    pct = comparison.parse_threshold(threshold)
    min_ns, min_iops = comparison.parse_min_effect(min_effect)
    metrics = comparison.parse_metrics(metric)
    args = FilterArgs(op, stream, device, min_bytes, max_bytes, start, end)
    with opened(db, create=False) as store:
        res = comparison.compare_many(
            store, base, candidates, args, pct, confidence, metrics, mode.value,
            min_effect_ns=min_ns, min_effect_iops=min_iops,
        )  # fmt: skip
    if fmt is Format.json:
        dump(res)
    elif fmt is Format.junit:
        print(junit.comparison(res))
    else:
        _print_comparison(res)
    if not res["comparable"]:
        raise typer.Exit(2)
    if res["regression"]:
        raise typer.Exit(1)


_LEFT = ("op / stream", "flag", "decided by")


def _print_comparison(res: Mapping[str, Any]) -> None:
    conf = f"{100 * res['confidence']:.0f} %"
    b = res["base"]
    out.print(
        f"base [b]{b['name']}[/b] ({b['id']}), Jetstress {b['verdict']['result'].upper()}; "
        f"gate: {', '.join(res['metrics'])} worse by over {res['threshold_pct']:g} % and by over "
        f"{val(res['min_effect_ns'], 'ns')} ({val(res['min_effect_iops'], 'IO/s')} IO/s for "
        f"IOPS), with the {conf} interval excluding no change"
    )
    for c in res["candidates"]:
        word = "REGRESSION" if c["regression"] else "no regression"
        if not c["comparable"]:
            word = "NOT COMPARABLE"
        out.print(
            f"\n[b]{c['candidate']['name']}[/b] ({c['candidate']['id']}): {word}; Jetstress "
            f"{c['verdict']['result'].upper()}; workload: {c['workload']}; paired by "
            f"{c['paired_by']}"
        )
        for g in c["groups"]:
            fb, fc = (", ".join(g[k]) or "-" for k in ("base_firmware", "candidate_firmware"))
            fw = f"{fb} -> {fc}"
            t = Table(title=f"model {g['model']}: firmware {fw}", title_justify="left")
            for col in ("op / stream", "metric", "base", "candidate", "change", "change %",
                        f"{conf} CI of the change", "flag", "decided by"):  # fmt: skip
                t.add_column(col, justify="left" if col in _LEFT else "right")
            for r in g["rows"]:
                name = f"{r['op_name']} / {r['stream_name']}"
                for it in r["metrics"]:
                    if it["level"] not in res["metrics"]:
                        continue
                    ci = "-"
                    if it["ci_low"] is not None:
                        lo, hi = (delta(it[k], it["unit"]) for k in ("ci_low", "ci_high"))
                        ci = f"[{lo}, {hi}]"
                    flag = "REGRESSION" if it["regression"] else (
                        "improvement" if it["improvement"] else "")  # fmt: skip
                    pct = "-" if it["delta_pct"] is None else f"{it['delta_pct']:+.1f}"
                    t.add_row(name, it["level"], val(it["base"], it["unit"]),
                              val(it["candidate"], it["unit"]), delta(it["delta"], it["unit"]),
                              pct, ci, flag, comparison.reason(it, val))  # fmt: skip
                    name = ""
            out.print(t)
    regs = comparison.regressions(res)
    if regs:
        out.print("\n[b]regressions[/b]:")
        for x in regs:
            out.print(
                f"  {x['run']}: {x['model']} {x['op']}/{x['stream']} {x['level']} "
                f"{val(x['base'], x['unit'])} -> {val(x['candidate'], x['unit'])} "
                f"({x['delta_pct']:+.1f} %, {conf} CI [{delta(x['ci_low'], x['unit'])}, "
                f"{delta(x['ci_high'], x['unit'])}]; {comparison.reason(x, val)})"
            )
    for c in res["candidates"]:
        if not c["comparable"]:
            out.print(f"\n{c['candidate']['name']}: not judged: {c['workload']}")
