"""`iotape import auto`: a file's format from its first bytes, never from its name.

Every format `iotape import` reads has a test here that either accepts the
sample or says why not; when none accepts, the error lists each format with its
reason, so a user can see how close their file came. Binary formats are accepted
on the structure of several consecutive records, not on one magic number, so a
file of text or random bytes is not taken for one by chance.
"""

from __future__ import annotations

import re

from base.errors import IotapeError
from recorder.importers import blktrace as bt
from recorder.importers import textformats, textlines
from recorder.importers.csvread import sniff
from recorder.importers.readers import vscsi_version
from recorder.importers.textrecords import BadValue
from recorder.tracefile import HEADER_MAGIC

# Lines of a text sample the text tests look at.
SAMPLE_LINES = 20
# A blkparse header names at least device, CPU, time, PID, action and RWBS.
BLKPARSE_COLUMNS = 6
# blktrace records walked (by their pdu_len) before the file is taken for blktrace.
BLKTRACE_RECORDS = 16

_BLKPARSE_LINE = re.compile(rb"^\s*\d+,\d+\s+\d+\s+\d+\s+\d+\.\d{9}\s+\d+\s+[A-Za-z]{1,2}\s")
_BLKPARSE_SUMMARY = re.compile(rb"^(CPU\d+|Total) \(\d+,\d+\):")
_FIO_VERSIONS = (b"fio version 2 iolog", b"fio version 3 iolog")

Lines = list[tuple[int, bytes]]


def detect_format(head: bytes, whole: bool, where: str) -> str:
    """The format of a file whose first bytes (decompressed) are `head`.

    `whole`: `head` is the entire file, so its last line is complete.
    """
    if not head:
        raise IotapeError(f"{where}: the file is empty")
    if head.startswith(HEADER_MAGIC):
        raise IotapeError(f"{where}: already an iotape trace; read it with `iotape trace info`")
    lines = text_lines(head, whole)
    reasons: dict[str, str] = {}
    # Formats told by a signature or a record structure first: they are strict,
    # and no records of the line-by-line formats pass them.
    for name in dict.fromkeys((*SIGNED, "blkparse", *textformats.FORMATS)):
        why = SIGNED[name](head) if name in SIGNED else _text_reason(name, lines)
        if why is None:
            return name
        reasons[name] = why
    listed = "\n".join(f"  {name}: {why}" for name, why in reasons.items())
    raise IotapeError(
        f"{where}: cannot tell the format; name it (iotape import FORMAT ...)."
        f" Formats considered:\n{listed}"
    )


def text_lines(head: bytes, whole: bool) -> Lines:
    """(line number, line) of the first non-blank, non-comment lines, line ends stripped."""
    raw = head.split(b"\n")
    if not whole:
        raw = raw[:-1]  # cut off mid-line
    if raw and raw[0].startswith(textlines.BOM):
        raw[0] = raw[0][len(textlines.BOM) :]
    out = []
    for n, line in enumerate(raw, 1):
        line = line.rstrip(b"\r")
        if line.strip() and not textlines.is_comment(line):
            out.append((n, line))
            if len(out) == SAMPLE_LINES:
                break
    return out


def _blktrace(head: bytes) -> str | None:
    pos = 0
    for _ in range(BLKTRACE_RECORDS):
        if len(head) - pos < 4:
            break
        magic = int.from_bytes(head[pos : pos + 4], "little")
        if magic & 0xFFFFFF00 != bt.MAGIC:
            return f"byte {pos}: magic {magic:#010x} is not 0x656174XX"
        if len(head) - pos < bt.TRACE.size:
            break
        pdu_len = bt.TRACE.unpack_from(head, pos)[-1]
        if pdu_len > bt.MAX_PDU:
            return f"byte {pos}: pdu_len {pdu_len} is too large"
        pos += bt.TRACE.size + pdu_len
    return None if pos else f"shorter than one {bt.TRACE.size}-byte record"


def _vscsi(head: bytes) -> str | None:
    try:
        vscsi_version(head)
    except BadValue as e:
        return str(e).removeprefix("field ver: ")
    return None


def _fio_iolog(head: bytes) -> str | None:
    first = head.split(b"\n", 1)[0].strip()
    if first in _FIO_VERSIONS:
        return None
    return f"line 1: {first[:30].decode('utf-8', 'replace')!r} is not 'fio version 2|3 iolog'"


SIGNED = {"blktrace": _blktrace, "vscsi": _vscsi, "fio-iolog": _fio_iolog}


def _text_reason(name: str, lines: Lines) -> str | None:
    if not lines:
        return "no text lines besides comments and blanks"
    if name == "blkparse":
        return _blkparse(lines)
    return sniff(textformats.FORMATS[name], lines)


def _blkparse(lines: Lines) -> str | None:
    # A header line naming the columns may come first, the summary at the end.
    if textlines.names_columns(lines[0][1].decode("utf-8", "replace").split(), BLKPARSE_COLUMNS):
        lines = lines[1:]
    events = []
    for n, line in lines:
        if _BLKPARSE_SUMMARY.match(line):
            break
        events.append((n, line))
    if not events:
        return "no event lines"
    for n, line in events[:5]:
        if not _BLKPARSE_LINE.match(line):
            return f"line {n}: {line[:30].decode('utf-8', 'replace')!r} is not a blkparse event"
    return None
