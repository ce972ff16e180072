"""Pairing a replay with its original through the plan's mapping, and saying how
many paired and why the others did not.

A plan that moved offsets (--remap wrap, scale, compact; databases laid side by
side on a target) replayed each original request at another (offset, size), so
pairing by the original's own would find almost nothing. The plan recorded where
each went (plan.json "mapping", replayer/plan/mapping.py); `replay fidelity`
keys the original's requests through it (pairing.Pairer's `orig_keys`).

The plan is the one given (`--plan`), else the one `replay run --record` wrote
into the replay's metadata (`replay_of.plan`), where it still exists and records
a mapping; otherwise requests pair by their recorded offsets, as before plans
recorded one.

Why an original request did not pair: its stream was replayed nowhere (a scaling
that gives it no share), the plan's scaling thinned it out (expected from the
share, `scaled_down_expected`), or it was replayed but not found (missing from
the replay, or further than --horizon from its original). A replayed request
does not pair where it is a further copy (scaling) or issued by the replay
itself (fio's syncs).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from base.errors import IotapeError
from recorder.tracefile import open_trace
from replayer.plan.mapping import Mapper, plan_mapping
from replayer.run import ordered

if TYPE_CHECKING:  # pydantic's plan documents only where a plan is read
    from schemas.documents.plan import MappingEntry


def plan_path(given: Path | None, sr: ordered.Scan) -> Path | None:
    """plan.json to pair through: `given` (JOBDIR or the file), else the replay's own."""
    return plan_named(given, sr.metadata())


def plan_named(given: Path | None, metadata: dict[str, Any]) -> Path | None:
    """plan_path of a replay whose trace header holds `metadata`."""
    if given is not None:
        p = Path(given)
        p = p / "plan.json" if p.is_dir() else p
        if not p.is_file():
            raise IotapeError(f"--plan {given}: no plan.json there")
        return p
    of = metadata.get("replay_of")
    # A dict once `replay run` relabelled the replay; the job directory before.
    named = of.get("plan") if isinstance(of, dict) else (f"{of}/plan.json" if of else None)
    return Path(named) if named and Path(named).is_file() else None


def mapper(path: Path | None, so: ordered.Scan, sr: ordered.Scan | None = None) -> Mapper | None:
    """The mapping of plan.json at `path` over the original `so` (None: no mapping);
    the replay `sr`'s recorded devices tell which target each request ran on."""
    return mapper_of(plan_mapping(path) if path is not None else None, so, sr)


def early(given: Path | None, replayed: Path) -> tuple[Path | None, MappingEntry | None]:
    """(plan_path, its mapping) from the replay's header alone, before its scan:
    `replay fidelity` reads them while both traces are scanned (pydantic's import
    and the plan's check are Python; the scans are C that lets go of the GIL)."""
    with open_trace(replayed) as t:
        metadata = dict(t.header.get("metadata") or {})
    path = plan_named(given, metadata)
    return path, plan_mapping(path) if path is not None else None


def mapper_of(
    m: MappingEntry | None, so: ordered.Scan, sr: ordered.Scan | None = None
) -> Mapper | None:
    """mapper() of a plan's mapping `m` already read (None: no mapping)."""
    if m is None:
        return None
    devices = sr.header.get("devices") if sr is not None else None
    return Mapper(m, {sid: so.stream_name(sid) for sid in range(256)}, devices or [])


class Tally:
    """What the mapping expects of the original's requests, counted as they pass."""

    def __init__(self, m: Mapper) -> None:
        self.m = m
        self.nowhere = 0
        self.thinned = 0.0
        self.extra = 0.0

    def counted(self, batches: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        for b in batches:
            nowhere, thinned, extra = self.m.expected(b)
            self.nowhere += nowhere
            self.thinned += thinned
            self.extra += extra
            yield b


def section(
    path: Path | None, t: Tally | None, paired: int, originals: int, replayed: int
) -> dict[str, Any]:
    """fidelity's "pairing": how many paired, through what, and why the rest did not."""
    out: dict[str, Any] = {
        "through": f"plan mapping (--remap {t.m.m.mode})" if t else "recorded offsets",
        # Whether a request paired only on the target its original went to (the plan
        # replayed onto several targets, each found among the replay's devices).
        "by_target": bool(t and t.m.by_target),
        "plan": str(path) if t and path else None,
        "paired": paired,
        "paired_share": round(paired / originals, 4) if originals else None,
    }
    lost_o, lost_r = originals - paired, replayed - paired
    nowhere = t.nowhere if t else 0
    thinned = min(round(t.thinned) if t else 0, max(lost_o - nowhere, 0))
    extra = min(round(t.extra) if t else 0, max(lost_r, 0))
    out["original_unpaired"] = {
        "replayed_nowhere": nowhere,
        "scaled_down_expected": thinned,
        "not_found": max(lost_o - nowhere - thinned, 0),
    }
    out["replay_unpaired"] = {
        "extra_copies_expected": extra,
        "other": max(lost_r - extra, 0),
    }
    return out
