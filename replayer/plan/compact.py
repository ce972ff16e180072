"""`--remap compact`: a device's touched extents packed in offset order onto the target.

The source device is cut into granules of GRANULE bytes (1 MiB; --remap-unit). Every granule a
data request touches is kept, and the kept granules are laid end to end from the
start of the target range, in their source order: granule k of the source goes
to place rank(k) (how many touched granules lie below it), and a request keeps
its offset within its granule. So what was distinct stays distinct, what was
sequential stays sequential (a request crossing a granule boundary touches both
granules, and they are neighbours on the target too), and regions keep their
order. What it changes is the distance between regions: the untouched gaps
between them are gone, so a rotating disk seeks shorter between them
(docs/replay.md, bench/remap_compact.py).

The footprint, what the target must hold, is the touched granules times GRANULE:
a compact plan needs a target range at least that large. Several source devices
on one target range are packed one after the other, in device order.

Granules are collected as sorted unique indices per device: memory grows with the
footprint (8 bytes a touched MiB), not with the trace.
"""

from __future__ import annotations

import numpy as np

from base.errors import IotapeError

GRANULE = 1 << 20


def granules(offset: np.ndarray, nbytes: np.ndarray, granule: int = GRANULE) -> np.ndarray:
    """The sorted distinct granules that requests (offset, bytes > 0) touch."""
    off = np.asarray(offset, np.int64)
    b = np.asarray(nbytes, np.int64)
    keep = b > 0
    first, last = off[keep] // granule, (off[keep] + b[keep] - 1) // granule
    span = last - first
    if not len(span) or int(span.max()) == 0:
        return np.unique(first)
    # Long requests cross granules: every granule between first and last is touched.
    k = span + 1
    starts = np.zeros(len(k), np.int64)
    np.cumsum(k[:-1], out=starts[1:])
    req = np.repeat(np.arange(len(k)), k)
    return np.unique(first[req] + (np.arange(int(k.sum())) - starts[req]))


def merge(a: np.ndarray | None, b: np.ndarray) -> np.ndarray:
    """The union of two sorted granule sets."""
    return b if a is None else np.union1d(a, b)


def touched_by_device(r: np.ndarray, data: np.ndarray, granule: int = GRANULE):
    """{device: its touched granules} of records `r` (only rows where `data`)."""
    out: dict[int, np.ndarray] = {}
    for dev in np.unique(r["dev"][data]).tolist():
        m = data & (r["dev"] == dev)
        out[dev] = granules(r["offset"][m], r["bytes"][m], granule)
    return out


def footprint(g: np.ndarray, granule: int = GRANULE) -> int:
    return len(g) * granule


def check_unit(granule: int) -> None:
    if granule < 4096 or granule & (granule - 1):
        raise IotapeError(f"--remap-unit {granule}: must be a power of two of at least 4096 bytes")


def check_fits(what: str, need: int, size: int, devices: list[str], granule: int = GRANULE) -> None:
    """Refuse a target range smaller than the footprint packed onto it, in one line."""
    if need > size:
        raise IotapeError(
            f"--remap compact: {what} is {_size(size)}; the footprint to pack onto it "
            f"({', '.join(devices)}: its touched {granule >> 10} KiB granules) is "
            f"{_size(need)}: give a target of at least that, or --remap scale or wrap"
        )


def _size(n: int) -> str:
    return (
        f"{n} bytes ({n / 2**20:.1f} MiB)" if n < 10 << 30 else f"{n} bytes ({n / 2**30:.2f} GiB)"
    )


def pack(
    offset: np.ndarray,
    nbytes: np.ndarray,
    g: np.ndarray,
    shift: int,
    block: int,
    rotate: int = 0,
    granule: int = GRANULE,
) -> tuple[np.ndarray, np.ndarray]:
    """(offsets relative to the range, sizes) of requests of a device whose touched
    granules are `g`, packed from byte `shift` of the range; `rotate` granules
    (modulo the footprint) move a scaled copy off the blocks of the first.

    Sizes are rounded up to whole blocks as remap.remap does; a request whose granule
    is not in `g` (none, for the trace `g` was taken from) raises."""
    off = np.asarray(offset, np.int64)
    b = np.asarray(nbytes, np.int64)
    b = (b + block - 1) // block * block
    k = off // granule
    rank = np.searchsorted(g, k)
    bad = (rank >= len(g)) | (g[np.minimum(rank, len(g) - 1)] != k) if len(g) else k == k
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise IotapeError(f"--remap compact: byte {int(off[i])} lies outside the touched extents")
    if rotate:
        rank = (rank + rotate) % len(g)
    new = shift + rank * granule + off % granule
    return new // block * block, b
