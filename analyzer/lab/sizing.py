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
# removes closed logs of earlier runs when it needs room (workload docs). A log on a
# block device is a region of 64 files of 1 MiB (workload/layout.py), one per database
# (exchange2013 has no storage groups); 32 MiB more of slack.
LOG_MB = 96
LOG_REGION_MB = 64


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

    def controller_share(self, controllers: int) -> int:
        """Databases on each controller: the databases split equally (the published
        run: 6 databases and their 6 logs, 3 of each per controller)."""
        if self.databases % controllers:
            raise IotapeError(
                f"--databases {self.databases}: {controllers} controllers take an equal "
                "share each (the published run: 6, 3 per controller)"
            )
        return self.databases // controllers

    def controller_mb(self, controllers: int = 1) -> int:
        """Each controller's device (MiB): its share of the databases, a sixteenth more,
        a log region per database and the slack (one controller, one database:
        `device_mb`)."""
        k = self.controller_share(controllers)
        db = -(-self.db_mb * k // self.databases)
        return db + db // 16 + k * LOG_REGION_MB + LOG_MB - LOG_REGION_MB

    def controller_ssd_mb(self, controllers: int = 1) -> int:
        """Each controller's SSD (MiB, whole units): its share of `ssd_mb` (the
        published: 400 GB per controller, of 800)."""
        unit_mb = self.unit_kb / 1024
        each = int(self.ssd_mb / controllers / unit_mb) * unit_mb
        if each < unit_mb:
            raise IotapeError(
                f"--db-mb {self.db_mb}: {controllers} controllers' SSD of {self.ssd_mb} MiB "
                f"holds no {self.unit_kb} KiB unit each"
            )
        return int(each)


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
