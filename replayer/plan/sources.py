"""What a plan reads its requests from: the whole trace at once (source.load),
or, for a trace too large to hold, time-ordered chunks of it (stream.py).

Either way a plan sees the same two things: `view`, the trace as a whole as
far as laying it out goes (every device's furthest byte, every stream,
submitter and write; for chunks, stream.skeleton's few records standing for
them), `touched()`, each device's touched granules for --remap compact (for
chunks, collected by the scan), and `chunks()`, its requests in time order (the
whole trace is its own one chunk). build.py runs the same steps over both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from base.errors import IotapeError
from recorder.tracefile import trace_bytes, trace_events
from replayer.plan import compact, stream
from replayer.plan.options import PlanOptions
from replayer.plan.source import OP, Source, load

# Records (80 bytes each) past which a plan is streamed: ~80 MB of trace.
STREAM_ABOVE = 1_000_000
RECORD_BYTES = 80


@dataclass
class Whole:
    """The whole trace, held in memory."""

    view: Source
    granule: int = compact.GRANULE

    @property
    def requests(self) -> int:
        return len(self.view.records)

    def chunks(self) -> Iterator[Source]:
        yield self.view

    def touched(self) -> dict[int, np.ndarray]:
        """Each device's touched granules (--remap compact)."""
        r = self.view.records
        return compact.touched_by_device(r, r["op"] != OP["flush"], self.granule)


@dataclass
class Chunked:
    """The trace read in time-ordered chunks after one scan of it. Planned as
    lanes only: pieces and windows are cut once every job is known."""

    scan: stream.Scan
    view: Source  # the scan's skeleton

    @property
    def requests(self) -> int:
        return self.scan.requests

    def chunks(self) -> Iterator[Source]:
        return stream.sorted_chunks(self.scan)

    def touched(self) -> dict[int, np.ndarray]:
        """Each device's touched granules, as the scan collected them (--remap compact)."""
        return self.scan.touched or {}


Input = Whole | Chunked


def whole(opts: PlanOptions) -> Whole:
    return Whole(load(opts.trace), opts.remap_unit)


def chunked(opts: PlanOptions) -> Chunked:
    s = stream.scan(opts.trace, opts.remap_unit if opts.remap == "compact" else None)
    return Chunked(s, stream.skeleton(s))


def wants_chunks(opts: PlanOptions) -> bool:
    """Whether to read in chunks: exact (or auto) lanes, no scaling, one host, a big file."""
    scaled = any(
        v is not None for v in (opts.mailboxes, opts.databases, opts.copies, opts.storage_groups)
    )
    if opts.mode == "synthetic" or opts.layout == "pieces" or opts.windows or scaled:
        return False
    if opts.hosts or opts.dry_run or opts.segment <= 0:
        return False
    try:
        # The footers' count where there are footers: a compressed trace of
        # millions of requests can be a few MB.
        events = trace_events(opts.trace)
        size = trace_bytes(opts.trace)
    except (OSError, IotapeError):
        return False  # source.load says what is wrong with it
    return max(events or 0, size // RECORD_BYTES) > STREAM_ABOVE


def open_input(opts: PlanOptions) -> Input:
    """The trace in chunks where wants_chunks says so, else whole."""
    return chunked(opts) if wants_chunks(opts) else whole(opts)
