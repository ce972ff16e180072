"""Building trace files for the trace reader, check and CLI tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import schemas
from recorder.tracefile import CHUNK_HEADER_SIZE, RECORD_SIZE, TraceWriter, open_trace

DT = schemas.record_dtype()
SDA = (8 << 20) | 0
SDA1 = (8 << 20) | 1
NVME = (259 << 20) | 0
PART_START = 1 << 20
PART_SIZE = 64 << 20


def header(**extra) -> dict:
    h = {
        "mono_start_ns": 5_000_000_000,
        "wall_start_ns": 1_700_000_000_000_000_000,
        "host": "lab1",
        "kernel": "6.8.0-test",
        "command_line": ["iotape", "record", "-d", "/dev/sda1"],
        "recorder": {"backend": "test", "version": "0.1.0"},
        "devices": [
            {
                "name": "sda",
                "dev": SDA,
                "major": 8,
                "minor": 0,
                "model": "ST4000NM",
                "firmware": "SN05",
                "rotational": True,
                "logical_block_size": 512,
                "capacity_bytes": 4_000_787_030_016,
                "partition": {
                    "name": "sda1",
                    "dev": SDA1,
                    "start_bytes": PART_START,
                    "size_bytes": PART_SIZE,
                },
            },
            {
                "name": "nvme0n1",
                "dev": NVME,
                "major": 259,
                "minor": 0,
                "model": "Samsung PM9A3",
                "firmware": "GDC5",
                "rotational": False,
                "logical_block_size": 4096,
                "capacity_bytes": 1_920_383_410_176,
                "partition": None,
            },
        ],
        "filters": {},
        "streams": {"0": "other", "1": "db-read", "3": "log-write", "40": "mylabel"},
        "labels": [],
        "metadata": {},
    }
    h.update(extra)
    return h


def random_records(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = np.zeros(n, dtype=DT)
    for name in DT.names:
        if name == "comm":
            continue
        info = np.iinfo(DT[name])
        r[name] = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=DT[name])
    # Names of 0..16 printable characters, NUL-padded like the kernel's.
    chars = rng.integers(ord("a"), ord("z"), size=(n, 16), endpoint=True, dtype=np.uint8)
    lengths = rng.integers(0, 16, size=n, endpoint=True)
    chars[np.arange(16) >= lengths[:, None]] = 0
    r["comm"] = chars.view("S16").reshape(n)
    return r


def workload_records(n: int, seed: int = 0) -> np.ndarray:
    """Plausible records: small ops and streams, two devices, increasing times."""
    rng = np.random.default_rng(seed)
    r = np.zeros(n, dtype=DT)
    r["ts_queue_ns"] = np.sort(rng.integers(1, 10**9, size=n))
    r["ts_issue_ns"] = r["ts_queue_ns"] + rng.integers(0, 1000, size=n)
    r["ts_complete_ns"] = r["ts_issue_ns"] + rng.integers(1, 10**6, size=n)
    r["dev"] = rng.choice([SDA, NVME], size=n)
    r["offset"] = rng.integers(0, 1 << 30, size=n) // 512 * 512
    r["bytes"] = rng.choice([4096, 32768, 262144], size=n)
    r["op"] = rng.integers(0, 3, size=n)
    r["stream"] = rng.choice([0, 1, 3, 40], size=n)
    r["error"] = np.where(rng.random(n) < 0.01, -5, 0)
    r["pid"] = 1234
    r["tid"] = rng.integers(1234, 1240, size=n)
    r["comm"] = rng.choice([b"ese-user0", b"ese-log", b"kworker/0:1H"], size=n)
    return r


def make_trace(
    path: Path,
    records: np.ndarray,
    chunk_records: int = 100,
    footer: dict | None = None,
    compression: str = "none",
) -> Path:
    """A trace of `records`; plain chunks (format version 1) unless `compression` says."""
    with TraceWriter(path, header(), chunk_records=chunk_records, compression=compression) as w:
        w.write(records)
        return w.close(footer or {"stop_reason": "duration", "lost": {}, "pre_start": 0})


def write_parts(path: Path, parts: list[np.ndarray], wakes: bool, sched: bool) -> Path:
    """A one-device trace of the one-record arrays `parts` (requests, and wake or
    sched records where `wakes`/`sched`), in completion order."""
    from recorder.tracefile.writer import write_trace

    r = np.zeros(len(parts), DT)
    for i, x in enumerate(parts):
        r[i] = x[0]
    r = r[np.argsort(r["ts_complete_ns"], kind="stable")]
    h = header()
    h["devices"] = h["devices"][:1]
    return write_trace(path, h, r, wakes=wakes, sched=sched)


def chunk_offsets(path: Path) -> list[int]:
    """Byte offsets of the chunks of a valid file, found by walking it."""
    with open_trace(path) as t:
        return [info.offset for info, _ in t._walk()]


def chunk_extents(path: Path) -> list[tuple[int, int]]:
    """(offset, end) of the chunks of a valid file, plain or compressed."""
    with open_trace(path) as t:
        return [(info.offset, info.end) for info, _ in t._walk()]


def chunk_size(count: int) -> int:
    return CHUNK_HEADER_SIZE + count * RECORD_SIZE
