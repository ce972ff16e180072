"""Stream-aware scaling of a trace to N mailboxes on K databases in G storage groups.

Transactional streams scale with mailboxes per database, background maintenance
and backup with the number of databases (one scan per database, whatever its
load), log replication with the number of extra copies (the groups:
schemas/trace_record.toml [stream_group]). The trace is taken to be K0
databases' worth of I/O, so one database's share of a stream is 1/K0 of it; each
of the K targets gets that share times its stream's factor.

Storage groups (schemas/workload_header.py: database i is in group i % G): the
databases of a group share one log, so the log streams (`per_log`) are replayed
once per group, at the sum of its databases' shares. Scaling keeps the trace's
databases per group, ceil(K0/G0), and adds groups as the databases grow, as
Exchange 2000/2003 deployments did; `--storage-groups G` sets G instead. A trace
without groups (G0 absent or K0) has one log per database, and so has its plan.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from base.errors import IotapeError
from schemas import stream_group, streams
from schemas.workload_header import COPIES, DATABASES, MAILBOXES, STORAGE_GROUPS

# A database's log I/O: its storage group's, when the group holds several databases.
PER_LOG = frozenset(stream_group("per_log"))


@dataclass(frozen=True)
class Layout:
    """K databases in G storage groups, database i in group i % G."""

    databases: int
    storage_groups: int

    def members(self, group: int) -> list[int]:
        return list(range(group, self.databases, self.storage_groups))

    def group_of(self, db: int) -> int:
        return db % self.storage_groups

    @property
    def shared_logs(self) -> bool:
        """Whether some group's log carries several databases' logs."""
        return self.storage_groups < self.databases

    def check_targets(self, mapping: dict[str, str]) -> None:
        """Refuse a --target that names a storage group the plan does not have, a
        stream a group does not hold, or a database's log that its group holds."""
        for name in mapping:
            spec = f"--target {name}"
            sg = re.fullmatch(r"sg(\d+)(?::(.+))?", name)
            if sg and int(sg[1]) >= self.storage_groups:
                raise IotapeError(
                    f"{spec}: no storage group sg{int(sg[1])}; the plan has "
                    f"{self.storage_groups} (sg0..sg{self.storage_groups - 1})"
                )
            if sg and sg[2] is not None and sg[2] not in PER_LOG:
                raise IotapeError(
                    f"{spec}: a storage group holds only its log streams "
                    f"({', '.join(sorted(PER_LOG))})"
                )
            db = re.fullmatch(r"db(\d+):(.+)", name)
            if db and self.shared_logs and db[2] in PER_LOG:
                g = self.group_of(int(db[1]))
                raise IotapeError(
                    f"{spec}: db{int(db[1])}'s log is storage group sg{g}'s "
                    f"({', '.join(f'db{d}' for d in self.members(g))}); name it sg{g}:{db[2]}"
                )

    def describe(self) -> list[str]:
        """One line per group: the databases it holds."""
        return [
            f"sg{g}: " + ", ".join(f"db{d}" for d in self.members(g))
            for g in range(self.storage_groups)
        ]


@dataclass(frozen=True)
class Scaling:
    mailboxes: float
    databases: int
    copies: int
    from_mailboxes: float
    from_databases: int
    from_copies: int
    storage_groups: int
    from_storage_groups: int

    @property
    def layout(self) -> Layout:
        return Layout(self.databases, self.storage_groups)

    @property
    def grouped(self) -> bool:
        """Whether storage groups are in play: the trace's or the plan's databases
        share logs. Otherwise the plan is what it was before groups existed."""
        return (
            self.storage_groups != self.databases or self.from_storage_groups != self.from_databases
        )

    def as_dict(self) -> dict[str, Any]:
        """plan.json's "scaling": the storage groups only when in play (absent:
        one log per database, as the trace header has it)."""
        out = asdict(self)
        if not self.grouped:
            del out["storage_groups"], out["from_storage_groups"]
        return out

    def describe(self) -> str:
        def groups(g: int) -> str:
            return f" in {g} storage group(s)" if self.grouped else ""

        return (
            f"{self.from_mailboxes:g} mailboxes on {self.from_databases} database(s)"
            f"{groups(self.from_storage_groups)}, "
            f"{self.from_copies} cop(ies) -> {self.mailboxes:g} mailboxes on "
            f"{self.databases} database(s){groups(self.storage_groups)}, "
            f"{self.copies} cop(ies)"
        )


def _meta_number(meta: dict, key: str, kind: type) -> float | int | None:
    if key not in meta:
        return None
    try:
        return kind(float(meta[key])) if kind is int else kind(meta[key])
    except (TypeError, ValueError):
        raise IotapeError(f"trace metadata {key}={meta[key]!r}: not a number") from None


def _groups(
    meta: dict, k0: int, k: int, groups: int | None, from_groups: int | None
) -> tuple[int, int]:
    """(G, G0): the trace's groups from its metadata (absent: one per database),
    and the plan's, keeping the trace's databases per group unless given."""
    g0 = from_groups if from_groups is not None else _meta_number(meta, STORAGE_GROUPS, int)
    what = "--from-storage-groups" if from_groups is not None else "trace storage_groups"
    g0 = k0 if g0 is None else int(g0)
    if not 1 <= g0 <= k0:
        raise IotapeError(f"{what} {g0}: must be between 1 and the trace's {k0} database(s)")
    if groups is None:
        groups = g0 if k == k0 else math.ceil(k / math.ceil(k0 / g0))
    if not 1 <= groups <= k:
        raise IotapeError(
            f"--storage-groups {groups}: must be between 1 and the {k} database(s) "
            "(each group holds at least one)"
        )
    return int(groups), g0


def resolve(
    meta: dict,
    mailboxes: float | None,
    databases: int | None,
    copies: int | None,
    from_mailboxes: float | None = None,
    from_databases: int | None = None,
    from_copies: int | None = None,
    storage_groups: int | None = None,
    from_storage_groups: int | None = None,
) -> Scaling | None:
    """The scaling asked for, with the trace's own figures from its metadata
    (strings when given by `iotape record --meta`), or None when none was asked."""
    if mailboxes is None and databases is None and copies is None and storage_groups is None:
        return None
    n0 = from_mailboxes if from_mailboxes is not None else _meta_number(meta, MAILBOXES, float)
    k0 = from_databases if from_databases is not None else _meta_number(meta, DATABASES, int)
    c0 = from_copies if from_copies is not None else _meta_number(meta, COPIES, int)
    k0 = k0 or 1
    c0 = c0 or 1
    if mailboxes is not None and n0 is None:
        raise IotapeError(
            "--mailboxes: the trace's metadata has no 'mailboxes'; give --from-mailboxes N0"
        )
    n = mailboxes if mailboxes is not None else n0
    k = databases if databases is not None else k0
    c = copies if copies is not None else c0
    for name, v in (("--mailboxes", n), ("--databases", k), ("--copies", c)):
        if v is not None and v <= 0:
            raise IotapeError(f"{name} {v}: must be positive")
    if n0 is not None and n0 <= 0:
        raise IotapeError(f"trace mailboxes {n0}: must be positive")
    n = n if n is not None else 1.0
    n0 = n0 if n0 is not None else n
    g, g0 = _groups(meta, int(k0), int(k), storage_groups, from_storage_groups)
    return Scaling(float(n), int(k), int(c), float(n0), int(k0), int(c0), g, g0)


def factor(stream: str, s: Scaling | None) -> float:
    """How many times a stream's trace rate each database's target replays."""
    if s is None:
        return 1.0
    share = 1.0 / s.from_databases
    if stream in streams.PER_MAILBOX:
        return share * (s.mailboxes / s.databases) / (s.from_mailboxes / s.from_databases)
    if stream in streams.PER_DATABASE:
        return share
    if stream in streams.PER_COPY:
        # One reader per extra copy.
        if s.from_copies <= 1:
            return share * max(s.copies - 1, 0)
        return share * (s.copies - 1) / (s.from_copies - 1)
    # Unlabelled I/O is not per database: spread it so its total stays as recorded.
    return 1.0 / s.databases


def group_factor(stream: str, s: Scaling | None, group: int) -> float:
    """How many times a log stream's trace rate a storage group's log target
    replays: the sum of its databases' shares (their mailboxes are alike, so the
    one database's factor times how many the group holds)."""
    if s is None:
        return 1.0
    return factor(stream, s) * len(s.layout.members(group))


def replicas(n: int, f: float, seed: int) -> list[np.ndarray]:
    """Index sets whose union replays `n` requests at `f` times their rate: whole
    copies for the integer part, a seeded Bernoulli thinning for the fraction."""
    if f < 0 or not math.isfinite(f):
        raise IotapeError(f"scaling factor {f}: must be a finite number >= 0")
    whole = math.floor(f + 1e-9)
    frac = f - whole
    out = [np.arange(n) for _ in range(whole)]
    if frac > 1e-9:
        rng = np.random.default_rng(seed)
        out.append(np.flatnonzero(rng.random(n) < frac))
    return out
