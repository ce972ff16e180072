"""Stream-aware scaling of a trace to N mailboxes on K databases.

Transactional streams scale with mailboxes per database, background maintenance
and backup with the number of databases (one scan per database, whatever its
load), log replication with the number of extra copies (the groups:
schemas/trace_record.toml [stream_group]). The trace is taken to be K0
databases' worth of I/O, so one database's share of a stream is 1/K0 of it; each
of the K targets gets that share times its stream's factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from iotape.errors import IotapeError
from schemas import streams
from schemas.workload_header import COPIES, DATABASES, MAILBOXES


@dataclass(frozen=True)
class Scaling:
    mailboxes: float
    databases: int
    copies: int
    from_mailboxes: float
    from_databases: int
    from_copies: int

    def describe(self) -> str:
        return (
            f"{self.from_mailboxes:g} mailboxes on {self.from_databases} database(s), "
            f"{self.from_copies} cop(ies) -> {self.mailboxes:g} mailboxes on "
            f"{self.databases} database(s), {self.copies} cop(ies)"
        )


def _meta_number(meta: dict, key: str, kind: type) -> float | int | None:
    if key not in meta:
        return None
    try:
        return kind(float(meta[key])) if kind is int else kind(meta[key])
    except (TypeError, ValueError):
        raise IotapeError(f"trace metadata {key}={meta[key]!r}: not a number") from None


def resolve(
    meta: dict,
    mailboxes: float | None,
    databases: int | None,
    copies: int | None,
    from_mailboxes: float | None = None,
    from_databases: int | None = None,
    from_copies: int | None = None,
) -> Scaling | None:
    """The scaling asked for, with the trace's own figures from its metadata
    (strings when given by `iotape record --meta`), or None when none was asked."""
    if mailboxes is None and databases is None and copies is None:
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
    return Scaling(float(n), int(k), int(c), float(n0), int(k0), int(c0))


def factor(stream: str, s: Scaling | None) -> float:
    """How many times a stream's trace rate each target replays."""
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
