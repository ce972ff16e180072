"""What `iotape analyze latency|verdict`, `iotape compare` and `iotape history` share:
the filter options, the output formats and how times and deltas print."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console

from base.errors import IotapeError

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


def fmt_choice(as_json: bool, fmt: Format, allowed: tuple[Format, ...]) -> Format:
    if as_json:
        fmt = Format.json
    if fmt not in allowed:
        raise IotapeError(f"--format {fmt.value}: one of {', '.join(a.value for a in allowed)}")
    return fmt


def dump(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def ns(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:,.3f} ms"
    return f"{v / 1e3:,.1f} µs"


def val(v: float | None, unit: str) -> str:
    return "-" if v is None else (f"{v:,.1f}" if unit == "IO/s" else ns(v))


def delta(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "IO/s":
        return f"{v:+,.1f}"
    return ("+" if v >= 0 else "-") + ns(abs(v))
