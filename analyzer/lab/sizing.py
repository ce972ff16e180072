"""The published hybrid-array experiment (reference/msa2040_hybrid.json) sized down to
this machine: the database footprint is chosen, the SSD read cache and the SSD tier
keep the published ratio to it (800 GB of SSD for 1,000 GB of mailboxes: 0.8), in
whole 4 MiB pages."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from base.errors import IotapeError

REFERENCE = Path(__file__).with_name("reference") / "msa2040_hybrid.json"
MIB = 1 << 20
# Room on the slow device for the log stream next to the databases: the engine
# removes closed logs of earlier runs when it needs room (workload docs).
LOG_MB = 96


@cache
def reference() -> dict[str, Any]:
    """The published experiment's configuration, proportions and baseline."""
    doc: dict[str, Any] = json.loads(REFERENCE.read_text())
    return doc


@dataclass(frozen=True)
class Sizing:
    """One lab's sizes (MiB): the databases, the SSD (cache or tier), the devices."""

    db_mb: int
    mailboxes: int
    mailbox_size_mb: float
    databases: int
    ssd_mb: int
    unit_kb: int
    device_mb: int

    @property
    def ssd_ratio(self) -> float:
        return self.ssd_mb / self.db_mb


def size(db_mb: int, mailboxes: int, databases: int, unit_kb: int = 4096) -> Sizing:
    """The lab for a database footprint of `db_mb` MiB over `mailboxes` mailboxes."""
    if db_mb < 8:
        raise IotapeError(f"--db-mb {db_mb}: at least 8 MiB of database")
    if mailboxes < databases:
        raise IotapeError(f"--mailboxes {mailboxes}: fewer than --databases {databases}")
    ratio = float(reference()["proportions"]["ssd_to_database"])
    unit_mb = unit_kb / 1024
    ssd_mb = int(db_mb * ratio / unit_mb) * unit_mb
    if ssd_mb < unit_mb:
        raise IotapeError(f"--db-mb {db_mb}: {ratio:.0%} of it holds no {unit_kb} KiB unit")
    per_mailbox = db_mb / mailboxes
    if per_mailbox < 0.125:
        raise IotapeError(f"--mailboxes {mailboxes}: under 128 KiB each of {db_mb} MiB")
    return Sizing(
        db_mb=db_mb,
        mailboxes=mailboxes,
        mailbox_size_mb=round(per_mailbox, 4),
        databases=databases,
        ssd_mb=int(ssd_mb),
        unit_kb=unit_kb,
        device_mb=db_mb + db_mb // 16 + LOG_MB,
    )
