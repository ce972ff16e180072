"""fio iolog version 3 files, in the unit fio 3.33 really reads.

Measured against fio 3.33 (tests/test_replay_plan.py keeps the facts checked):
- version-3 timestamps are MICROSECONDS (fio's HOWTO says milliseconds; a log
  written in ms replays 1000x fast);
- fio waits `t[i] - t[i-1]` before entry i, except that a previous timestamp of
  exactly 0 means "no delay" (`delay_since_ttime` treats 0 as unset), so a log
  whose first entries are at 0 loses its first gap. iotape's logs start at 1 us.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from iotape.errors import IotapeError

HEADER = "fio version 3 iolog"
ACTIONS = ("read", "write", "sync", "trim")
READ, WRITE, SYNC, TRIM = range(4)
T0_US = 1


def check_filename(path: str) -> None:
    # fio reads each field with %256s: no whitespace, at most 256 bytes.
    if any(c.isspace() for c in path) or len(path.encode()) > 256:
        raise IotapeError(
            f"--target {path}: fio's iolog cannot name a path with spaces or over 256 bytes"
        )


def lines(
    filename: str, t_us: np.ndarray, action: np.ndarray, offset: np.ndarray, length: np.ndarray
) -> str:
    """The text of one iolog: header, add/open, the entries, close."""
    check_filename(filename)
    t = np.asarray(t_us, dtype=np.int64) + T0_US
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
    head = f"{HEADER}\n{T0_US} {filename} add\n{T0_US} {filename} open\n"
    return head + "".join(body) + f"{end} {filename} close\n"


def write(path: Path, filename: str, t_us, action, offset, length) -> None:
    path.write_text(lines(filename, t_us, action, offset, length))
