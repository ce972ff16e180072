"""`iotape analyze latency`: a run's device and queue time, as GET /runs/RUN/latency answers."""

from __future__ import annotations

from typing import Annotated, cast

import typer
from rich.table import Table

from analyzer.analyses import core as analyses
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
    Op,
    Start,
    Stream,
    dump,
    fmt_choice,
    ns,
    out,
)
from schemas.documents.api import LatencyResponse
from schemas.percentiles import NAMES


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
    fmt = fmt_choice(as_json, fmt, (Format.table, Format.json))
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
        dump(res)
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
            t.add_row(name, f"{g['count']:,}", ns(g["mean_ns"]), *(ns(p[k]) for k in levels))
        out.print(t)
    if n := res["excluded"]["complete_unseen"]:
        out.print(
            f"device time leaves out {n:,} records flagged complete_unseen "
            "(completion not reported by the kernel; their time is an upper bound)"
        )
