"""The HDD-like file: build/iotape-hdd (src/hdd.c) serving one file over FUSE with a
stated per-request service time (seek by distance, rotation, transfer), the file
backed by memory. A loop device over it (devices.py) is a block device whose every
request takes a disk's time, seen by the recorder as the device's own.

The model's defaults are a 10K rpm enterprise SAS disk's published figures: 3 ms
average rotational latency (half a turn at 10,000 rpm), about 3.5-4 ms average
seek for reads (0.5 ms more for writes), 150 MB/s sustained transfer; with the
seek from SETTLE_MS at the shortest distance to FULL_MS across the whole file,
growing with the square root of the distance, a random seek averages
SETTLE + (FULL - SETTLE) x 8/15 (the mean of sqrt(|U1 - U2|)).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analyzer.lab.fusedisk import FuseDisk, HddError

__all__ = ["SERVER", "HddError", "HddFile", "HddModel"]

SERVER = Path(__file__).with_name("build") / "iotape-hdd"


@dataclass(frozen=True)
class HddModel:
    """One disk's service time: a set of `spindles` such disks, each request served
    by the next free one."""

    spindles: int = 1
    rpm: float = 10_000
    settle_ms: float = 0.5
    full_ms: float = 7.0
    mb_s: float = 150.0
    write_extra_ms: float = 0.5
    seed: int = 1

    def mean_random_ms(self, nbytes: int = 4096) -> float:
        """The model's mean service time of a random request of `nbytes`."""
        seek = self.settle_ms + (self.full_ms - self.settle_ms) * 8 / 15
        return seek + 30_000 / self.rpm + nbytes / (self.mb_s * 1e3)


class HddFile(FuseDisk):
    """The HDD-like server and its mount; close() unmounts and ends it."""

    def __init__(
        self, size: int, model: HddModel, log: Path | None = None, prefix: str = "iotape-lab-hdd-"
    ) -> None:
        self.model = model
        m = model
        nums = (m.spindles, m.rpm, m.settle_ms, m.full_ms, m.mb_s, m.write_extra_ms, m.seed)
        super().__init__(SERVER, size, [str(n) for n in nums], prefix, log)
