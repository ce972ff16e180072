"""`iotape trace info|convert|check`: each command calls one library function and prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from base.errors import IotapeError
from base.progress import progress as bar
from iotape.cliopts import AsJson, Force
from iotape.cliutil import sub_app
from recorder.tracefile.check import RepairReport
from recorder.tracefile.check import check as check_trace
from recorder.tracefile.check import repair as repair_trace
from recorder.tracefile.convert import convert as convert_trace
from recorder.tracefile.info import summarize
from recorder.tracefile.scan import Damage, ScanReport
from recorder.tracefile.sequence import resolve

app = sub_app("Inspect, convert and validate trace files (.iot).")

err = Console(stderr=True)

TraceFile = Annotated[
    Path,
    typer.Argument(
        help="Trace file (.iot), or a rotated capture's files: its -o name or a quoted glob.",
        metavar="FILE",
        show_default=False,
    ),
]


def _print_json(obj: object) -> None:
    # Plain print: rich would wrap long lines and break the JSON.
    print(json.dumps(obj, indent=2, ensure_ascii=False))


def _ns(ns: int | None) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e9:,.3f} s"


def _n(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


# Keyed by the header's JSON value: true, false, or whatever a producer wrote.
_MEDIA: dict[object, str] = {True: "HDD", False: "SSD"}


def _size(n: int | None) -> str:
    if not isinstance(n, int):
        return "-"
    size: float = n
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{n:,} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return str(size)


@app.command()
def info(path: TraceFile, as_json: AsJson = False) -> None:
    """Summarize a trace: host, devices, counts by op and stream, losses, completeness.

    Example: iotape trace info run1.iot --json | jq .by_stream
    """
    with bar("reading", err) as progress:
        s = summarize(path, progress)
    if as_json:
        _print_json(s)
    else:
        _print_info(s, Console())
    if s["needs_repair"]:
        _say(err, f"iotape: error: {s['problem']}; {s['repair_hint']}")
        raise typer.Exit(1)


def _print_info(s: dict, out: Console) -> None:
    t = Table(title=str(s["path"]), show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("host", f"{s['host'] or '-'}  (kernel {s['kernel'] or '-'})")
    t.add_row("started", s["start"] or "-")
    t.add_row("command line", " ".join(s["command_line"] or []) or "-")
    t.add_row("recorder", f"{s['backend'] or '-'} {s['recorder_version'] or ''}".strip())
    if seq := s.get("sequence"):
        files = seq["files"]
        t.add_row("files", f"{len(files)} of a rotated capture: {files[0]} … {files[-1]}")
    t.add_row("events", f"{s['events']:,} in {s['chunks']:,} chunks, {s['errors']:,} with errors")
    t.add_row("bytes", _size(s["bytes"]))
    chunks = ", ".join(f"{k} {v:,}" for k, v in s["compression"].items()) or "-"
    per = s["file_bytes_per_event"]
    t.add_row(
        "file",
        f"{_size(s['file_bytes'])}, {per or 0:.1f} B/event; format {s['format_version']}, "
        f"chunks: {chunks}",
    )
    t.add_row("duration", _ns(s["duration_ns"]))
    lost = ", ".join(f"{k} {v:,}" for k, v in s["lost"].items()) or "none"
    t.add_row("lost", f"{s['lost_total']:,} ({lost})" if s["lost_total"] else "none")
    t.add_row("pre-start", "-" if s["pre_start"] is None else f"{s['pre_start']:,} left out")
    if s["completion_unseen"]:
        t.add_row(
            "completion unseen",
            f"{s['completion_unseen']:,} (kept; completion time an upper bound)",
        )
    if s["repaired"]:
        t.add_row("repaired", f"yes; {s['dropped_events']:,} events dropped")
    if s["gaps"]:
        t.add_row(
            "gaps",
            f"{_n(s['dropped_chunks'], 'chunk')} ({s['dropped_events']:,} events) lost "
            f"in {_n(len(s['gaps']), 'gap')}",
        )
        for g in s["gaps"]:
            t.add_row("", damage_line(g))
    if s["needs_repair"]:
        t.add_row("[red]status[/]", f"[red]damaged or cut short[/]: {s['problem']}")
        t.add_row("", f"run: iotape trace check --repair {s['path']}")
    else:
        t.add_row("status", f"complete, stopped by {s['stop_reason'] or '-'}")
    out.print(t)
    if s["devices"]:
        out.print(_devices_table(s["devices"]))
    for title, rows in (
        ("by op", s["by_op"]),
        ("by stream", s["by_stream"]),
        ("by device", s["by_device"]),
    ):
        if rows:
            out.print(_count_table(title, rows, s["events"]))


def _devices_table(devices: list[dict]) -> Table:
    t = Table(title="devices", title_justify="left")
    for col in ("name", "dev", "model", "firmware", "media", "lbs", "capacity", "partition"):
        t.add_column(col, justify="right" if col in ("lbs", "capacity") else "left")
    for d in devices:
        part = d.get("partition")
        where = "-"
        if isinstance(part, dict):
            # Records carry disk offsets: subtract the start to read one as a partition offset.
            where = (
                f"{part.get('name')} = disk bytes {part.get('start_bytes', 0):,}.."
                f"{part.get('end_bytes', 0):,}; partition offset = disk offset - "
                f"{part.get('start_bytes', 0):,}"
            )
        media = _MEDIA.get(d.get("rotational"), "-")
        t.add_row(
            str(d.get("name", "-")),
            f"{d.get('major', '-')}:{d.get('minor', '-')}",
            str(d.get("model") or "-"),
            str(d.get("firmware") or "-"),
            media,
            str(d.get("logical_block_size") or "-"),
            _size(d.get("capacity_bytes")),
            where,
        )
    return t


def _count_table(title: str, rows: dict, total: int) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column(title.split()[-1])
    for col in ("events", "%", "bytes", "avg size"):
        t.add_column(col, justify="right")
    for name, r in rows.items():
        n = r["events"]
        t.add_row(
            name,
            f"{n:,}",
            f"{100 * n / total:.1f}" if total else "-",
            _size(r["bytes"]),
            _size(r["bytes"] // n) if n else "-",
        )
    return t


@app.command()
def convert(
    path: TraceFile,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="OUT.parquet or OUT.csv.", show_default=False)
    ],
    partition_relative: Annotated[
        bool,
        typer.Option(
            "--partition-relative",
            help="Offsets relative to the partition named at record time (dev becomes the "
            "partition); requests outside it are left out.",
        ),
    ] = False,
    force: Force = False,
) -> None:
    """Convert a trace to Parquet (zstd) or CSV with the schema's columns, in schema order.

    Example: iotape trace convert run1.iot -o run1.parquet
    """
    if output.exists() and not force:
        raise IotapeError(f"{output}: exists; pass --force to overwrite it")
    with bar("converting", err) as progress:
        r = convert_trace(path, output, partition_relative=partition_relative, progress=progress)
    note = (
        f", {r['outside_partition']:,} outside the partition left out" if partition_relative else ""
    )
    _say(err, f"wrote {r['rows']:,} rows to {r['path']}{note}")


@app.command()
def check(
    path: TraceFile,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Keep every intact chunk, before and after any damage; move the damaged "
            "bytes to FILE.damaged; record the gaps in the footer.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Validate every chunk, the footer and the trailer; list each damaged range and exit 1
    if the file is damaged. Damage anywhere costs only the chunks it touches.

    A rotated capture's files (its -o name or a quoted glob) are checked one by one.

    Example: iotape trace check run1.iot --repair
    """
    files = resolve(path)
    reports: list[dict] = []
    damaged = False
    for f in files:
        if repair:
            r = repair_trace(f)
            reports.append(r.to_dict())
            if not as_json:
                _print_repair(r, Console())
            continue
        rep = check_trace(f)
        reports.append(rep.to_dict())
        damaged |= not rep.complete
        if not as_json:
            _print_check(rep, Console())
    if as_json:
        _print_json(reports[0] if len(files) == 1 else reports)
    if damaged:
        raise typer.Exit(1)


def _say(console: Console, text: str, style: str | None = None) -> None:
    # Paths and messages are printed as they are: no markup, no highlighting, no wrapping.
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


def _print_check(rep: ScanReport, out: Console) -> None:
    if rep.complete:
        gaps = (rep.footer or {}).get("gaps") or []
        note = f", {_n(len(gaps), 'gap')} left by a repair" if gaps else ""
        _say(out, f"{rep.path}: ok, {rep.events:,} events in {rep.chunks:,} chunks{note}")
        return
    _say(
        out, f"{rep.path}: damaged: byte {rep.problem_offset:,}: {rep.problem_reason}", style="red"
    )
    _say(out, f"  intact: {rep.events:,} events in {rep.chunks:,} chunks, all kept by repair")
    for d in rep.damage:
        _say(out, "  " + damage_line(d))
    footer = "intact" if rep.footer_present else "missing"
    trailer = "present" if rep.trailer_present else "missing"
    _say(out, f"  footer {footer}, trailer {trailer}")
    _say(out, f"  run: iotape trace check --repair {rep.path}")


def damage_line(d: Damage | dict) -> str:
    """One damaged range in words: bytes, chunks, time, events lost, what is after it."""
    g = d if isinstance(d, dict) else d.__dict__
    offset, length, n = g.get("offset") or 0, g.get("length") or 0, g.get("chunks") or 0
    where = f"bytes {offset:,}..{offset + length:,}" if length else f"at byte {offset:,}"
    first = g.get("first_chunk") or 0
    chunks = (
        "no chunk" if not n else f"chunk {first}" if n == 1 else f"chunks {first}..{first + n - 1}"
    )
    after, before = g.get("after_ns"), g.get("before_ns")
    span = (
        f"{'start' if after is None else _ns(after)} to {'end' if before is None else _ns(before)}"
    )
    events = (
        f"{g.get('events') or 0:,}"
        if g.get("events_exact")
        else f"at least {g.get('events') or 0:,}"
    )
    text = f"damaged {where}: {chunks}, time {span}, {events} events lost"
    if "intact_after" in g:
        text += f"; {g['intact_after']:,} intact chunks after it"
    return text


def _print_repair(r: RepairReport, out: Console) -> None:
    if not r.repaired:
        _say(out, f"{r.path}: ok, nothing to repair ({r.kept_events:,} events)")
        return
    _say(
        out,
        f"{r.path}: repaired: kept {r.kept_events:,} events in {r.kept_chunks:,} chunks, "
        f"dropped {r.dropped_events:,} in {_n(r.dropped_chunks, 'chunk')}",
    )
    for g in r.gaps:
        _say(out, "  " + damage_line(g))
    if r.damaged_file:
        _say(out, f"  the {r.removed_bytes:,} damaged bytes are in {r.damaged_file}")
