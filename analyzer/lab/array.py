"""The emulated array: build/iotape-array (src/array.c, its model src/arraymodel.c)
serving one file over FUSE, one controller of an MSA-like array: a write-back cache in
front of a RAID 6 set of 10K rpm disks, each disk with its own head and an NCQ-like
queue; optionally an SSD performance tier or read cache of 4 MiB units with the
engine's (and the simulator's) policies. A loop device over it (blockdev.py,
devices.py) is a block device with the array's behaviour. The model's figures and
their sources are array_model.toml, read here and passed to the server; docs/hybrid.md
says what the model is and what it leaves out."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from analyzer.lab.fusedisk import FuseDisk

SERVER = Path(__file__).with_name("build") / "iotape-array"
MODEL_FILE = Path(__file__).with_name("array_model.toml")
PAGE = 4096


@dataclass(frozen=True)
class ArrayModel:
    """array_model.toml's values; `load` reads them, `replace` changes some."""

    disks: int
    chunk_kb: int
    rpm: float
    settle_read_ms: float
    avg_read_ms: float
    settle_write_ms: float
    avg_write_ms: float
    mb_s: float
    ack_ms: float
    cache_mb_s: float
    dirty_mb: float
    watermark: float
    destage_delay_ms: float
    destage_depth: int
    ncq_window: int
    age_weight: float
    seed: int
    tier_mb: float
    tier_unit_kb: int
    tier_stats_s: float
    tier_migrate_s: float
    tier_half_life_s: float
    ssd_read_ms: float
    ssd_write_ms: float
    ssd_mb_s: float
    ssd_parallel: int
    cache_ssd_mb: float
    rt_priority: int
    reader_batch: int

    @classmethod
    def load(
        cls, path: Path = MODEL_FILE, changes: Mapping[str, float] | None = None
    ) -> ArrayModel:
        """The file's values, with `changes` over them (ValueError: an unknown key,
        or a whole number's key given a fraction)."""
        table = tomllib.loads(path.read_text())
        names = {f.name for f in fields(cls)}
        if set(table) != names:
            raise ValueError(f"{path}: keys {sorted(set(table) ^ names)} missing or unknown")
        whole = {f.name for f in fields(cls) if f.type == "int"}
        values: dict[str, Any] = {k: table[k]["value"] for k in names}
        for k, v in {**values, **(changes or {})}.items():
            if k not in names:
                raise ValueError(f"{k}: not a figure of the array's model ({path})")
            if k in whole and v != int(v):
                raise ValueError(f"{k}={v}: a whole number")
            values[k] = int(v) if k in whole else float(v)
        return cls(**values)

    def args(self) -> list[str]:
        """The server's KEY=VALUE arguments."""
        return [f"{k}={v}" for k, v in asdict(self).items()]

    @property
    def data_disks(self) -> int:
        return self.disks - 2

    def ack_ms_of(self, nbytes: int) -> float:
        """A cached write's (or a cache hit's) time: the acknowledgement and the bytes."""
        return self.ack_ms + nbytes / (self.cache_mb_s * 1e3)

    def random_read_ms(self, nbytes: int = 8192) -> float:
        """A disk's mean service of a random read of `nbytes` (no reordering: the mean
        seek, half a turn, the transfer)."""
        return self.avg_read_ms + 30_000 / self.rpm + nbytes / (self.mb_s * 1e3)

    def random_reads_per_s(self, nbytes: int = 8192) -> float:
        """The set's random-read rate with every disk busy, without reordering: each
        disk holds data (the parity rotates), each read is one disk's."""
        return self.disks * 1e3 / self.random_read_ms(nbytes)

    def rmw_ms(self, nbytes: int = 8192) -> float:
        """The disks' time for one small random write destaged alone, read-modify-write:
        three reads (data, P, Q: a seek, half a turn and the transfer each) and the three
        writes over them (a full turn each: back to where the read started)."""
        read = self.avg_read_ms + 30_000 / self.rpm + nbytes / (self.mb_s * 1e3)
        return 3 * read + 3 * 60_000 / self.rpm

    def destage_writes_per_s(self, nbytes: int = 8192) -> float:
        """The set's rate of small random writes once the cache is full: the disks'
        time divided by each write's read-modify-write (6 operations on 3 disks)."""
        return self.disks * 1e3 / self.rmw_ms(nbytes)


class ArrayFile(FuseDisk):
    """The array's server and its mount; close() unmounts and ends it."""

    def __init__(
        self,
        size: int,
        model: ArrayModel,
        log: Path | None = None,
        prefix: str = "iotape-lab-array-",
        backing: Path | None = None,
    ) -> None:
        self.model = model
        super().__init__(SERVER, size, model.args(), prefix, log, backing)
