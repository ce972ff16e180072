"""`iotape analyze latency|verdict`, `iotape compare` and `iotape history`: the server's
analyses from the terminal, over the same library functions the API calls.

iotape/cli.py registers them:

    app.command("compare")(regress_cli.compare)
    app.command("history")(regress_cli.history)

and analyze_cli adds `latency` and `verdict` to the `analyze` group.

`iotape compare` is a CI gate: exit 0 when no candidate regressed, 1 when one did
(beyond the noise and the threshold), 2 on bad input, runs that do not exist, or
runs of different workloads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, cast

import typer
from rich.console import Console
from rich.table import Table

from analyzer.analyses import comparison, junit
from analyzer.analyses import core as analyses
from analyzer.analyses import history as hist
from analyzer.analyses import verdict as jetstress
from analyzer.analyses.filters import FilterArgs
from analyzer.store.cli import RunRef
from analyzer.store.interface import opened
from base.errors import IotapeError
from iotape.cliopts import AsJson, Db
from schemas.documents.api import LatencyResponse, VerdictResponse
from schemas.percentiles import NAMES

out = Console(width=140)


class Format(StrEnum):
    table = "table"
    json = "json"
    junit = "junit"


class Mode(StrEnum):
    performance = "performance"
    stress = "stress"


Op = Annotated[
    str | None, typer.Option("--op", help="Only this op: read, write, flush, … or a number.")
]
Stream = Annotated[
    str | None, typer.Option("--stream", help="Only this stream: db-read, log-write, a label.")
]
Device = Annotated[
    str | None, typer.Option("--device", help="Only this device: its name (sda) or MAJ:MIN.")
]
MinBytes = Annotated[int | None, typer.Option("--min-bytes", min=0, help="Smallest request.")]
MaxBytes = Annotated[int | None, typer.Option("--max-bytes", min=0, help="Largest request.")]
Start = Annotated[
    float | None, typer.Option("--start", min=0, help="From this many seconds into the run.")
]
End = Annotated[
    float | None, typer.Option("--end", min=0, help="Up to this many seconds into the run.")
]
Fmt = Annotated[
    Format, typer.Option("--format", help="table, json, or junit (XML for a CI system).")
]
ModeOpt = Annotated[Mode, typer.Option("--mode", help="Jetstress thresholds: which run type.")]


def _fmt(as_json: bool, fmt: Format, allowed: tuple[Format, ...]) -> Format:
    if as_json:
        fmt = Format.json
    if fmt not in allowed:
        raise IotapeError(f"--format {fmt.value}: one of {', '.join(a.value for a in allowed)}")
    return fmt


def _dump(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def _ns(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:,.3f} ms"
    return f"{v / 1e3:,.1f} µs"


def _val(v: float | None, unit: str) -> str:
    return "-" if v is None else (f"{v:,.1f}" if unit == "IO/s" else _ns(v))


def _delta(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "IO/s":
        return f"{v:+,.1f}"
    return ("+" if v >= 0 else "-") + _ns(abs(v))


# ------------------------------------------------------------------ analyze latency


def latency(
    run: RunRef,
    op: Op = None,
    stream: Stream = None,
    device: Device = None,
    min_bytes: MinBytes = None,
    max_bytes: MaxBytes = None,
    start: Start = None,
    end: End = None,
    exact: Annotated[
        bool, typer.Option("--exact", help="Exact order statistics, not histogram percentiles.")
    ] = False,
    as_json: AsJson = False,
    fmt: Fmt = Format.table,
    db: Db = None,
) -> None:
    """Device and queue time of a run, overall and per op and stream: count, mean,
    percentiles and maximum (what GET /runs/RUN/latency answers).

    Example: iotape analyze latency nightly-42 --stream log-write --exact
    """
    fmt = _fmt(as_json, fmt, (Format.table, Format.json))
    args = FilterArgs(op, stream, device, min_bytes, max_bytes, start, end)
    with opened(db, create=False) as store:
        r = analyses.find_run(store, run)
        f = analyses.resolve_filter(store, r["id"], args)
        res: LatencyResponse = {
            "run": {"id": r["id"], "name": r["name"]},
            "filter": analyses.describe_filter(f),
            **analyses.latency(store, r["id"], f, exact=exact),
        }
    if fmt is Format.json:
        _dump(res)
        return
    for m, title in ((res["device"], "device time"), (res["queue"], "queue time")):
        t = Table(title=f"{res['run']['name']}: {title} ({res['method']})", title_justify="left")
        for c in ("op / stream", "count", "mean", *NAMES, "max"):
            t.add_column(c, justify="left" if c == "op / stream" else "right")
        for name, g in [("all", m["all"])] + [
            (f"{g['op_name']} / {g['stream_name']}", g) for g in m["groups"]
        ]:
            if not g["count"]:
                t.add_row(name, "0", *["-"] * 7)
                continue
            p = cast(dict[str, float], g["percentiles"])
            levels = (*NAMES, "max")
            t.add_row(name, f"{g['count']:,}", _ns(g["mean_ns"]), *(_ns(p[k]) for k in levels))
        out.print(t)


# ------------------------------------------------------------------ analyze verdict


def verdict(
    run: RunRef,
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
    """Jetstress-style verdict of a run: database read and log write latency (average and
    maximum) against the thresholds of a performance or stress run. Exits 1 when it fails.

    Example: iotape analyze verdict nightly-42 --mode stress --format junit > verdict.xml
    """
    fmt = _fmt(as_json, fmt, tuple(Format))
    args = FilterArgs(op, stream, device, min_bytes, max_bytes, start, end)
    with opened(db, create=False) as store:
        r = analyses.find_run(store, run)
        f = analyses.resolve_filter(store, r["id"], args)
        v = jetstress.verdict(store, r["id"], f, mode.value)
    res: VerdictResponse = {
        "run": {"id": r["id"], "name": r["name"]},
        "filter": analyses.describe_filter(f),
        **v,
    }
    if fmt is Format.json:
        _dump(res)
    elif fmt is Format.junit:
        print(junit.verdict(r, v))
    else:
        out.print(f"run [b]{r['name']}[/b]: {v['result'].upper()} ({v['mode']} thresholds)"
                  + (f" — {v['why']}" if v["why"] else ""))  # fmt: skip
        t = Table(show_header=True)
        for c in ("check", "value", "limit", "requests", "result"):
            t.add_column(c, justify="left" if c in ("check", "result") else "right")
        for ch in v["checks"]:
            res_ = "no data" if ch["pass"] is None else ("pass" if ch["pass"] else "FAIL")
            val = "-" if ch["value"] is None else f"{ch['value']:.3f}"
            t.add_row(ch["check"], val, f"{ch['limit']:g}", f"{ch.get('requests', 0):,}", res_)
        out.print(t)
        for d in v["per_device"]:
            out.print(f"  device {d['name']}: {d['result']}")
    if v["result"] == "fail":
        raise typer.Exit(1)


# ------------------------------------------------------------------ compare


def compare(
    base: Annotated[str, typer.Argument(help="The base run (the last good one).", metavar="BASE")],
    candidates: Annotated[
        list[str], typer.Argument(help="One or more candidate runs.", metavar="CANDIDATE...")
    ],
    threshold: Annotated[
        str, typer.Option("--threshold", help="Smallest change that fails, e.g. 5%.")
    ] = "5%",
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
    no change) and the threshold? Each run's Jetstress verdict is shown too.

    Exit status: 0 no regression, 1 a regression, 2 bad input or runs of different
    workloads (another source trace, or the same trace scaled differently).

    Example: iotape compare fw-1.4 fw-1.5 --threshold 5% --metric p99,mean,iops --format junit
    """
    fmt = _fmt(as_json, fmt, tuple(Format))
    pct = comparison.parse_threshold(threshold)
    metrics = comparison.parse_metrics(metric)
    args = FilterArgs(op, stream, device, min_bytes, max_bytes, start, end)
    with opened(db, create=False) as store:
        res = comparison.compare_many(
            store, base, candidates, args, pct, confidence, metrics, mode.value
        )
    if fmt is Format.json:
        _dump(res)
    elif fmt is Format.junit:
        print(junit.comparison(res))
    else:
        _print_comparison(res)
    if not res["comparable"]:
        raise typer.Exit(2)
    if res["regression"]:
        raise typer.Exit(1)


def _print_comparison(res: Mapping[str, Any]) -> None:
    conf = f"{100 * res['confidence']:.0f} %"
    b = res["base"]
    out.print(
        f"base [b]{b['name']}[/b] ({b['id']}), Jetstress {b['verdict']['result'].upper()}; "
        f"gate: {', '.join(res['metrics'])} worse by over {res['threshold_pct']:g} % with the "
        f"{conf} interval excluding no change"
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
                        f"{conf} CI of the change", "flag"):  # fmt: skip
                t.add_column(col, justify="left" if col in ("op / stream", "flag") else "right")
            for r in g["rows"]:
                name = f"{r['op_name']} / {r['stream_name']}"
                for it in r["metrics"]:
                    if it["level"] not in res["metrics"]:
                        continue
                    ci = "-"
                    if it["ci_low"] is not None:
                        lo, hi = (_delta(it[k], it["unit"]) for k in ("ci_low", "ci_high"))
                        ci = f"[{lo}, {hi}]"
                    flag = "REGRESSION" if it["regression"] else (
                        "improvement" if it["improvement"] else "")  # fmt: skip
                    pct = "-" if it["delta_pct"] is None else f"{it['delta_pct']:+.1f}"
                    t.add_row(name, it["level"], _val(it["base"], it["unit"]),
                              _val(it["candidate"], it["unit"]), _delta(it["delta"], it["unit"]),
                              pct, ci, flag)  # fmt: skip
                    name = ""
            out.print(t)
    regs = comparison.regressions(res)
    if regs:
        out.print("\n[b]regressions[/b]:")
        for x in regs:
            out.print(
                f"  {x['run']}: {x['model']} {x['op']}/{x['stream']} {x['level']} "
                f"{_val(x['base'], x['unit'])} -> {_val(x['candidate'], x['unit'])} "
                f"({x['delta_pct']:+.1f} %, {conf} CI [{_delta(x['ci_low'], x['unit'])}, "
                f"{_delta(x['ci_high'], x['unit'])}])"
            )
    for c in res["candidates"]:
        if not c["comparable"]:
            out.print(f"\n{c['candidate']['name']}: not judged: {c['workload']}")


# ------------------------------------------------------------------ history


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
        _dump(res)
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
                return f"{_ns(x['value'])} [{_ns(x['ci_low'])}, {_ns(x['ci_high'])}]"

            t.add_row(p["version"], str(len(p["runs"])), f"{p['count']:,}", ci("p50"), ci("p99"),
                      ci("mean"), ci("iops"), "; ".join(marks.get(p["version"], [])))  # fmt: skip
        out.print(t)
    n = sum(len(c) for g in res["groups"] for c in g["change_points"].values())
    out.print(f"{n} change point(s): {res['method']['change_points']}")
