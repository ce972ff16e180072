"""Test helpers: run fio with its own I/O log, read traces, compare multisets."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np

import schemas
from recorder.tracefile import open_trace

OP = schemas.enum("op")
_FIO_OPS = {"read": OP["read"], "write": OP["write"], "trim": OP["discard"], "sync": OP["flush"]}
IOTAPE = [sys.executable, "-m", "iotape"]


def fio_args(
    filename: str,
    iolog: Path,
    *,
    ios: int = 3000,
    rw: str = "randrw",
    bssplit: str = "4k/40:32k/30:128k/30",
    iodepth: int = 8,
    extra: list[str] | None = None,
) -> list[str]:
    return [
        "fio",
        "--name=iotape-test",
        f"--filename={filename}",
        "--direct=1",
        f"--rw={rw}",
        f"--bssplit={bssplit}",
        "--ioengine=io_uring",
        f"--iodepth={iodepth}",
        f"--number_ios={ios}",
        "--size=100%",
        f"--write_iolog={iolog}",
        "--randseed=42",
        "--output-format=terse",
        *(extra or []),
    ]


def fio_multiset(iolog: Path) -> Counter:
    """(op, offset, bytes) of every I/O in a fio iolog (version 2, or 3 with timestamps)."""
    lines = iolog.read_text().splitlines()
    skip = 1 if lines and lines[0].strip() == "fio version 3 iolog" else 0
    out: Counter = Counter()
    for line in lines[1:]:
        parts = line.split()[skip:]
        if len(parts) == 4 and parts[1] in _FIO_OPS:
            out[(_FIO_OPS[parts[1]], int(parts[2]), int(parts[3]))] += 1
    return out


def trace_records(path: Path) -> np.ndarray:
    return open_trace(path).read_all()


def trace_multiset(recs: np.ndarray) -> Counter:
    return Counter(
        zip(recs["op"].tolist(), recs["offset"].tolist(), recs["bytes"].tolist(), strict=True)
    )


def iotape(*args: str, check: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [*IOTAPE, *args], capture_output=True, text=True, check=check, timeout=timeout
    )
    # Whatever a test gives a command, its user never sees a Python traceback.
    assert "Traceback (most recent call last)" not in res.stderr, res.stderr
    return res


def completed_ios(name: str) -> int:
    """Reads and writes the kernel has completed on block device NAME (/sys/block)."""
    fields = Path(f"/sys/block/{name}/stat").read_text().split()
    return int(fields[0]) + int(fields[4])


def finish_loader(rec: subprocess.Popen[str], timeout: float) -> None:
    """Waits for a loader (iotape-rec) to exit 0; kills it if the wait fails, so no
    loader outlives the test."""
    try:
        _, err = rec.communicate(timeout=timeout)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
    assert rec.returncode == 0, err
