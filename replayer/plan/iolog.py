"""fio iolog version 3 files, in the unit fio 3.33 really reads.

Measured against fio 3.33 (tests/replayer/test_replay_plan.py keeps the facts checked):
- version-3 timestamps are MICROSECONDS (fio's HOWTO says milliseconds; a log
  written in ms replays 1000x fast);
- fio waits `t[i] - t[i-1]` before entry i, except that a previous timestamp of
  exactly 0 means "no delay" (`delay_since_ttime` treats 0 as unset), so a log
  whose first entries are at 0 loses its first gap. iotape's logs start at 1 us.
- each wait is measured from the job's previous request (`td->last_issue`), and
  before a job's first entry that time is still zero: the zero of fio's clock.
  With `clocksource=cpu` that zero is fio's own start (it calibrates the CPU clock
  then, before any job exists), the same instant for every job. A job whose first
  *queued* entry carries a delay therefore waits until that many microseconds after
  fio started: a start shared by all jobs, whenever each finished setting up.
  The first queued entry only carries a delay if a line before it set the time
  reference without being queued: fio 3.33 takes a v3 line's time before it
  rejects a `wait` action ("iolog: ignoring wait command with version 3", once
  per job, on stderr), so iotape's logs open with `1 FILE wait 0 0`.

A trace with more pieces than one fio process may hold (exact.py: MAX_JOBS) is
replayed by several fio processes, one per window of the trace, and they must
share one clock: with `clocksource=clock_gettime` fio's clock is CLOCK_MONOTONIC
(since boot, the same in every process and in the recorder), so a job's first
wait counts from the machine's boot. Such logs carry the trace's time 0 at
MONO_BASE_US, and their `wait` line a fixed-width field that `iotape replay run`
stamps with MONO_BASE_US - (the monotonic microsecond at which the trace's 0
replays): the first wait is then `t - (MONO_BASE_US - base)` = base + t, an
absolute time, in every process alike. Unstamped (all zeros), fio treats the
wait line's time as unset and each job starts its log at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from base.errors import IotapeError

HEADER = "fio version 3 iolog"
ACTIONS = ("read", "write", "sync", "trim")
READ, WRITE, SYNC, TRIM = range(4)
T0_US = 1
# The file is added and opened this long before the first request, so the open
# itself (tens of microseconds on a block device) does not make that request late.
LEAD_US = 1000
# Where the trace's 0 lies in a stamped log: far beyond any uptime (31 years),
# so the stamp MONO_BASE_US - base stays positive.
MONO_BASE_US = 10**15
STAMP_WIDTH = 20
STAMP_AT = len(HEADER) + 1  # the wait line's time field starts the second line


def check_filename(path: str) -> None:
    # fio reads each field with %256s: no whitespace, at most 256 bytes.
    if any(c.isspace() for c in path) or len(path.encode()) > 256:
        raise IotapeError(
            f"--target {path}: fio's iolog cannot name a path with spaces or over 256 bytes"
        )


def log_time_us(t_us, start_us: int | None = None):
    """A request's timestamp in the log, from its time in the trace (us)."""
    return t_us + T0_US + (start_us or 0)


def first_entry_us(first_request_ts: int) -> int:
    """The timestamp of a log's first entry after its `wait` line (the file's add),
    from its first request's timestamp in the log."""
    return max(T0_US + 1, first_request_ts - LEAD_US)


def lines(
    filename: str,
    t_us: np.ndarray,
    action: np.ndarray,
    offset: np.ndarray,
    length: np.ndarray,
    start_us: int | None = None,
    stamped: bool = False,
) -> str:
    """The text of one iolog: header, add/open, the entries, close.

    With `start_us`, times are microseconds after fio's start (clocksource=cpu),
    the trace's time 0 falling at `start_us`: the log opens with the `wait` line
    that makes its first wait absolute (see the module doc). `stamped` leaves the
    wait line's time as a fixed-width field for `stamp` (several fio processes)."""
    check_filename(filename)
    t = log_time_us(np.asarray(t_us, dtype=np.int64), start_us)
    names = np.asarray(ACTIONS, dtype=object)[np.asarray(action, dtype=np.int64)]
    body = [
        f"{ts} {filename} {a} {o} {n}\n"
        for ts, a, o, n in zip(
            t.tolist(),
            names.tolist(),
            np.asarray(offset).tolist(),
            np.asarray(length).tolist(),
            strict=True,
        )
    ]
    end = int(t[-1]) if len(t) else T0_US
    if start_us is None:
        head = f"{HEADER}\n{T0_US} {filename} add\n{T0_US} {filename} open\n"
    else:
        at = first_entry_us(int(t[0]) if len(t) else T0_US)
        wait = "0" * STAMP_WIDTH if stamped else str(T0_US)
        head = f"{HEADER}\n{wait} {filename} wait 0 0\n{at} {filename} add\n{at} {filename} open\n"
    return head + "".join(body) + f"{end} {filename} close\n"


def write(
    path: Path,
    filename: str,
    t_us,
    action,
    offset,
    length,
    start_us: int | None = None,
    stamped: bool = False,
) -> None:
    path.write_text(lines(filename, t_us, action, offset, length, start_us, stamped))


def stamp(path: Path, base_us: int) -> None:
    """Make a stamped log's times absolute: the trace's 0 at monotonic `base_us`."""
    value = MONO_BASE_US - base_us
    if not 0 < value < 10**STAMP_WIDTH:
        raise IotapeError(f"{path}: cannot stamp base {base_us} us")
    with open(path, "r+b") as f:
        f.seek(STAMP_AT)
        head = f.read(STAMP_WIDTH + 1)
        if not head[:STAMP_WIDTH].isdigit() or head[-1:] != b" ":
            raise IotapeError(f"{path}: not a stamped iotape iolog (plan again)")
        # A second run of the same plan overwrites the first run's stamp.
        f.seek(STAMP_AT)
        f.write(f"{value:0{STAMP_WIDTH}d}".encode())


# Lanes (exact.lanes): version-2 iologs, whose `wait` action is absolute.
HEADER_V2 = "fio version 2 iolog"


def lines_v2(
    filename: str,
    t_us: np.ndarray,
    action: np.ndarray,
    offset: np.ndarray,
    length: np.ndarray,
    start_us: int,
) -> list[str]:
    """The entry lines of one lane's version-2 iolog (no header, add, open or
    close): before each request whose millisecond differs from the one before
    it, `FILE wait MS US`.

    fio 3.33 sleeps a v2 `wait` until MS milliseconds after its genesis
    (`mtime_since_genesis`), and not at all if that is past: every request's
    time is absolute, so no lateness carries over to the next request (a v3
    entry waits from the previous issue). fio reads the wait's last field into
    nothing; it holds the microseconds the millisecond rounded off, so that the
    log keeps each request's time (`replay run` relabels by it: entry_times_us).
    MS is rounded down: fio wakes at MS plus the sub-millisecond phase the job
    had when it reached the wait, on average half a millisecond later."""
    t = np.asarray(t_us, dtype=np.int64) + start_us
    ms, rest = t // 1000, t % 1000
    new = np.ones(len(t), bool)
    new[1:] = ms[1:] != ms[:-1]
    names = np.asarray(ACTIONS, dtype=object)[np.asarray(action, dtype=np.int64)]
    out = []
    for w, m, r, a, o, n in zip(
        new.tolist(),
        ms.tolist(),
        rest.tolist(),
        names.tolist(),
        np.asarray(offset).tolist(),
        np.asarray(length).tolist(),
        strict=True,
    ):
        if w:
            out.append(f"{filename} wait {m} {r}\n")
        out.append(f"{filename} {a} {o} {n}\n")
    return out


def head_v2(filename: str) -> str:
    check_filename(filename)
    return f"{HEADER_V2}\n{filename} add\n{filename} open\n"


def tail_v2(filename: str) -> str:
    return f"{filename} close\n"


def write_v2(path: Path, filename: str, t_us, action, offset, length, start_us: int) -> None:
    with open(path, "w") as f:
        f.write(head_v2(filename))
        f.writelines(lines_v2(filename, t_us, action, offset, length, start_us))
        f.write(tail_v2(filename))


def entry_times_us(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(time in us, fields) of each read/write/sync/trim line of a v3 or v2 iolog
    (its header line excluded): a v2 entry's time is its last wait's."""
    return list(iter_entry_times_us(lines))


def iter_entry_times_us(lines: Iterable[str], now: int = 0) -> Iterator[tuple[int, list[str]]]:
    """entry_times_us, one line at a time (a lane's log can be long); `now` is the
    last wait's time when `lines` go on from an earlier part of the log."""
    for line in lines:
        f = line.split()
        if len(f) == 5 and f[2] in ACTIONS:
            yield int(f[0]), f
        elif len(f) == 4 and f[1] == "wait":
            now = int(f[2]) * 1000 + int(f[3])
        elif len(f) == 4 and f[1] in ACTIONS:
            yield now, [str(now), *f]
