"""Move a stream's offsets into a target range: fit, wrap or scale (compact, which
needs the whole trace's touched extents first, is compact.py's).

Every result is aligned to the target's logical block size and lies wholly
inside [0, size); sizes are rounded up to whole blocks (and capped at the range).
"""

from __future__ import annotations

import numpy as np

from base.errors import IotapeError

MODES = ("fit", "wrap", "scale", "compact")
BY_OFFSET = MODES[:3]  # what remap() does itself


def remap(
    offset: np.ndarray,
    nbytes: np.ndarray,
    size: int,
    block: int,
    mode: str = "fit",
    src_end: int | None = None,
    rotate: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, sizes) inside a range of `size` bytes, relative to its start.

    `rotate` shifts offsets (modulo the source span) before mapping, so that
    copies of a stream replayed side by side do not touch the same blocks.
    """
    if mode not in BY_OFFSET:
        raise IotapeError(f"--remap {mode}: unknown; one of {', '.join(BY_OFFSET)}")
    if block <= 0 or block & (block - 1):
        raise IotapeError(f"logical block size {block}: not a power of two")
    usable = size // block * block
    if usable < block:
        raise IotapeError(f"target range of {size} bytes holds no {block}-byte block")
    off = np.asarray(offset, dtype=np.int64)
    b = np.asarray(nbytes, dtype=np.int64)
    # x // block * block, for a power of two: its low bits cleared (the same for any
    # int64, negative too; numpy's int64 floor division is several times slower).
    down = np.int64(~(block - 1))
    b = np.minimum((b + block - 1) & down, usable)
    end = int(src_end) if src_end else int((off + b).max(initial=0))
    if rotate and end > 0:
        off = (off + rotate) % end
    if mode == "fit":
        new = off & down
        over = new + b > usable
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise IotapeError(
                f"--remap fit: request at byte {int(off[i])} (+{int(b[i])}) does not fit the "
                f"{usable}-byte target; use --remap wrap or --remap scale"
            )
        return new, b
    if mode == "wrap":
        new = off % usable // block * block
    else:
        ratio = usable / max(end, 1)
        new = (off.astype(np.float64) * ratio).astype(np.int64) // block * block
    # A request that would run past the end is moved back so that it ends there.
    new = np.where(new + b > usable, (usable - b) // block * block, new)
    return new, b
