"""What a recording is asked and what it answers, shared by `record` and its backends.

`recorder.capture.record` picks a backend and calls its `record` with these; each
backend returns a `RecordResult`. They live here, below both, so that no backend
imports the module that runs it (`record` still names them for its callers).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recorder.capture.flight import Flight
from recorder.capture.rotation import Rotation
from recorder.tracefile import TraceFooter


@dataclass
class RecordOptions:
    devices: list[str]
    output: Path
    command: list[str] = field(default_factory=list)
    duration: float | None = None
    pids: list[int] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    comms: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    force: bool = False
    backend: str = "bpf"
    chunk_records: int = 8192
    ring_mb: int = 32
    bpf_stats: bool = False
    # Chunk compression: auto, zstd, lz4 or none (docs/trace-format.md).
    compress: str = "auto"
    # Wake records of threads that submit I/O (a format version 3 file; bpf only).
    wakes: bool = False
    rotation: Rotation = field(default_factory=Rotation)
    flight: Flight = field(default_factory=Flight)
    argv: list[str] = field(default_factory=lambda: list(sys.argv))


class RecordSummary(TraceFooter, total=False):
    """The trace's footer (events and chunks filled in) and the recorder process's
    peak RSS and CPU (`iotape record --json`)."""

    type: str  # "done": the loader's last progress line
    process: dict[str, Any]


@dataclass
class RecordResult:
    output: Path
    summary: RecordSummary
    command_exit: int | None


Progress = Callable[[dict], None]
