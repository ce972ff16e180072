"""`iotape import`: traces that iotape did not record → `.iot` files.

`import_trace()` is the library entry: it opens each input (plain, .gz, .xz or
.zst, recognised by content), streams it through the format's reader into a
`TraceWriter` (so a failed import leaves nothing behind), and builds the header.
`detect()` names the format of a file for `auto`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np

from base import __version__
from base.errors import IotapeError
from devices import naming
from recorder.importers import blkbinary, blkpair, blkparse, textformats, textlines
from recorder.importers import blktrace as bt
from recorder.importers import detect as detection
from recorder.importers.devicetable import DeviceTable, parse_device_map
from recorder.importers.inputs import PEEK_BYTES, Counted, MultiCounter, open_input, peek
from recorder.importers.readers import READERS
from recorder.importers.spool import Spool
from recorder.importers.textrecords import Context
from recorder.tracefile import TraceFooter, default_streams, sequence

BLKTRACE_FORMATS = ("blktrace", "blkparse")
FORMATS = (*BLKTRACE_FORMATS, *textformats.FORMATS)

Progress = Callable[[dict], None]


# --------------------------------------------------------------------------- input


# --------------------------------------------------------------------------- detection


def detect(path: str | os.PathLike) -> str:
    """The format of a file, from its content (see recorder/importers/detect.py)."""
    head = peek(path, PEEK_BYTES + 1)
    whole = len(head) <= PEEK_BYTES
    return detection.detect_format(head[:PEEK_BYTES], whole, str(path))


# --------------------------------------------------------------------------- import


class ImportSummary(TraceFooter, total=False):
    """The footer an import wrote, and the format it read (`iotape import --json`)."""

    format: str
    detected: str | None  # the format `auto` found, None when it was named


@dataclass
class ImportResult:
    output: Path
    format: str
    events: int
    summary: ImportSummary


def import_trace(
    fmt: str,
    paths: list[str | os.PathLike],
    output: str | os.PathLike,
    device_map: list[str] | None = None,
    skip_bad: int = 0,
    force: bool = False,
    progress: Progress | None = None,
    argv: list[str] | None = None,
) -> ImportResult:
    """Import `paths` (one trace; several files for per-CPU blktrace or many volumes)."""
    if not paths:
        raise IotapeError("no input file")
    out = Path(output)
    if out.exists() and not force:
        raise IotapeError(f"{out}: exists; pass --force to overwrite it")
    if not out.parent.is_dir() and str(out.parent):
        raise IotapeError(f"{out}: directory {out.parent} does not exist")
    detected = None
    if fmt in ("auto", "iot") and sequence.names_sequence(list(paths)):
        # A rotated capture's files (or its -o name, or a glob): joined into one trace.
        events, footer = sequence.join(list(paths), out)
        joined = cast(ImportSummary, {**footer, "format": "iot"})
        joined["detected"] = "iot" if fmt == "auto" else None
        return ImportResult(out, "iot", events, joined)
    if fmt == "auto":
        found = {detect(p) for p in paths}
        if len(found) > 1:
            raise IotapeError(f"inputs are in different formats: {', '.join(sorted(found))}")
        fmt = detected = found.pop()
    if fmt not in FORMATS:
        raise IotapeError(f"format {fmt!r}: unknown; one of auto, {', '.join(FORMATS)}")
    mapping = parse_device_map(device_map or [])
    total = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
    run = _import_blktrace if fmt in BLKTRACE_FORMATS else _import_text
    base = None
    for _ in range(2):
        table = DeviceTable(fmt, mapping)
        state = _Run(fmt, [str(p) for p in paths], out, table, skip_bad, total, progress, argv)
        again = run(state, base)
        if again is None:
            break
        # A record earlier than the first block's start: import again from the true start.
        base = again
    summary: ImportSummary = {**state.footer, "format": fmt, "detected": detected}
    return ImportResult(out, fmt, state.events, summary)


@dataclass
class _Run:
    fmt: str
    paths: list[str]
    output: Path
    table: DeviceTable
    skip_bad: int
    total_bytes: int
    progress: Progress | None
    argv: list[str] | None
    events: int = 0
    done_bytes: int = 0
    footer: TraceFooter = field(default_factory=lambda: TraceFooter())

    def header(self, wall_start: int | None, extra: dict) -> dict:
        return {
            "mono_start_ns": 0,
            "wall_start_ns": wall_start or 0,
            "host": "unknown",
            "kernel": "unknown",
            "command_line": list(self.argv if self.argv is not None else sys.argv),
            "recorder": {"backend": f"import:{self.fmt}", "version": __version__},
            "devices": self.table.header(),
            "streams": {"0": default_streams()["0"]},
            "metadata": {"source": [os.path.abspath(p) for p in self.paths], "format": self.fmt}
            | extra,
        }

    def tick(self, counter: Counted, events: int) -> None:
        self.events += events
        if self.progress:
            self.progress(
                {
                    "type": "progress",
                    "events": self.events,
                    "bytes": self.done_bytes + counter.pos,
                    "total_bytes": self.total_bytes,
                }
            )


def _import_text(run: _Run, base: float | None) -> float | None:
    spec = textformats.FORMATS[run.fmt]
    ctx = Context(
        skip_bad=run.skip_bad, base=base, device_id=run.table, relative=spec.epoch is None
    )
    reader = READERS[spec.kind]
    spool = Spool(run.output, lambda: _text_header(run, spec, ctx))
    try:
        for path in run.paths:
            with open_input(path) as (f, counter):
                for recs in reader(spec, f, str(path), ctx):
                    spool.write(recs)
                    run.tick(counter, len(recs))
            run.done_bytes += os.path.getsize(path)
        if ctx.min_raw is not None and ctx.base is not None and ctx.min_raw < ctx.base:
            spool.abort()
            run.events = 0
            return ctx.min_raw
        run.footer = {"stop_reason": "import", "lost": {}, "skipped": ctx.bad}
        spool.finish(_text_header(run, spec, ctx), run.footer)
    except BaseException:
        spool.abort()
        raise
    return None


FILETIME_NS = textformats.FILETIME_UNIX_OFFSET * 100


def _text_header(run: _Run, spec: textformats.FormatSpec, ctx: Context) -> dict:
    """The header of a text import, from what the blocks read so far have shown."""
    wall = None
    if spec.epoch in ("unix", "filetime") and ctx.base is not None:
        unit = spec.time_ns
        ns = int(ctx.base) * int(unit) if float(unit).is_integer() else int(ctx.base * unit)
        wall = ns - FILETIME_NS if spec.epoch == "filetime" else ns
    extra = {
        "skipped": ctx.bad,
        "skipped_examples": ctx.bad_examples,
        "ignored_lines": ctx.ignored.header_json(),
        "crlf_line_ends": ctx.ignored.crlf,
        "unpaired": {},
        "units": spec.doc,
    }
    return run.header(wall, extra)


def _import_blktrace(run: _Run, base: float | None) -> None:
    pairer = blkpair.Pairer()
    info = blkbinary.BinaryInfo(comms=pairer.comms)
    spool = Spool(run.output)
    extra: dict = {}
    ignored: textlines.Ignored | None = None
    summary: blkparse.Summary | None = None
    try:
        with contextlib.ExitStack() as stack:
            opened = [stack.enter_context(open_input(p)) for p in run.paths]
            counter = MultiCounter([c for _, c in opened])
            if run.fmt == "blktrace":
                streams = [
                    blkbinary.read_binary(f, str(p), info)
                    for (f, _), p in zip(opened, run.paths, strict=True)
                ]
                events = blkbinary.merge_cpus(streams)
            else:
                summary, ignored = blkparse.Summary(), textlines.Ignored()
                events = _text_events(opened, run, pairer, summary, ignored)
            first = next(events, None)
            start = first.time if first is not None else 0
            pending = 0
            if first is not None:
                pairer.add(first)
            for e in events:
                pairer.add(e)
                pending += 1
                if pending >= 65536:
                    recs = _map_devices(pairer.take(start), run.table)
                    spool.write(recs)
                    run.tick(counter, len(recs))
                    pending = 0
            last = _map_devices(pairer.take(start), run.table)
            spool.write(last)
            run.tick(counter, len(last))
        unpaired = pairer.finish()
        counts = dict(sorted(pairer.counts.items()))
        extra = {"skipped": run.footer.get("skipped", 0), "unpaired": unpaired, "actions": counts}
        extra["device_flushes"] = dict(pairer.device_flushes)
        if ignored is not None:
            extra["ignored_lines"] = ignored.header_json()
            extra["crlf_line_ends"] = ignored.crlf
        wall = None
        if info.wall_anchor is not None:
            t, w = info.wall_anchor
            wall = w - (t - start)
        if summary is None:
            extra["remaps"] = info.remaps
        else:
            check = summary.check()
            extra["self_check"] = check
            if summary.events and not check["ok"]:
                extra["self_check_failed"] = True
        run.footer = {"stop_reason": "import", "lost": {}, "unpaired": unpaired,
                      "device_flushes": dict(pairer.device_flushes)}  # fmt: skip
        spool.finish(run.header(wall, extra), run.footer)
    except BaseException:
        spool.abort()
        raise
    return None


def _map_devices(recs: np.ndarray, table: DeviceTable) -> np.ndarray:
    """Register the records' devices (MAJ:MIN keys) and apply --device-map."""
    for d in np.unique(recs["dev"]).tolist():
        major, minor = naming.split_kdev(d)
        new = table(f"{major}:{minor}", d)
        if new != d:
            recs["dev"][recs["dev"] == d] = new
    return recs


def _text_events(
    opened, run: _Run, pairer: blkpair.Pairer, summary: blkparse.Summary, ignored: textlines.Ignored
) -> Iterator[bt.Event]:
    """Events of blkparse text files; counts lines per device for the self-check."""
    ctx = Context(skip_bad=run.skip_bad)
    for (f, _), path in zip(opened, run.paths, strict=True):
        header_due = True  # until the first non-empty line of this file
        for lineno, raw in enumerate(f, 1):
            if lineno == 1 and raw.startswith(textlines.BOM):
                raw = raw[len(textlines.BOM) :]
            if raw.endswith(b"\r\n"):
                ignored.crlf += 1
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if not line.strip():
                ignored.blank += 1
                continue
            if textlines.is_comment(line):
                ignored.comment += 1
                continue
            if header_due:
                header_due = False
                if textlines.names_columns(line.split(), detection.BLKPARSE_COLUMNS):
                    ignored.header += 1
                    continue
            if summary.feed(line):
                continue
            try:
                e = blkparse.parse_text_line(line)
            except blkparse.BadLine as err:
                ctx.reject(f"{path}: line {lineno}", str(err))
                continue
            dev = line.split(None, 1)[0]
            summary.lines[dev] = summary.lines.get(dev, 0) + 1
            if e is None:
                continue
            if e.act == "Q":
                summary.queued[dev] = summary.queued.get(dev, 0) + 1
                named = blkparse.text_comm(line)
                if named:
                    pairer.comms.setdefault(*named)
            yield e
    run.footer["skipped"] = ctx.bad
