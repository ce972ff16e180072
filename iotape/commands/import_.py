"""`iotape import`: parse options, call recorder.importers.import_trace, print the outcome."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from base.progress import progress as bar
from iotape.cliopts import AsJson, Force
from recorder.importers.core import FORMATS, import_trace

err = Console(stderr=True)


def import_(
    fmt: Annotated[
        str,
        typer.Argument(
            metavar="FORMAT",
            help=f"auto (recognised by content), or one of: {', '.join(FORMATS)}; iot: "
            "a rotated capture's files (its -o name, a quoted glob) joined into one trace.",
        ),
    ],
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE...", help="Input files (.gz, .xz, .zst too).")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="Trace file to write.")],
    device_map: Annotated[
        list[str] | None,
        typer.Option(help="KEY=DEVICE: the input's device KEY (hm_0, 259:0) is /dev/X or MAJ:MIN."),
    ] = None,
    skip_bad: Annotated[
        int, typer.Option(help="Tolerate up to N malformed records (counted in the header).")
    ] = 0,
    force: Force = False,
    json_out: AsJson = False,
) -> None:
    """Import a trace that iotape did not record (blktrace, blkparse, SNIA, fio logs, ...).

    Example: iotape import blktrace sda.blktrace.0 sda.blktrace.1 -o sda.iot
    """
    with bar(f"importing {fmt}", err, counter="events") as update:

        def progress(msg: dict) -> None:
            if update is not None:
                update(msg.get("bytes", 0), msg.get("total_bytes") or None, events=msg["events"])

        result = import_trace(
            fmt,
            list(files),
            output,
            device_map=device_map or [],
            skip_bad=skip_bad,
            force=force,
            progress=progress,
        )
    s = result.summary
    if json_out:
        print(json.dumps({"output": str(result.output), "events": result.events, **s}))
    chosen = f" (detected {s['detected']})" if s.get("detected") else ""
    unpaired = s.get("unpaired") or {}
    err.print(
        f"{result.output}: {result.events:,} requests from {result.format}{chosen}"
        + (f", {s['skipped']:,} bad records skipped" if s.get("skipped") else "")
        + (f", unpaired: {', '.join(f'{k} {v}' for k, v in unpaired.items())}" if unpaired else ""),
        highlight=False,
    )
