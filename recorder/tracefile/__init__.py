"""The `.iot` trace-file library: read, write, scan, check and repair, describe, convert.

The names other components use live here; the modules below hold them by job:
`format` (layout constants, header and footer types, encoding), `blocks` (decoding
and checking each block), `codec` (compressed chunks: transform and codecs),
`reader`, `sequence` (a rotated capture's files read as one trace: `open_trace`
takes a file or a sequence), `writer`, `arrow`, `scan`, `check`, `info`, `convert`;
and what every producer of records shares: `streams` (stream labels). The header's
device table and the `dev` numbers come from devices/naming.py.
"""

from recorder.tracefile.arrow import decode_comm, records_to_arrow
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
