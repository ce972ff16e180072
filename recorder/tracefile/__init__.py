"""The `.iot` trace-file library: read, write, scan, check and repair, describe, convert.

The names other components use live here; the modules below hold them by job:
`format` (layout constants, header and footer types, encoding), `blocks` (decoding
and checking each block), `codec` (compressed chunks: transform and codecs),
`reader`, `sequence` (a rotated capture's files read as one trace: `open_trace`
takes a file or a sequence), `writer`, `arrow`, `scan`, `check`, `info`, `convert`;
and what every producer of records shares: `streams` (stream labels). The header's
device table and the `dev` numbers come from devices/naming.py.
"""

from typing import TYPE_CHECKING, Any

from recorder.tracefile.format import (
    CHUNK_HEADER_SIZE,
    HEADER_MAGIC,
    RECORD_DTYPE,
    RECORD_SIZE,
    TraceFooter,
    TraceFormatError,
    TraceHeader,
    default_streams,
)
from recorder.tracefile.reader import Trace
from recorder.tracefile.sequence import (
    TraceSequence,
    content_sha256,
    open_trace,
    segment_path,
    segments_of,
    trace_bytes,
    trace_events,
    trace_sha256,
)
from recorder.tracefile.writer import TraceWriter, write_trace

if TYPE_CHECKING:
    from recorder.tracefile.arrow import decode_comm, records_to_arrow


def __getattr__(name: str) -> Any:
    """The Arrow names, imported when first asked for: pyarrow takes ~0.1 s to load,
    and a reader of records (`replay fidelity`, relabelling) needs none of it."""
    if name in ("decode_comm", "records_to_arrow"):
        from recorder.tracefile import arrow

        return getattr(arrow, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CHUNK_HEADER_SIZE",
    "HEADER_MAGIC",
    "RECORD_DTYPE",
    "RECORD_SIZE",
    "Trace",
    "TraceFooter",
    "TraceFormatError",
    "TraceHeader",
    "TraceSequence",
    "TraceWriter",
    "content_sha256",
    "decode_comm",
    "default_streams",
    "open_trace",
    "records_to_arrow",
    "segment_path",
    "segments_of",
    "trace_bytes",
    "trace_events",
    "trace_sha256",
    "write_trace",
]
