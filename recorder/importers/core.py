"""`iotape import`: traces that iotape did not record → `.iot` files.

`import_trace()` is the library entry: it opens each input (plain, .gz, .xz or
.zst, recognised by content), streams it through the format's reader into a
`TraceWriter` (so a failed import leaves nothing behind), and builds the header.
`detect()` names the format of a file for `auto`.
"""

from __future__ import annotations

import contextlib
import gzip
import lzma
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np

from iotape import __version__
from iotape.errors import IotapeError
from recorder.importers import blkbinary, blkpair, blkparse, textformats, textlines
from recorder.importers import blktrace as bt
from recorder.importers import detect as detection
from recorder.importers.readers import READERS
from recorder.importers.textrecords import Context
from recorder.tracefile import TraceFooter, TraceWriter, default_streams, devices
from recorder.tracefile.streams import apply_streams

BLKTRACE_FORMATS = ("blktrace", "blkparse")
FORMATS = (*BLKTRACE_FORMATS, *textformats.FORMATS)
# Devices we make up for formats without device numbers: a major from the range
# Linux reserves for local/experimental use, so they never look like a real disk.
SYNTH_MAJOR = 240
_GZ, _XZ, _ZST = b"\x1f\x8b", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd"

Progress = Callable[[dict], None]


# --------------------------------------------------------------------------- input


class _Counted:
    """A stream that counts the compressed bytes read, for progress."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.pos = 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.pos += len(data)
        return data

    def readline(self, n: int = -1) -> bytes:
        data = self.f.readline(n)
        self.pos += len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")


def _pipe(f: IO[bytes] | None) -> IO[bytes]:
    assert f is not None  # the zstd pipe's ends: Popen made both with PIPE
    return f


@contextlib.contextmanager
def open_input(path: str | os.PathLike) -> Iterator[tuple[BinaryIO, _Counted]]:
    """(decompressed stream, raw-byte counter) for a plain, gzip, xz or zstd file."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 (closed in the finally below)
    except FileNotFoundError:
        raise IotapeError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IotapeError(f"{path}: is a directory") from None
    except PermissionError:
        raise IotapeError(f"{path}: permission denied") from None
    proc = None
    try:
        head = raw.read(6)
        raw.seek(0)
        counted = _Counted(raw)
        if head.startswith(_GZ):
            # GzipFile wants seek() too, but only seeks when its caller does; readers do not.
            stream = gzip.GzipFile(fileobj=counted, mode="rb")  # type: ignore[call-overload]
        elif head.startswith(_XZ):
            # LZMAFile types its file as IO[bytes] but calls only read().
            stream = lzma.LZMAFile(counted, mode="rb")  # type: ignore[arg-type]  # noqa: SIM115
        elif head.startswith(_ZST):
            # python-zstandard is not a dependency; the zstd tool decompresses in a pipe.
            if shutil.which("zstd") is None:
                raise IotapeError(f"{path}: zstd-compressed, and the zstd tool is not installed")
            proc = subprocess.Popen(
                ["zstd", "-dc", "--", os.fspath(path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert proc.stdout is not None and proc.stderr is not None  # both are PIPE
            # Progress cannot see into the pipe; it shows events only.
            stream = proc.stdout
        else:
            stream = counted
        try:
            yield stream, counted
        except (EOFError, OSError, lzma.LZMAError) as e:
            raise IotapeError(f"{path}: damaged compressed data: {e}") from None
        # A reader that stopped early (detection reads 64 KiB) leaves zstd blocked on
        # a full pipe: waiting for it would hang, and there is no outcome to check.
        if proc is not None and not _pipe(proc.stdout).read(1) and proc.wait() != 0:
            err = _pipe(proc.stderr).read().decode(errors="replace").strip().splitlines()
            raise IotapeError(f"{path}: zstd: {err[-1] if err else 'failed'}")
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            _pipe(proc.stdout).close()
            _pipe(proc.stderr).close()
        raw.close()


PEEK_BYTES = 65536


def _peek(path: str | os.PathLike, n: int = PEEK_BYTES) -> bytes:
    with open_input(path) as (f, _):
        return f.read(n)


# --------------------------------------------------------------------------- detection


def detect(path: str | os.PathLike) -> str:
    """The format of a file, from its content (see recorder/importers/detect.py)."""
    head = _peek(path, PEEK_BYTES + 1)
    whole = len(head) <= PEEK_BYTES
    return detection.detect_format(head[:PEEK_BYTES], whole, str(path))


# --------------------------------------------------------------------------- devices


@dataclass
class DeviceTable:
    """Device keys of the input → record `dev` numbers and the header's device table."""

    fmt: str
    mapping: dict[str, str] = field(default_factory=dict)
    by_key: dict[str, int] = field(default_factory=dict)
    entries: dict[int, dict] = field(default_factory=dict)

    def __call__(self, key: str, native: int | None) -> int:
        if key in self.by_key:
            return self.by_key[key]
        target = self.mapping.get(key)
        if target is not None:
            entry = _mapped_device(key, target, self.fmt)
        else:
            dev = native if native is not None else devices.kdev(SYNTH_MAJOR, len(self.by_key))
            major, minor = devices.split_kdev(dev)
            entry = _device_entry(f"{self.fmt}:{key}", dev, major, minor)
        self.by_key[key] = entry["dev"]
        self.entries.setdefault(entry["dev"], {**entry, "source_key": key})
        return entry["dev"]

    def header(self) -> list[dict]:
        return [self.entries[d] for d in sorted(self.entries)]


def _device_entry(name: str, dev: int, major: int, minor: int) -> dict:
    return {
        "name": name,
        "dev": dev,
        "major": major,
        "minor": minor,
        "model": "",
        "firmware": "",
        "rotational": None,
        "logical_block_size": 512,
        "capacity_bytes": 0,
        "partition": None,
    }


def _mapped_device(key: str, target: str, fmt: str) -> dict:
    if target.startswith("/dev/"):
        d = devices.resolve(target)
        return {**d.to_json(), "partition": None}
    m = re.fullmatch(r"(?:(.+)=)?(\d+):(\d+)", target)
    if m:
        major, minor = int(m.group(2)), int(m.group(3))
        return _device_entry(m.group(1) or f"{fmt}:{key}", devices.kdev(major, minor), major, minor)
    raise IotapeError(f"--device-map {key}={target}: expected /dev/NAME, MAJ:MIN or NAME=MAJ:MIN")


def parse_device_map(specs: list[str]) -> dict[str, str]:
    out = {}
    for s in specs:
        key, sep, target = s.partition("=")
        if not sep or not key or not target:
            raise IotapeError(f"--device-map {s!r}: expected KEY=DEVICE, e.g. hm_0=/dev/sdb")
        out[key] = target
    return out


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

    def tick(self, counter: _Counted, events: int) -> None:
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


class _Spool:
    """Records held until the header is known (devices and wall time come from the input).

    The header goes first in the file, so records are written to a temporary
    trace and copied behind the real header at the end: a second sequential pass
    over our own output keeps memory constant whatever the input's size.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self.tmp = out.with_name(f".{out.name}.spool")
        self.writer = TraceWriter(
            self.tmp, {"mono_start_ns": 0, "wall_start_ns": 0, "recorder": {}}
        )

    def write(self, recs: np.ndarray) -> None:
        apply_streams(recs, [])
        self.writer.write(recs)

    def finish(self, header: Mapping[str, object], footer: Mapping[str, object]) -> None:
        from recorder.tracefile import open_trace

        try:
            self.writer.close({})
            with TraceWriter(self.out, header) as w, open_trace(self.tmp) as t:
                for chunk in t.iter_chunks():
                    w.write(chunk)
                w.close(footer)
        finally:
            self.tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        self.writer.abort()
        self.tmp.unlink(missing_ok=True)


def _import_text(run: _Run, base: float | None) -> float | None:
    spec = textformats.FORMATS[run.fmt]
    ctx = Context(
        skip_bad=run.skip_bad, base=base, device_id=run.table, relative=spec.epoch is None
    )
    reader = READERS[spec.kind]
    spool = _Spool(run.output)
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
        run.footer = {"stop_reason": "import", "lost": {}, "skipped": ctx.bad}
        spool.finish(run.header(wall, extra), run.footer)
    except BaseException:
        spool.abort()
        raise
    return None


FILETIME_NS = textformats.FILETIME_UNIX_OFFSET * 100


def _import_blktrace(run: _Run, base: float | None) -> None:
    pairer = blkpair.Pairer()
    info = blkbinary.BinaryInfo(comms=pairer.comms)
    spool = _Spool(run.output)
    extra: dict = {}
    ignored: textlines.Ignored | None = None
    summary: blkparse.Summary | None = None
    try:
        with contextlib.ExitStack() as stack:
            opened = [stack.enter_context(open_input(p)) for p in run.paths]
            counter = _MultiCounter([c for _, c in opened])
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
        run.footer = {"stop_reason": "import", "lost": {}, "unpaired": unpaired}
        spool.finish(run.header(wall, extra), run.footer)
    except BaseException:
        spool.abort()
        raise
    return None


def _map_devices(recs: np.ndarray, table: DeviceTable) -> np.ndarray:
    """Register the records' devices (MAJ:MIN keys) and apply --device-map."""
    for d in np.unique(recs["dev"]).tolist():
        major, minor = devices.split_kdev(d)
        new = table(f"{major}:{minor}", d)
        if new != d:
            recs["dev"][recs["dev"] == d] = new
    return recs


class _MultiCounter(_Counted):
    def __init__(self, parts: list[_Counted]) -> None:
        self.parts = parts

    @property
    def pos(self) -> int:  # type: ignore[override]  # read-only: the parts count, not us
        return sum(p.pos for p in self.parts)


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
