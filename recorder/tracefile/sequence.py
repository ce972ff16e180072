"""A rotated capture read as one trace (`iotape record --rotate`, docs/recording.md).

`iotape record -o run.iot --rotate 1GiB` writes run-000000.iot, run-000001.iot, …,
each a complete trace with the capture's `mono_start_ns` (record times run on across
files) and its place in the header's `segment` (`index`, `start_ns`). Every request
is in exactly one file, so reading the files in order is reading the capture.

What names a sequence, wherever a command takes a trace (`open_trace` here):
- the capture's `-o` name (`run.iot`) when that file does not exist and its
  numbered files do;
- a quoted glob (`'run-00001*.iot'`), matched here, not by the shell;
- a directory of them, a flight recorder's snapshot (`run.snapshots/<time>-<reason>/`).
The files must be one capture (same `mono_start_ns`, `wall_start_ns` and host) with
consecutive indices; a ring (`--keep`) only deletes the oldest, so what it leaves
starts later and is still consecutive. A hole in the middle is refused.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import itertools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from base.errors import IotapeError
from recorder.tracefile import reader
from recorder.tracefile.blocks import ChunkInfo
from recorder.tracefile.format import HEADER_MAGIC
from recorder.tracefile.reader import Trace
from recorder.tracefile.writer import TraceWriter

_T = TypeVar("_T")

_INDEX = re.compile(r"-(\d{6,})\.iot$")
# Footer counters that add up over the files of a capture.
_SUMMED = ("events", "chunks", "completion_unseen", "pre_start", "unattributed")


def segment_path(output: str | os.PathLike, index: int) -> Path:
    """The name of file `index` of a capture recorded with `-o output --rotate …`."""
    out = str(output)
    stem = out[:-4] if out.endswith(".iot") else out
    return Path(f"{stem}-{index:06d}.iot")


def segments_of(output: str | os.PathLike) -> list[Path]:
    """The numbered files on disk of a capture recorded as `output`, by index."""
    pattern = glob.escape(str(segment_path(output, 0))).replace("000000", "[0-9]*")
    stem = str(segment_path(output, 0))[: -len("-000000.iot")]
    found = []
    for name in glob.glob(pattern):
        m = _INDEX.search(name)
        if m and name[: m.start()] == stem:
            found.append((int(m.group(1)), Path(name)))
    return [p for _, p in sorted(found)]


def resolve(spec: str | os.PathLike) -> list[Path]:
    """The files a trace argument names: itself, a capture's numbered files, or a glob."""
    path = Path(spec)
    if path.is_dir():
        # A snapshot of a ring capture (OUT.snapshots/<time>-<reason>/) holds its files.
        files = sorted(p for p in path.glob("*.iot") if p.is_file())
        if not files:
            raise IotapeError(f"{path}: a directory without trace files (*.iot)")
        return files
    if path.exists():
        return [path]
    text = str(spec)
    if glob.has_magic(text):
        files = sorted(Path(f) for f in glob.glob(text) if os.path.isfile(f))
        if not files:
            raise IotapeError(f"{text}: no file matches")
        return files
    return segments_of(path) or [path]


def trace_bytes(path: str | os.PathLike) -> int:
    """The size of a trace, or of a sequence's files together. Raises OSError."""
    return sum(os.path.getsize(f) for f in resolve(path))


def trace_events(path: str | os.PathLike) -> int | None:
    """The events a trace (or a sequence's files together) holds, as its footers
    say (a hint, read without walking the chunks: a compressed trace's size says
    little of it), or None where a file has no footer. Raises OSError, IotapeError."""
    total = 0
    for f in resolve(path):
        with reader.open_trace(f, strict=False) as t:
            n = (t.footer or {}).get("events")
        if not isinstance(n, int):
            return None
        total += n
    return total


def open_trace(path: str | os.PathLike, strict: bool = True) -> Trace:
    """`reader.open_trace`, also for a sequence (see the module doc)."""
    files = resolve(path)
    if len(files) == 1:
        return reader.open_trace(files[0], strict)
    return TraceSequence(str(path), files, strict)


def content_sha256(path: str | os.PathLike) -> str | None:
    """`reader.content_sha256`, for a sequence over its files' (in order)."""
    files = resolve(path)
    if len(files) == 1:
        return reader.content_sha256(files[0])
    h = hashlib.sha256(b"iotape-sequence\n")
    for f in files:
        digest = reader.content_sha256(f)
        if digest is None:
            return None
        h.update(bytes.fromhex(digest))
    return h.hexdigest()


def trace_sha256(path: str | os.PathLike) -> str:
    """`reader.trace_sha256`, for a sequence too."""
    digest = content_sha256(path)
    if digest is not None:
        return digest
    files = resolve(path)
    if len(files) > 1:
        raise IotapeError(f"{path}: a file of the sequence is damaged; run `iotape trace check`")
    return reader.trace_sha256(files[0])


class TraceSequence(Trace):
    """The files of one rotated capture, read as one trace: the first file's header
    (with `sequence`: the files and their indices), a footer that sums theirs, and
    their chunks in order. A fault in a file ends the sequence there, as it ends a
    file (`strict` as in `Trace`)."""

    def __init__(self, spec: str, files: list[Path], strict: bool = True) -> None:
        self.path = spec
        self.strict = strict
        self.problem = None
        self.parts: list[Trace] = []
        try:
            for f in files:
                self.parts.append(reader.open_trace(f, strict))
            order = _ordered(spec, self.parts)
        except BaseException:
            self.close()
            raise
        self.parts = order
        self.file_size = sum(p.file_size for p in self.parts)
        first = self.parts[0].header
        self.header = {
            **first,
            "sequence": {
                "files": [os.path.basename(p.path) for p in self.parts],
                "first_index": _index(self.parts[0]),
                "last_index": _index(self.parts[-1]),
            },
        }
        self.data_offset = self.parts[0].data_offset
        self.footer = _footer(self.parts)
        self.gaps = {}

    def close(self) -> None:
        for p in getattr(self, "parts", []):
            p.close()

    @property
    def mapped(self) -> Any:
        raise ValueError(f"{self.path}: a sequence of files; check each file on its own")

    @property
    def repair_hint(self) -> str:
        bad = next((p for p in self.parts if p.problem is not None), self.parts[-1])
        return bad.repair_hint

    def _walk(self) -> Iterator[tuple[ChunkInfo, np.ndarray]]:
        done = 0
        self.problem = None
        for part in self.parts:
            for info, records in part._walk():
                yield dataclasses.replace(info, end=done + info.end), records
            if part.problem is not None:
                self.problem = part.problem
                return
            done += part.file_size
        self.footer = _footer(self.parts)

    def iter_columns(self, rows: int = 0) -> Iterator[dict[str, np.ndarray]]:
        return self._each_part(lambda part: part.iter_columns(rows))

    def iter_stored(self) -> Iterator[np.ndarray]:
        return self._each_part(lambda part: part.iter_stored())

    def _each_part(self, it: Callable[[Trace], Iterator[_T]]) -> Iterator[_T]:
        """`it` of each file in turn, up to the first one with a problem."""
        self.problem = None
        for part in self.parts:
            yield from it(part)
            if part.problem is not None:
                self.problem = part.problem
                return
        self.footer = _footer(self.parts)


def _index(t: Trace) -> int:
    seg = t.header.get("segment")
    if not isinstance(seg, dict) or not isinstance(seg.get("index"), int):
        raise IotapeError(f"{t.path}: not a file of a rotated capture (no segment in its header)")
    return int(seg["index"])


def _ordered(spec: str, parts: list[Trace]) -> list[Trace]:
    """The files by index, checked to be one capture without a hole."""
    parts = sorted(parts, key=_index)
    first = parts[0]
    for p in parts[1:]:
        for key in ("mono_start_ns", "wall_start_ns", "host"):
            if p.header.get(key) != first.header.get(key):
                raise IotapeError(
                    f"{spec}: {p.path} is from another capture than {first.path} "
                    f"(header {key} differs)"
                )
    for a, b in itertools.pairwise(parts):
        if _index(b) == _index(a):
            raise IotapeError(f"{spec}: {a.path} and {b.path} are the same file of the capture")
        if _index(b) != _index(a) + 1:
            raise IotapeError(
                f"{spec}: file {_index(a) + 1} of the capture is missing between "
                f"{a.path} and {b.path}; the files of a sequence must be consecutive"
            )
    return parts


def _footer(parts: list[Trace]) -> dict[str, Any] | None:
    """The capture's footer from its files': counters summed, the end from the last
    file; None when a file has none (as for one file cut short)."""
    footers = [p.footer for p in parts]
    if any(f is None for f in footers):
        return None
    fs: list[dict[str, Any]] = [f for f in footers if f is not None]
    out: dict[str, Any] = dict(fs[-1])
    for key in _SUMMED:
        out[key] = sum(int(f.get(key) or 0) for f in fs)
    for key in ("lost", "device_flushes"):
        total: dict[str, int] = {}
        for f in fs:
            for k, v in (f.get(key) or {}).items():
                total[k] = total.get(k, 0) + int(v)
        if key == "lost" or total:
            out[key] = total
    seg = parts[0].header.get("segment") or {}
    start = int(seg.get("start_ns") or 0)
    end = out.get("end_mono_ns")
    mono = parts[0].header.get("mono_start_ns")
    if isinstance(end, int) and isinstance(mono, int):
        out["duration_ns"] = end - mono - start
    out["gaps"] = [
        {**g, "file": os.path.basename(p.path)}
        for p, f in zip(parts, fs, strict=True)
        for g in f.get("gaps") or []
    ]
    out["repaired"] = any(bool(f.get("repaired")) for f in fs)
    out["files"] = {"first": _index(parts[0]), "last": _index(parts[-1]), "count": len(fs)}
    return out


def names_sequence(specs: list[str | os.PathLike]) -> bool:
    """Whether `specs` name files of a rotated capture (iotape traces, several, or one
    with a `segment`), not one plain trace or another tool's files."""
    try:
        files = [f for s in specs for f in resolve(s)]
        if not files or not all(_head(f) == HEADER_MAGIC for f in files):
            return False
        if len(files) > 1:
            return True
        with reader.open_trace(files[0]) as t:
            return "segment" in t.header
    except (OSError, IotapeError):
        return False


def _head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(len(HEADER_MAGIC))


def join(specs: list[str | os.PathLike], out: str | os.PathLike) -> tuple[int, dict[str, Any]]:
    """One trace file at `out` from a rotated capture's files (`iotape import`): the
    records as they are, the first file's header without `segment` (with `joined`: the
    files), the summed footer. Written beside `out` and renamed: nothing half-written.
    Returns the events and the footer."""
    files = [f for s in specs for f in resolve(s)]
    name = str(specs[0]) if len(specs) == 1 else f"{specs[0]} …"
    trace = reader.open_trace(files[0]) if len(files) == 1 else TraceSequence(name, files)
    with trace:
        if trace.footer is None:
            raise IotapeError(f"{trace.path}: ends without a footer; {trace.repair_hint}")
        header = {k: v for k, v in trace.header.items() if k not in ("segment", "sequence")}
        header["joined"] = trace.header.get("sequence") or {"files": [files[0].name]}
        # A repaired file's gaps name its own chunk numbers: kept, but not as this file's.
        footer = {k: v for k, v in trace.footer.items() if k not in ("events", "chunks", "gaps")}
        footer["source_gaps"] = trace.footer.get("gaps") or []
        events = 0
        with TraceWriter(out, header) as w:
            for records in trace.iter_chunks():
                w.write(records)
                events += len(records)
            w.close(footer)
    return events, {**footer, "events": events}
