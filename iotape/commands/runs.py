"""`iotape runs list|show|delete|tag`: the runs in the store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, cast

import typer
from rich.console import Console
from rich.table import Table

from analyzer.store import catalog, queries
from analyzer.store.ingest import DATA_TABLES
from analyzer.store.opener import opened
from base.errors import IotapeError
from iotape.cliopts import AsJson, Db, RunRef
from iotape.cliutil import print_json
from schemas.documents.api import RunEntry
from schemas.percentiles import LEVELS

err = Console(stderr=True)

runs_app = typer.Typer(
    help="List, show, delete and tag the runs in the store.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _when(ns: int) -> str:
    if not ns:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@runs_app.command("list")
def runs_list(
    db: Db = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Only runs with this KEY=VALUE tag.")
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind",
            help=f"Only runs of this kind: {', '.join(catalog.KINDS)}.",
            show_default=False,
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """List the runs in the store, oldest first.

    Example: iotape runs list --tag array=A9000 --json
    """
    if kind is not None and kind not in catalog.KINDS:
        raise IotapeError(f"--kind {kind!r}: one of {', '.join(catalog.KINDS)}")
    want = catalog.parse_tags(tag or [])
    with opened(db, create=False) as store:
        runs = [
            r
            for r in catalog.all_runs(store)
            if (kind is None or r["kind"] == kind)
            and all(r["tags"].get(k) == v for k, v in want.items())
        ]
    if as_json:
        print_json([_public(r) for r in runs])
        return
    t = Table(title=f"{len(runs)} runs", title_justify="left")
    for col in ("id", "name", "kind", "parent", "host", "start", "events", "duration", "tags"):
        t.add_column(col, justify="right" if col in ("events", "duration") else "left")
    for r in runs:
        t.add_row(
            r["id"],
            r["name"],
            r["kind"],
            r["parent_id"] or "-",
            r["host"] or "-",
            _when(r["start_ns"]),
            f"{r['events']:,}",
            f"{r['duration_ns'] / 1e9:,.3f} s",
            " ".join(f"{k}={v}" for k, v in sorted(r["tags"].items())) or "-",
        )
    Console().print(t)


def _public(r: dict) -> RunEntry:
    """The run's catalog entry as `runs list --json` and GET /runs show it."""
    return cast(RunEntry, {k: v for k, v in r.items() if k not in ("header", "version", "state")})


@runs_app.command("show")
def runs_show(run: RunRef, db: Db = None, as_json: AsJson = False) -> None:
    """Show one run: its catalog entry and its parts. A trace (or a recorded replay):
    devices, I/O by op and by stream. A workload report: per database and stream. A
    replay: its parent trace and fio's jobs and per-I/O latencies.

    Example: iotape runs show nightly-42 --json
    """
    with opened(db, create=False) as store:
        r = catalog.resolve(store, run)
        parts = _parts(store, r)
    if as_json:
        print_json({**_public(r), **parts})
        return
    out = Console()
    t = Table(title=f"run {r['id']}", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    rows = [
        ("name", r["name"]),
        ("kind", r["kind"]),
        ("host", f"{r['host'] or '-'} (kernel {r['kernel'] or '-'})"),
        ("start", _when(r["start_ns"])),
        ("duration", f"{r['duration_ns'] / 1e9:,.3f} s"),
        ("events", f"{r['events']:,} ({r['bytes']:,} bytes)"),
        ("tags", " ".join(f"{k}={v}" for k, v in sorted(r["tags"].items())) or "-"),
        ("source", f"{r['source_path']} (sha256 {r['source_sha256'][:16]}…)"),
        ("ingested", _when(r["ingested_ns"])),
    ]
    if r["kind"] == "replay":
        parent = parts.get("parent")
        why = r["parameters"].get("parent") or "not in the store"
        rows.insert(2, ("replays", f"{parent['id']} ({parent['name']})" if parent else why))
    if parts.get("replays"):
        rows.append(
            ("replayed by", ", ".join(f"{c['id']} ({c['name']})" for c in parts["replays"]))
        )
    for label, value in rows:
        t.add_row(label, str(value))
    out.print(t)
    if "workload" in parts:
        _print_workload(out, r, parts["workload"])
    if "fio" in parts:
        _print_fio(out, parts["fio"])
    if "latency" in parts:
        _print_trace_parts(out, parts)


def _parts(store, r: dict) -> dict:
    """A run's parts for `runs show`, by kind; a replay's trace parts when recorded."""
    parts: dict = {}
    rid = r["id"]
    if r["kind"] in ("capture", "import") or r["events"]:
        parts["devices"] = [
            dict(zip(_DEVICE_COLUMNS, row, strict=True))
            for row in queries.run(store, "run_devices", run_id=rid)
        ]
        parts["latency"] = queries.op_latency(store, rid)
        parts["streams"] = queries.bytes_by_stream(store, rid)
    if r["kind"] == "workload":
        parts["workload"] = queries.workload_report(store, rid)
    if r["kind"] == "replay":
        parent = catalog.get(store, r["parent_id"]) if r["parent_id"] else None
        if parent is not None and parent["state"] == "ready":
            parts["parent"] = {k: parent[k] for k in ("id", "name", "kind")}
        else:
            parts["parent"] = None
        parts["fio"] = {
            "summary": queries.fio_summary(store, rid),
            "latency": queries.fio_sample_latency(store, rid),
            "jobs": queries.fio_jobs(store, rid),
        }
    parts["replays"] = queries.children(store, rid)
    return parts


_DEVICE_COLUMNS = (
    "dev",
    "name",
    "model",
    "firmware",
    "rotational",
    "logical_block_size",
    "capacity_bytes",
    "partition_name",
    "partition_start_bytes",
)


def _print_trace_parts(out: Console, parts: dict) -> None:
    if parts["devices"]:
        dt = Table(title="devices", title_justify="left")
        for col in ("name", "model", "firmware", "media"):
            dt.add_column(col)
        for d in parts["devices"]:
            media = "HDD" if d["rotational"] else "SSD"
            dt.add_row(d["name"], d["model"] or "-", d["firmware"] or "-", media)
        out.print(dt)
    out.print(_latency_table("device latency by op (µs)", parts["latency"]))
    st = Table(title="by stream", title_justify="left")
    for col in ("stream", "ios", "bytes"):
        st.add_column(col, justify="left" if col == "stream" else "right")
    for x in parts["streams"]:
        st.add_row(x["stream_name"], f"{x['ios']:,}", f"{x['bytes']:,}")
    out.print(st)


def _latency_table(title: str, rows: list[dict]) -> Table:
    lt = Table(title=title, title_justify="left")
    for col in ("op", "ios", "mean", *(n for _, n in LEVELS[:4]), "max"):
        lt.add_column(col, justify="left" if col == "op" else "right")
    for x in rows:
        lt.add_row(
            x["op_name"],
            f"{x['ios']:,}",
            f"{x['sum_ns'] / x['ios'] / 1e3:,.1f}",
            *(f"{x[k] / 1e3:,.1f}" for k in (*(c for _, c in queries.LEVELS), "max_ns")),
        )
    return lt


def _print_workload(out: Console, r: dict, w: dict) -> None:
    p = r["parameters"]
    target = p.get("target_tx_iops")
    out.print(
        f"workload {p.get('mode', '?')}: achieved {p.get('achieved_tx_iops', 0):,.1f} "
        f"transactional IOPS"
        + (f" / target {target:,.1f}" if target else "")
        + f" · verdict {str(p.get('verdict', '-')).upper()}"
        + (" · interrupted" if p.get("interrupted") else "")
    )
    t = Table(title="per database", title_justify="left")
    cols = ("database", "target IOPS", "achieved", "db read ms", "db write ms", "log write ms")
    for col in (*cols, "verdict"):
        t.add_column(col, justify="left" if col in ("database", "verdict") else "right")
    for d in w["databases"]:
        t.add_row(
            d["database"],
            f"{d['target_iops']:,.1f}",
            f"{d['achieved_iops']:,.1f}",
            *(f"{d[k]:.3f}" for k in ("db_read_avg_ms", "db_write_avg_ms", "log_write_avg_ms")),
            d["verdict"] or "-",
        )
    out.print(t)
    st = Table(title="per database and stream", title_justify="left")
    for col in ("database", "stream", "I/O", "I/O/s", "avg bytes", "avg ms", "max ms"):
        st.add_column(col, justify="left" if col in ("database", "stream") else "right")
    for s in w["streams"]:
        if s["ios"]:
            st.add_row(
                s["database"],
                s["stream"],
                f"{s['ios']:,}",
                f"{s['per_s']:,.2f}",
                f"{s['avg_bytes']:,.0f}",
                f"{s['lat_avg_ms']:.3f}",
                f"{s['lat_max_ms']:.3f}",
            )
    out.print(st)


def _print_fio(out: Console, fio: dict) -> None:
    t = Table(title="fio jobs by direction", title_justify="left")
    for col in ("op", "jobs", "ios", "bytes", "IOPS"):
        t.add_column(col, justify="left" if col == "op" else "right")
    for x in fio["summary"]:
        t.add_row(
            x["op"], f"{x['jobs']:,}", f"{x['ios']:,}", f"{x['bytes']:,}", f"{x['iops']:,.1f}"
        )
    out.print(t)
    if fio["latency"]:
        out.print(_latency_table("fio per-I/O latency by op (µs)", fio["latency"]))


@runs_app.command("delete")
def runs_delete(
    run: RunRef,
    db: Db = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete a run and all its rows.

    Example: iotape runs delete 3f9a2c41d0e7 --yes
    """
    with opened(db, create=False) as store:
        r = catalog.resolve(store, run)
        if not yes and not typer.confirm(f"delete run {r['id']} ({r['name']})?"):
            raise typer.Exit(1)
        catalog.delete(store, r["id"], DATA_TABLES)
    print(f"deleted run {r['id']} ({r['name']})")


@runs_app.command("tag")
def runs_tag(
    run: RunRef,
    tags: Annotated[list[str] | None, typer.Argument(help="KEY=VALUE tags to set.")] = None,
    remove: Annotated[
        list[str] | None, typer.Option("--remove", "-r", help="A tag KEY to remove; repeat.")
    ] = None,
    db: Db = None,
) -> None:
    """Set or remove tags of a run.

    Example: iotape runs tag nightly-42 firmware=GDC5 array=A9000 --remove draft
    """
    set_tags = catalog.parse_tags(tags or [])
    if not set_tags and not remove:
        raise IotapeError("give KEY=VALUE tags to set, or --remove KEY")
    with opened(db, create=False) as store:
        r = catalog.tag(store, run, set_tags, remove or [])
    shown = " ".join(f"{k}={v}" for k, v in sorted(r["tags"].items())) or "none"
    print(f"run {r['id']} ({r['name']}): tags {shown}")
