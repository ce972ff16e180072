"""Lines a text trace may carry besides its records: comments, a column header, blanks.

Traces published elsewhere are often edited by hand or saved by a spreadsheet:
`#` comments (blkparse's `#Maj,Mn CPU SeqNo ...`), a first line naming the
columns, blank lines, CRLF line ends, a UTF-8 byte-order mark. The importers
pass over these and count them in the trace header (`ignored_lines`), so what
was left out is on record. Ignored lines are emptied, not removed, so the line
numbers in error messages still match the file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

BOM = b"\xef\xbb\xbf"
_COMMENT = re.compile(rb"(?m)^[ \t]*#[^\n]*")
_BLANK = re.compile(rb"(?m)^[ \t]*\n")
# A header names columns: every field starts with a letter (data rows hold numbers).
_NAME = re.compile(r"[A-Za-z_]")


@dataclass
class Ignored:
    """What a text import passed over on purpose."""

    comment: int = 0
    header: int = 0
    blank: int = 0
    crlf: int = 0  # line ends turned into LF: lines kept, counted for the record

    def add(self, other: Ignored) -> None:
        self.comment += other.comment
        self.header += other.header
        self.blank += other.blank
        self.crlf += other.crlf

    def header_json(self) -> dict[str, int]:
        return {"comment": self.comment, "header": self.header, "blank": self.blank}


def is_comment(line: bytes | str) -> bool:
    return line.lstrip()[:1] in (b"#", "#")


def names_columns(fields: list[str], at_least: int = 1) -> bool:
    """True for a line of column names (`Timestamp,Hostname,...`), never for a record."""
    return len(fields) >= at_least and all(_NAME.match(f.strip()) for f in fields)


def may_need_cleaning(data: bytes) -> bool:
    """False when `clean_block` could change `data` only by emptying empty lines: no
    byte-order mark, CR, comment sign, space or tab (one memchr each, no line scan)."""
    return data.startswith(BOM) or b"\r" in data or b"#" in data or b" " in data or b"\t" in data


def clean_block(data: bytes, ignored: Ignored) -> bytes:
    """`data` (whole lines) with LF line ends, and comment and blank lines emptied."""
    if data.startswith(BOM):
        data = data[len(BOM) :]
    if b"\r" in data:
        ignored.crlf += data.count(b"\r\n")
        data = data.replace(b"\r\n", b"\n")
    # Blanks first: a comment line emptied below is not counted as blank too. The
    # substring tests are much cheaper than the regex and rule out most blocks; a
    # one-byte test (memchr) is cheaper still than one for a newline pair.
    spaced = b" " in data or b"\t" in data
    if data[:1] in b"\n \t" or b"\n\n" in data or (spaced and (b"\n " in data or b"\n\t" in data)):
        data, n = _BLANK.subn(b"\n", data)
        ignored.blank += n
    if b"#" in data:
        data, n = _COMMENT.subn(b"", data)
        ignored.comment += n
    return data


def drop_header(data: bytes, is_header: Callable[[bytes], bool], ignored: Ignored) -> bytes | None:
    """`data` with its first non-empty line emptied when it names the columns.

    None when the block holds no non-empty line (the header may still follow).
    """
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        line = data[start:end]
        if line.strip():
            if not is_header(line):
                return data
            ignored.header += 1
            return data[:start] + data[end:]
        start = end + 1
    return None
