"""The steps every plan takes over a source of requests, whole or a time-ordered
chunk (build.py runs them): check the options, map --target names to paths,
group the requests by database (a storage group's log by group), device,
stream and submitter, probe the targets and lay each database out on its
target, then cut each group into slices, scaled and remapped into their range.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from base.errors import IotapeError
from devices import safety, targets
from replayer.hosts import spec as hosts
from replayer.plan import compact, fitloc, remap, scale, synthetic, targetmap
from replayer.plan.model import HostAddress, Job, Slice
from replayer.plan.options import PlanOptions
from replayer.plan.source import OP, Source
from replayer.plan.targetmap import Owner

MODES = ("exact", "synthetic", "auto")
MAX_SUBMITTERS = 64
WRITE_OPS = [OP["write"], OP["write-zeroes"], OP["discard"], OP["flush"]]
PLACEHOLDER = "/dev/TARGET"


class Group(NamedTuple):
    """The requests of one stream (and submitter) on one device, for one database
    (or one storage group's log)."""

    owner: Owner
    dev: int
    dname: str
    sname: str
    idx: np.ndarray
    path: str
    suffix: str


@dataclass
class TargetLayout:
    """Where each device's requests go: the end of each source device's reach, the
    targets as probed, and each (target, owner)'s (base, size)."""

    dev_end: dict[int, int]
    probed: dict[str, targetmap.Target]
    spans: dict[tuple[str, Owner], tuple[int, int]]
    single_dev: bool
    # --remap compact: each device's touched granules, and where in each range
    # (target, owner) each device's packed extents start (compact.py).
    touched: dict[int, np.ndarray] | None = None
    packed_at: dict[tuple[str, Owner], dict[int, int]] | None = None
    granule: int = compact.GRANULE
    # fit, wrap, scale: each device's own region of each range, (first byte within
    # the range, bytes) (_regions); a device alone in its range has all of it.
    regions: dict[tuple[str, Owner], dict[int, tuple[int, int]]] | None = None


def check(opts: PlanOptions) -> None:
    """Raise IotapeError for an option no plan can follow."""
    if opts.mode not in MODES:
        raise IotapeError(f"--mode {opts.mode}: unknown; one of {', '.join(MODES)}")
    if not (opts.time_scale > 0):
        raise IotapeError(f"--time-scale {opts.time_scale}: must be positive")
    if opts.locality not in fitloc.KINDS:
        raise IotapeError(f"--locality {opts.locality}: unknown; one of {', '.join(fitloc.KINDS)}")
    if opts.remap not in remap.MODES:
        raise IotapeError(f"--remap {opts.remap}: unknown; one of {', '.join(remap.MODES)}")
    compact.check_unit(opts.remap_unit)


def _submitters(r: np.ndarray, stream: str) -> list[tuple[np.ndarray, str]]:
    """Unlabelled I/O split by submitting thread: each thread issued its own
    requests concurrently with the others, and one iolog would serialise them."""
    # By process, not thread: an io_uring worker thread that ran a process's fsync
    # belongs with that process's writes.
    pids = np.unique(r["pid"])
    if stream != "other" or len(pids) < 2 or len(pids) > MAX_SUBMITTERS:
        return [(np.arange(len(r)), "")]
    return [(np.flatnonzero(r["pid"] == p), f".p{int(p)}") for p in pids.tolist()]


def _target(path: str, writes: bool, opts: PlanOptions) -> targetmap.Target:
    """Check what `path` is, and that it is safe to write, before opening it: a
    device is refused for what it is (the root disk, mounted, in use), not for
    whatever opening it would have said."""
    if path == PLACEHOLDER:
        return targetmap.Target(path, "file", None, 512)
    if hosts.split(path):
        return hosts.remote_target(path)
    if opts.create_file is not None and opts.create_file <= 0:
        raise IotapeError(f"--create-file {opts.create_file}: must be a positive size")
    if targets.classify(path, opts.create_file) == "block" and writes:
        safety.check_target(path, opts.destroy)
    return targetmap.probe(path, opts.create_file)


def seed(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def who(owner: Owner) -> int | str:
    """An owner in a seed: a database by its number, as before groups existed."""
    return owner.number if owner.kind == "db" else owner.name


def scaling(opts: PlanOptions, view: Source) -> scale.Scaling | None:
    """--mailboxes, --databases, --copies and --storage-groups against what the trace
    says it was (or --from-*): None where nothing is scaled."""
    return scale.resolve(
        view.metadata(),
        opts.mailboxes,
        opts.databases,
        opts.copies,
        opts.from_mailboxes,
        opts.from_databases,
        opts.from_copies,
        opts.storage_groups,
        opts.from_storage_groups,
    )


def mapping(opts: PlanOptions) -> tuple[dict[str, str], dict[str, HostAddress]]:
    """--target NAME=PATH as absolute paths (the dry-run placeholder without any), and --host."""
    paths = targetmap.parse(opts.targets)
    hostmap = hosts.parse(opts.hosts)
    hosts.check_mapping(paths, hostmap)
    if not paths:
        if not opts.dry_run:
            raise IotapeError("no target: give --target NAME=PATH (e.g. --target all=/dev/sdb)")
        paths = {"all": PLACEHOLDER}
    local = lambda v: v == PLACEHOLDER or hosts.split(v) is not None  # noqa: E731
    return {k: (v if local(v) else os.path.abspath(v)) for k, v in paths.items()}, hostmap


def _streams(src: Source) -> list[tuple[int, str, str, np.ndarray]]:
    """(device, its name, stream name, the requests' indices) of each stream on each device."""
    r = src.records
    devnames = src.device_names()
    out = []
    for dev in np.unique(r["dev"]).tolist():
        dname = devnames.get(dev, f"dev{dev >> 20}:{dev & 0xFFFFF}")
        for sid in np.unique(r["stream"]).tolist():
            idx = np.flatnonzero((r["dev"] == dev) & (r["stream"] == sid))
            if len(idx):
                out.append((dev, dname, src.stream_name(sid), idx))
    return out


def groups(
    src: Source, paths: dict[str, str], lay: scale.Layout
) -> tuple[list[Group], dict[str, list[Owner]]]:
    """The groups of requests each database (and each storage group's log, where
    groups share logs) replays, and the databases and group logs on each target."""
    r = src.records
    lay.check_targets(paths)
    per_stream = _streams(src)
    owned: list[tuple[Owner, int, str, str, np.ndarray, str]] = []
    for db in range(lay.databases):
        for dev, dname, sname, idx in per_stream:
            if sname in scale.PER_LOG and lay.shared_logs:
                continue
            # A group of one database: its log may be named by either.
            group = lay.group_of(db) if sname in scale.PER_LOG else None
            path = targetmap.choose(paths, Owner("db", db), sname, dname, group)
            owned.append((Owner("db", db), dev, dname, sname, idx, path))
    for g in range(lay.storage_groups) if lay.shared_logs else ():
        for dev, dname, sname, idx in per_stream:
            if sname in scale.PER_LOG:
                path = targetmap.choose(paths, Owner("sg", g), sname, dname, None, lay.members(g))
                owned.append((Owner("sg", g), dev, dname, sname, idx, path))
    out = []
    users: dict[str, list[Owner]] = {}
    for owner, dev, dname, sname, idx, path in owned:
        users.setdefault(path, []).append(owner)
        for sub, suffix in _submitters(r[idx], sname):
            out.append(Group(owner, dev, dname, sname, idx[sub], path, suffix))
    return out, users


def layout(
    src: Source,
    groups: list[Group],
    users: dict[str, list[Owner]],
    opts: PlanOptions,
    touched: dict[int, np.ndarray] | None = None,
) -> TargetLayout:
    """Probe every target (checking it is safe to write) and split it among its
    databases; for --remap compact, pack each range's devices (`touched`: each
    device's touched granules, sources.Input.touched) and refuse a range too small."""
    r = src.records
    dev_ids = np.unique(r["dev"]).tolist()
    data = r["op"] != OP["flush"]
    ends = np.where(data, r["offset"].astype(np.int64) + r["bytes"].astype(np.int64), 0)
    dev_end = {dev: int(ends[r["dev"] == dev].max(initial=512)) for dev in dev_ids}
    written = {g.path for g in groups if np.isin(r["op"][g.idx], WRITE_OPS).any()}
    probed = {p: _target(p, p in written, opts) for p in users}
    need = _reaches(groups, dev_end, users)
    packed_at = None
    if opts.remap == "compact":
        unit = opts.remap_unit
        touched = touched if touched is not None else compact.touched_by_device(r, data, unit)
        packed_at = _packing(groups, touched, unit)
        need = {p: 0 for p in users}
        for (path, _owner), at in packed_at.items():
            need[path] = max(need[path], _packed(at, touched, unit))
    spans = targetmap.ranges(users, probed, need)
    lay = TargetLayout(
        dev_end, probed, spans, len(dev_ids) == 1, touched, packed_at, opts.remap_unit
    )
    if packed_at is not None:
        _check_packed(lay, groups)
    else:
        lay.regions = _regions(groups, lay, opts.remap)
    return lay


def _range_devices(groups: list[Group]) -> dict[tuple[str, Owner], list[int]]:
    """(target, owner) -> the source devices replayed in that range, in device order."""
    devs: dict[tuple[str, Owner], set[int]] = {}
    for g in groups:
        devs.setdefault((g.path, g.owner), set()).add(g.dev)
    return {k: sorted(v) for k, v in devs.items()}


# Where a device's region starts, where the range allows: a whole MiB, so that a
# request keeps its place within every cache unit up to 1 MiB (locality.UNIT is
# 64 KiB) and the replay's footprint and LRU curve stay the original's.
REGION_ALIGN = 1 << 20


def _up(n: int, align: int) -> int:
    return -(-n // align) * align


def _reaches(
    groups: list[Group], dev_end: dict[int, int], users: dict[str, list[Owner]]
) -> dict[str, int]:
    """What each target's ranges need: the reaches of the devices in a range, side by
    side (a dry run's placeholder is sized to it)."""
    need = dict.fromkeys(users, 0)
    for (path, _owner), ds in _range_devices(groups).items():
        reach = sum(_up(dev_end[d], REGION_ALIGN) for d in ds) if len(ds) > 1 else dev_end[ds[0]]
        need[path] = max(need[path], reach)
    return need


def _regions(
    groups: list[Group], lay: TargetLayout, mode: str
) -> dict[tuple[str, Owner], dict[int, tuple[int, int]]]:
    """(target, owner) -> {device: (first byte within the range, bytes)}: several
    source devices replayed in one range each get a region of their own, in device
    order, so that two devices' requests at the same offsets stay apart (they are
    different blocks). `fit` gives each device its reach (the range must hold them
    side by side, or the plan is refused); wrap and scale split the range in
    proportion to the devices' reaches, so that `scale` shrinks every device by
    the same ratio. Under fit and wrap, which keep offsets, regions start at a
    whole REGION_ALIGN where the range has room for it, else at a whole block."""
    out: dict[tuple[str, Owner], dict[int, tuple[int, int]]] = {}
    for key, ds in _range_devices(groups).items():
        _base, size = lay.spans[key]
        if len(ds) == 1:
            out[key] = {ds[0]: (0, size)}
            continue
        block = lay.probed[key[0]].block
        usable = size // block * block
        aligns = (max(block, REGION_ALIGN), block)
        if mode == "fit":
            ends = [[_up(lay.dev_end[d], a) for d in ds] for a in aligns]
            fits = [e for e in ends if sum(e) <= usable]
            if not fits:
                raise IotapeError(
                    f"--remap fit: --target {key[0]} ({usable} bytes"
                    + (f", {key[1].name}'s share" if _shared(lay, key[0]) else "")
                    + f") takes {len(ds)} source devices, each in its own region as "
                    f"recorded: they reach {sum(ends[-1])} bytes together; give a target of "
                    "at least that, or --remap compact, scale or wrap"
                )
            at = np.r_[0, np.cumsum(fits[0])[:-1]].tolist()
        else:
            # scale moves every offset anyway: its regions keep the ratio exact.
            roomy = mode == "wrap" and usable >= 8 * len(ds) * aligns[0]
            align = aligns[0] if roomy else block
            ends_b = [_up(lay.dev_end[d], block) for d in ds]
            total = sum(ends_b)
            cum = np.r_[0, np.cumsum(ends_b)[:-1]].tolist()
            at = [usable * c // total // align * align for c in cum]
        ends_at = [*at[1:], usable]
        if any(e - a < block for a, e in zip(at, ends_at, strict=True)):
            raise IotapeError(
                f"--remap {mode}: --target {key[0]} ({usable} bytes) is too small for a "
                f"region of its own for each of its {len(ds)} source devices"
            )
        out[key] = {d: (a, e - a) for d, a, e in zip(ds, at, ends_at, strict=True)}
    return out


def _shared(lay: TargetLayout, path: str) -> bool:
    return sum(1 for p, _ in lay.spans if p == path) > 1


def _packing(groups: list[Group], touched: dict[int, np.ndarray], unit: int):
    """(target, owner) -> {device: where its packed extents start}: the devices
    replayed in one range, one after the other in device order."""
    devs: dict[tuple[str, Owner], set[int]] = {}
    for g in groups:
        devs.setdefault((g.path, g.owner), set()).add(g.dev)
    out: dict[tuple[str, Owner], dict[int, int]] = {}
    for key, ds in devs.items():
        at, shift = {}, 0
        for d in sorted(ds):
            at[d] = shift
            shift += compact.footprint(touched.get(d, np.zeros(0, np.int64)), unit)
        out[key] = at
    return out


def _packed(at: dict[int, int], touched: dict[int, np.ndarray], unit: int) -> int:
    """The bytes a range's packed devices take."""
    last = max(at, key=lambda d: at[d])
    return at[last] + compact.footprint(touched.get(last, np.zeros(0, np.int64)), unit)


def _check_packed(lay: TargetLayout, groups: list[Group]) -> None:
    names = {g.dev: g.dname for g in groups}
    for (path, owner), at in (lay.packed_at or {}).items():
        _base, size = lay.spans[(path, owner)]
        what = f"--target {path}" + (f" ({owner.name}'s share of it)" if _shared(lay, path) else "")
        need = _packed(at, lay.touched or {}, lay.granule)
        devs = [names.get(d, str(d)) for d in sorted(at)]
        compact.check_fits(what, need, size, devs, lay.granule)


def slices(
    src: Source, g: Group, sc: scale.Scaling | None, lay: TargetLayout, opts: PlanOptions
) -> Iterator[tuple[int, Slice]]:
    """(copy, slice) of a group, scaled to its stream's share and remapped into its
    database's (or group log's) range of its target; each copy rotated through the range."""
    r = src.records
    base, size = lay.spans[(g.path, g.owner)]
    block = lay.probed[g.path].block
    f = (
        scale.group_factor(g.sname, sc, g.owner.number)
        if g.owner.kind == "sg"
        else scale.factor(g.sname, sc)
    )
    reps = scale.replicas(len(g.idx), f, seed(who(g.owner), g.dev, g.sname))
    # fio reads a ':' in read_iolog as a list of files: an imported trace's device
    # names (disksim:0) must not carry one into the iolog's name.
    dname = g.dname.replace(":", "_")
    stem = f"{g.owner.name}.{g.sname}" + ("" if lay.single_dev else f".{dname}") + g.suffix
    dev_end = lay.dev_end[g.dev]
    for j, sub in enumerate(reps):
        if not len(sub):
            continue
        rows = g.idx[sub]
        rr = r[rows]
        if opts.remap == "compact":
            g_dev = (lay.touched or {})[g.dev]
            turn = j * len(g_dev) // len(reps)
            shift = (lay.packed_at or {})[(g.path, g.owner)][g.dev]
            off, b = compact.pack(rr["offset"], rr["bytes"], g_dev, shift, block, turn, lay.granule)
            at, rsize = 0, size  # the packed offsets count from the range's start
        else:
            at, rsize = (lay.regions or {})[(g.path, g.owner)][g.dev]
            rotate = (j * dev_end // len(reps)) // block * block if j else 0
            off, b = remap.remap(
                rr["offset"], rr["bytes"], rsize, block, opts.remap, dev_end, rotate
            )
        writes = bool(np.isin(rr["op"], WRITE_OPS).any())
        name = stem + (f".c{j}" if len(reps) > 1 else "")
        t = src.t_ns[rows]
        yield j, Slice(name, g.path, g.sname, g.owner, writes, rr, t, off, b, base + at, rsize)


def synthetic_jobs(
    s: Slice, window_ns: int, seed: int, opts: PlanOptions
) -> tuple[fitloc.Model, list[Job]]:
    """A slice fitted per window: its locality model and its jobs."""
    args = (s.records, s.t_ns, s.offset, s.nbytes, s.size, window_ns)
    model = synthetic.fit(*args, seed, opts.locality)
    jobs = []
    for w, o, n, seq_start in synthetic.window_jobs(*args, 1.0, opts.time_scale, model):
        o = {"filename": s.target, **o}
        if seq_start is not None:
            o["offset"] = str(s.base + seq_start)
            o["size"] = str(s.size - seq_start)
        else:
            o["offset"] = str(s.base)
            o["size"] = str(s.size)
        jobs.append(Job(f"{s.name}.{w}", s.target, s.stream, s.owner, o, n, s.writes))
    return model, jobs


def target_entries(lay: TargetLayout, written: set[str], reach: dict[str, int]) -> list[dict]:
    """plan.json's `targets` of a closed-loop plan: each probed target, whether a
    job writes it (`written`) and the furthest byte a request reaches (`reach`)."""
    return [
        {
            "path": path,
            "kind": t.kind,
            "writes": path in written,
            "block_size": t.block,
            "size": t.size,
            "create_bytes": t.create,
            "reach_bytes": reach.get(path, 0),
        }
        for path, t in sorted(lay.probed.items())
    ]
