"""Building blktrace binary files for the importer tests."""

from __future__ import annotations

import struct
from pathlib import Path

from iotape.recorder import blktrace_import as bt

ACT = {ch: i for i, ch in enumerate(bt.ACTIONS) if ch != "?"}
CAT = {"R": bt.TC_READ, "W": bt.TC_WRITE, "FW": bt.TC_FLUSH | bt.TC_WRITE, "FN": bt.TC_FLUSH}
SDA = (8 << 20) | 0
# The sample traces that ship with the project (traces/README.md).
TRACES = Path(__file__).resolve().parents[1] / "traces"


def trace(
    seq: int,
    t: int,
    act: str,
    cat: int,
    sector: int = 0,
    nbytes: int = 0,
    pid: int = 1,
    cpu: int = 0,
    error: int = 0,
    pdu: bytes = b"",
    dev: int = SDA,
    low: int | None = None,
) -> bytes:
    action = ((cat << 16) | (ACT[act] if low is None else low)) & 0xFFFFFFFF
    head = bt.TRACE.pack(
        bt.MAGIC | bt.VERSION, seq, t, sector, nbytes, action, pid, dev, cpu, error, len(pdu)
    )
    return head + pdu


def notify_comm(t: int, pid: int, name: bytes, cpu: int = 0) -> bytes:
    return trace(0, t, "Q", bt.TC_NOTIFY, pid=pid, cpu=cpu, pdu=name.ljust(16, b"\0"), low=0)


def notify_time(t: int, sec: int, nsec: int) -> bytes:
    return trace(0, t, "Q", bt.TC_NOTIFY, pdu=struct.pack("<II", sec, nsec), low=1)
