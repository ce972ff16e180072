"""Building blktrace binary files for the importer tests."""

from __future__ import annotations

import struct
from pathlib import Path

from recorder.importers import blktrace as bt

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


# CloudPhysics vscsi, as libCacheSim's vscsiReader defines the records (little-endian).
V1 = struct.Struct("<IIIHHQQ")  # sn len nSG cmd ver lbn ts: 32 bytes
V2 = struct.Struct("<HHIIIQQQ")  # cmd ver sn len nSG lbn ts rt: 40 bytes
# (cmd, lbn, len, ts µs): WRITE(6) is 0x0a and 2,570 bytes is 0x0a0a, so the first
# bytes hold the newlines that once made `auto` reject a real file.
VSCSI_REQS = [
    (0x0A, 10, 0x0A0A, 1_000_010),
    (0x28, 8, 4096, 1_000_000),
    (0x2A, 2048, 65536, 1_000_500),
]


def vscsi(version: int, n: int = 40) -> bytes:
    out = []
    for i in range(n):
        cmd, lbn, size, ts = VSCSI_REQS[i % 3]
        sn = 0x0200_000A + i  # a serial whose high byte reads as version 2 in a v1 record
        if version == 1:
            out.append(V1.pack(sn, size, 1, cmd, 0x0100, lbn + i, ts + 1000 * i))
        else:
            out.append(V2.pack(cmd, 0x0200, sn, size, 1, lbn + i, ts + 1000 * i, 25 + i))
    return b"".join(out)
