"""Where a plan moved each original request: recorded in plan.json ("mapping",
schemas MappingEntry), and applied to the original's requests again afterwards.

`record` writes down, per source device, how far the trace reaches on it (wrap
and scale map from that) and, for --remap compact, its touched extents; per
(device, stream), the range on its target that the stream's first replica fills
(database 0's, copy 0: the one every original request has, scaled or not).

`Mapper` maps an original's requests (ordered.COMPACT rows, or trace records) to
the (op, offset, size) that replica replayed them at, a (device, stream) group at
a time: `replay fidelity` pairs the replay with the original through it
(pairing.py), and the plan's locality prediction measures the remapped trace
with it (replayer/run/predict.py). A request whose stream the plan replays
nowhere maps to nothing (`placed` is False).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from base.errors import IotapeError
from replayer.plan import compact, remap, scale
from replayer.plan.source import OP

if TYPE_CHECKING:  # pydantic's plan documents only where a plan is read (~60 ms)
    from schemas.documents.plan import MappingEntry

VERSION = 1
UNPLACED = np.uint64(0xFF) << np.uint64(56)  # a key no replayed request has
# A target's index mixed into a key (Fibonacci hashing): two targets' requests at
# the same (op, offset, size) get keys that differ, by more than any key's bits.
_MIX = np.uint64(0x9E3779B97F4A7C15)


def _runs(g: np.ndarray, granule: int) -> list[list[int]]:
    """Granule indices as [first byte, bytes] runs."""
    if not len(g):
        return []
    cut = np.flatnonzero(np.diff(g) != 1) + 1
    starts = g[np.r_[0, cut]]
    lens = np.diff(np.r_[0, cut, len(g)])
    return [[int(s) * granule, int(n) * granule] for s, n in zip(starts, lens, strict=True)]


def _granules(runs: list[list[int]], granule: int) -> np.ndarray:
    if not runs:
        return np.zeros(0, np.int64)
    a = np.asarray(runs, np.int64) // granule
    starts, lens = a[:, 0], a[:, 1]
    first = np.repeat(starts - np.r_[0, np.cumsum(lens)[:-1]], lens)
    return first + np.arange(int(lens.sum()))


def record(groups: list[Any], lay: Any, sc: scale.Scaling | None, mode: str) -> dict[str, Any]:
    """plan.json's "mapping" of a plan's groups (steps.Group) laid out as `lay`
    (steps.TargetLayout) and scaled as `sc`."""
    shares: dict[tuple[int, str], list[float]] = {}
    first: dict[tuple[int, str], tuple[Any, float]] = {}
    names: dict[int, str] = {}
    seen: set[tuple[int, str, Any, str]] = set()
    for g in sorted(groups, key=lambda g: (g.owner.kind != "db", g.owner.number)):
        names[g.dev] = g.dname
        if (g.dev, g.sname, g.owner, g.path) in seen:
            continue  # another submitter of the same stream: the same range
        seen.add((g.dev, g.sname, g.owner, g.path))
        f = (
            scale.group_factor(g.sname, sc, g.owner.number)
            if g.owner.kind == "sg"
            else scale.factor(g.sname, sc)
        )
        key = (g.dev, g.sname)
        shares.setdefault(key, []).append(f)
        if key not in first and f > 0:
            first[key] = (g, f)
    placements = []
    for (dev, sname), (g, _f) in sorted(first.items()):
        base, size = lay.spans[(g.path, g.owner)]
        at = (lay.packed_at or {}).get((g.path, g.owner), {}).get(dev)
        region = (lay.regions or {}).get((g.path, g.owner), {}).get(dev)
        placements.append(
            {"device": dev, "stream": sname, "target": g.path, "base": base, "size": size,
             "block": lay.probed[g.path].block, "packed_at": at,
             "region": list(region) if region else None, "shares": shares[(dev, sname)]}
        )  # fmt: skip
    devices = []
    for dev in sorted(names):
        d: dict[str, Any] = {"device": dev, "name": names[dev], "end_bytes": lay.dev_end[dev]}
        if mode == "compact":
            g = (lay.touched or {}).get(dev, np.zeros(0, np.int64))
            d["extents"] = _runs(g, lay.granule)
        devices.append(d)
    return {"version": VERSION, "mode": mode,
            "granule_bytes": lay.granule if mode == "compact" else None,
            "devices": devices, "placements": placements}  # fmt: skip


class Mapper:
    """An original's requests as its plan's first replica replayed them."""

    def __init__(
        self,
        m: MappingEntry,
        stream_names: dict[int, str],
        replay_devices: list[dict[str, Any]] | None = None,
    ) -> None:
        if m.version != VERSION:
            raise IotapeError(
                f"plan.json: field 'mapping.version': {m.version}; this iotape reads {VERSION}"
            )
        self.m = m
        self.granule = m.granule_bytes or compact.GRANULE
        self.end = {d.device: d.end_bytes for d in m.devices}
        self.touched = {d.device: _granules(d.extents or [], self.granule) for d in m.devices}
        by_name = {v: k for k, v in stream_names.items()}
        self.place = {(p.device, by_name[p.stream]): p for p in m.placements if p.stream in by_name}
        self.target_id = {t: i for i, t in enumerate(sorted({p.target for p in m.placements}))}
        # Every owner's range is laid out alike (targetmap.ranges: equal ranges from
        # byte 0): where all ranges are one size, a request is keyed by its place in
        # its range, so an original pairs with whichever database replayed it.
        sizes = {p.size for p in m.placements}
        self.fold = sizes.pop() if len(sizes) == 1 else None
        # The replay's devices (its trace header's) as the plan's targets: with them,
        # a request pairs only on the target its original was replayed on.
        self.rep_target = _targets_of(replay_devices or [], self.target_id)
        self.by_target = len(self.target_id) > 1 and set(self.rep_target.values()) == set(
            self.target_id.values()
        )

    def apply(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(offsets, sizes, placed) of rows `r` (fields dev, stream, op, offset, bytes):
        where each was replayed; flushes stay at (0, 0)."""
        off, nb, placed, _ = self.apply_on(r)
        return off, nb, placed

    def apply_on(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """apply(), and the target of each row (its index in sorted target paths)."""
        off = r["offset"].astype(np.int64)
        nb = r["bytes"].astype(np.int64)
        tgt = np.zeros(len(r), np.int64)
        placed = np.zeros(len(r), bool)
        data = r["op"] != OP["flush"]
        key = r["dev"].astype(np.int64) << 8 | r["stream"].astype(np.int64)
        one = bool(len(key)) and int(key.min()) == int(key.max())  # one device's stream
        for k in [int(key[0])] if one else np.unique(key).tolist():
            p = self.place.get((k >> 8, k & 0xFF))
            if p is None:
                continue
            m = np.ones(len(key), bool) if one else key == k
            placed[m] = True
            tgt[m] = self.target_id[p.target]
            m &= data
            if m.all():
                # Every row: mapped whole, not gathered and scattered by the mask.
                o, b = self._placed(p, off, nb)
                off, nb = p.base + o, b
                continue
            if not m.any():
                continue
            o, b = self._placed(p, off[m], nb[m])
            off[m], nb[m] = p.base + o, b
        return off, nb, placed, tgt

    def _placed(self, p: Any, off: np.ndarray, nb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(offsets from the placement's base, sizes) of requests of placement `p`."""
        if self.m.mode == "compact":
            g = self.touched[p.device]
            return compact.pack(off, nb, g, p.packed_at or 0, p.block, 0, self.granule)
        # A plan before regions (no `region`) laid every device over the whole range.
        at, size = p.region or (0, p.size)
        o, b = remap.remap(off, nb, size, p.block, self.m.mode, self.end[p.device])
        return o + at, b

    def keys(self, r: np.ndarray) -> np.ndarray:
        """The original's rows keyed as replayed (pairing.keys of their place in their
        range, and of their target where `by_target`); a row replayed nowhere gets
        UNPLACED."""
        off, nb, placed, tgt = self.apply_on(r)
        k = self._key(r["op"], off, nb, tgt)
        return k if placed.all() else np.where(placed, k, UNPLACED)

    def replay_keys(self, r: np.ndarray) -> np.ndarray:
        """A replay's rows keyed as `keys` keys the original's (a row on a device that
        is none of the plan's targets, where `by_target`, pairs with nothing)."""
        tgt = None
        if self.by_target:
            devs = r["dev"].astype(np.int64)
            tgt = np.full(len(r), len(self.target_id), np.int64)
            for d in np.unique(devs).tolist():
                tgt[devs == d] = self.rep_target.get(d, len(self.target_id))
        off = r["offset"].astype(np.int64)
        return self._key(r["op"], off, r["bytes"].astype(np.int64), tgt)

    def _key(
        self, op: np.ndarray, off: np.ndarray, nb: np.ndarray, tgt: np.ndarray | None
    ) -> np.ndarray:
        if self.fold and len(off) and not (int(off.min()) >= 0 and int(off.max()) < self.fold):
            off = off % self.fold  # (already in the first range: as it is)
        k: np.ndarray = (
            (op.astype(np.uint64) << np.uint64(56)) ^ (_u64(off) << np.uint64(8)) ^ _u64(nb)
        )
        if self.by_target and tgt is not None:
            k = k ^ (tgt.astype(np.uint64) + np.uint64(1)) * _MIX
        return k

    def expected(self, r: np.ndarray) -> tuple[int, float, float]:
        """(rows replayed nowhere, rows the first replica is expected to have dropped
        (a share below 1), replayed rows expected beyond the first replica)."""
        key = r["dev"].astype(np.int64) << 8 | r["stream"].astype(np.int64)
        if len(key) and int(key.min()) == int(key.max()):  # one device's stream
            ks, n = key[:1], np.array([len(key)])
        else:
            ks, n = np.unique(key, return_counts=True)
        nowhere, thinned, extra = 0, 0.0, 0.0
        for k, c in zip(ks.tolist(), n.tolist(), strict=True):
            p = self.place.get((k >> 8, k & 0xFF))
            if p is None:
                nowhere += c
                continue
            # Each owner thins the stream on its own (scale.replicas): a request is
            # replayed by none of them with the product of their misses.
            some = 1.0 - float(np.prod([1.0 - min(f, 1.0) for f in p.shares]))
            thinned += c * (1.0 - some)
            extra += c * max(sum(p.shares) - some, 0.0)
        return nowhere, thinned, extra


def _u64(x: np.ndarray) -> np.ndarray:
    """x.astype(np.uint64); an int64 array's bits as they are (the same values), not
    a copy."""
    return x.view(np.uint64) if x.dtype == np.int64 else x.astype(np.uint64)


def _targets_of(devices: list[dict[str, Any]], target_id: dict[str, int]) -> dict[int, int]:
    """{a recorded device's id: the index of the plan target it is}, for the targets
    that are block devices the recording names (by path, or by major and minor
    where the target's node has another name). A file target or a remote one is
    none of a real recording's devices (it names the filesystem's, or the host's)."""
    ids: dict[tuple[int, int], int] = {}
    paths: dict[str, int] = {}
    for path, j in target_id.items():
        paths[os.path.realpath(path)] = j
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_rdev:
            ids[(os.major(st.st_rdev), os.minor(st.st_rdev))] = j
    out: dict[int, int] = {}
    for d in devices:
        if not isinstance(d, dict) or "dev" not in d:
            continue
        i: int | None = ids.get((d.get("major", -1), d.get("minor", -1)))
        if i is None and d.get("path"):
            i = paths.get(os.path.realpath(str(d["path"])))
        if i is not None:
            out[int(d["dev"])] = i
    return out


def plan_mapping(path: Path) -> MappingEntry | None:
    """plan.json's mapping at `path` (None: the plan has none). The plan document is
    imported here, not at the top: a replay without a plan reads none (pydantic),
    and replayer/run keeps no function-level imports (tests/replayer/test_runners.py)."""
    from schemas.documents import plan as plandoc

    return plandoc.load(path).mapping
