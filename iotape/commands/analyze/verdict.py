"""`iotape analyze verdict`: a run's Jetstress-style verdict; exits 1 when it fails."""

from __future__ import annotations

import typer
from rich.table import Table

from analyzer.analyses import core as analyses
from analyzer.analyses import junit
from analyzer.analyses import verdict as jetstress
from analyzer.analyses.filters import FilterArgs
from analyzer.store.opener import opened
from iotape.cliopts import AsJson, Db, RunRef
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
    dump,
    fmt_choice,
    out,
)
from schemas.documents.api import VerdictResponse


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
    fmt = fmt_choice(as_json, fmt, tuple(Format))
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
        dump(res)
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
        if n := v["excluded"]["complete_unseen"]:
            out.print(f"  left out: {n:,} requests flagged complete_unseen (their completion "
                      "time is an upper bound, not measured)")  # fmt: skip
    if v["result"] == "fail":
        raise typer.Exit(1)
