"""blkparse's default text output and the ftrace `blk` tracer's classic lines."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from recorder.importers.blktrace import Event, rwbs_cat

# blkparse: "259,0  1  7  0.000056992  0  C  RA 2348060440 + 8 [0]"
# ftrace blk_classic has no sequence column: "7,0  1  2530.974341911 18942  Q  RS 0 + 8 [dd]"
_DEV = re.compile(r"^(\d+),(\d+)$")
_TIME = re.compile(r"^(\d+)\.(\d{1,9})$")


class BadLine(ValueError):
    """A text line that is not an event: the field and why."""

    def __init__(self, fld: str, why: str) -> None:
        super().__init__(f"field {fld}: {why}")


def parse_text_line(line: str) -> Event | None:
    """One event from a blkparse (default format) or ftrace blk_classic line.

    Returns None for lines that are not events of a request (plug, unplug, messages).
    Raises BadLine for a line that looks like an event but is malformed.
    """
    f = line.split()
    m = _DEV.match(f[0]) if f else None
    if m is None:
        raise BadLine("device", f"{f[0] if f else line!r} is not MAJOR,MINOR")
    has_seq = len(f) > 3 and _TIME.match(f[3]) is not None
    k = 3 if has_seq else 2
    if len(f) < k + 4:
        raise BadLine("action", "line ends early")
    tm = _TIME.match(f[k])
    if tm is None:
        raise BadLine("time", f"{f[k]!r} is not SECONDS.NANOSECONDS")
    t = int(tm.group(1)) * 1_000_000_000 + int(tm.group(2).ljust(9, "0"))
    if not f[k + 1].isdigit():
        raise BadLine("pid", f"{f[k + 1]!r} is not a number")
    pid = int(f[k + 1])
    act = f[k + 2]
    dev = (int(m.group(1)) << 20) | int(m.group(2))
    if act not in "QMFGSRDCXIBA" or len(act) != 1:
        return None  # P, U, T, m (message) and others say nothing about one request
    try:
        cat = rwbs_cat(f[k + 3])
    except ValueError as e:
        raise BadLine("rwbs", str(e)) from None
    rest = f[k + 4 :]
    sector, nbytes, err, new_sector = 0, 0, 0, 0
    try:
        if rest and rest[0].isdigit():
            sector = int(rest[0])
            if len(rest) > 2 and rest[1] == "+":
                nbytes = int(rest[2]) * 512
            elif len(rest) > 2 and rest[1] == "/":
                new_sector = int(rest[2])
        if act == "C" and rest and rest[-1].startswith("[") and rest[-1].endswith("]"):
            err = int(rest[-1][1:-1])
    except ValueError:
        raise BadLine("sector", f"{' '.join(rest)!r} is not SECTOR + COUNT") from None
    return Event(t, act, cat, dev, sector, nbytes, pid, err & 0xFFFF, new_sector)


def text_comm(line: str) -> tuple[int, bytes] | None:
    """(pid, comm) named on a Q line's `[comm]`, for the records' comm column."""
    if " Q " not in line:
        return None
    lb, rb = line.rfind("["), line.rfind("]")
    if lb < 0 or rb < lb:
        return None
    name = line[lb + 1 : rb]
    if name == "(null)":
        return None
    f = line.split()
    k = 3 if len(f) > 3 and _TIME.match(f[3]) else 2
    return (int(f[k + 1]), name.encode()[:16]) if f[k + 1].isdigit() else None


# blkparse's per-CPU and total summary: the self-check reads these.
_EVENTS = re.compile(r"^Events \((\d+),(\d+)\): (\d+) entries")
_QUEUED = re.compile(r"Reads Queued:\s+(\d+),.*Writes Queued:\s+(\d+),")
_SECTION = re.compile(r"^(CPU\d+|Total) \((\d+),(\d+)\):")


@dataclass
class Summary:
    """blkparse's footer: event and queue counts per device."""

    events: dict[str, int] = field(default_factory=dict)
    queued_cpu: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    queued_total: dict[str, int] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # our own event lines per device
    queued: dict[str, int] = field(default_factory=dict)  # our own Q lines per device
    _section: tuple[str, str] | None = None

    def feed(self, line: str) -> bool:
        """True when the line belongs to the summary."""
        s = line.strip()
        m = _SECTION.match(s)
        if m:
            self._section = (m.group(1), f"{m.group(2)},{m.group(3)}")
            return True
        m = _EVENTS.match(s)
        if m:
            self.events[f"{m.group(1)},{m.group(2)}"] = int(m.group(3))
            return True
        m = _QUEUED.search(s)
        if m and self._section:
            n = int(m.group(1)) + int(m.group(2))
            kind, dev = self._section
            if kind == "Total":
                self.queued_total[dev] = n
            else:
                self.queued_cpu[dev] += n
            return True
        return bool(s) and (
            s.startswith(("Throughput", "Skips", "Input file"))
            or (":" in s and not _DEV.match(s.split()[0]))
        )

    def check(self) -> dict:
        """Compare our own counts with blkparse's; {"ok": bool, ...}."""
        lines, queued = self.lines, self.queued
        out: dict = {"present": bool(self.events)}
        bad = []
        for dev, n in self.events.items():
            if lines.get(dev, 0) != n:
                bad.append(f"{dev}: {lines.get(dev, 0)} event lines, summary says {n}")
        want_q = self.queued_total or self.queued_cpu
        for dev, n in want_q.items():
            if queued.get(dev, 0) != n:
                bad.append(f"{dev}: {queued.get(dev, 0)} queued, summary says {n}")
        out["ok"] = not bad
        out["mismatches"] = bad
        return out
