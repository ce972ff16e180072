"""Synthetic mode: each stream fitted per time window with fio's own knobs.

One fio job per (stream, target, window, direction): `startdelay` places it,
`runtime` bounds it, `rate` (bytes/s) gives the rate, `bssplit` the size mix,
`iodepth` the most requests the trace had in flight, `fsync` the writes per
flush. Locality (fitloc.py): `random_distribution` is the stream's fitted zipf
(the same rank -> block map in every window) or per-window `zoned_abs` zones,
whichever reproduces the stream's LRU hit-ratio curve better; `percentage_random`
keeps the window's share of requests that continue the previous one (a window
almost all sequential is a sequential job).
"""

from __future__ import annotations

import math

import numpy as np

from replayer.plan import fitloc
from replayer.plan.fitloc import percentages
from replayer.plan.source import OP, max_in_flight

MAX_SIZES = 16


def bssplit(nbytes: np.ndarray) -> str:
    sizes, counts = np.unique(nbytes, return_counts=True)
    if len(sizes) > MAX_SIZES:
        keep = np.sort(np.argsort(-counts, kind="stable")[:MAX_SIZES])
        sizes, counts = sizes[keep], counts[keep]
    pct = percentages(counts)
    parts = [f"{int(s)}/{int(p)}" for s, p in zip(sizes, pct, strict=True) if p > 0]
    return ":".join(parts)


def data_rows(r: np.ndarray) -> np.ndarray:
    """Reads and writes: what a cache sees, and what fio's offsets stand for."""
    return np.flatnonzero(np.isin(r["op"], [OP["read"], OP["write"], OP["write-zeroes"]]))


def fit(
    r: np.ndarray,
    t_ns: np.ndarray,
    offsets: np.ndarray,
    nbytes: np.ndarray,
    size: int,
    window_ns: int,
    seed: int,
    kind: str = "auto",
) -> fitloc.Model:
    """The stream's locality model (fitloc.py), from its reads and writes in time order."""
    d = data_rows(r)
    is_write = (r["op"][d] != OP["read"]).astype(np.int64)
    return fitloc.choose(is_write, t_ns[d] // window_ns, offsets[d], nbytes[d], size, seed, kind)


def zoned_abs(zs: list[tuple[int, int]]) -> str:
    """fio's option, sizes in KiB where whole (fio reads at most 4 KiB per option line)."""
    return "zoned_abs:" + ":".join(f"{p}/{_short(z)}" for p, z in zs)


def _short(n: int) -> str:
    return f"{n >> 10}k" if n % 1024 == 0 else str(n)


def window_jobs(
    r: np.ndarray,
    t_ns: np.ndarray,
    offsets: np.ndarray,
    nbytes: np.ndarray,
    size: int,
    window_ns: int,
    rate_factor: float,
    time_scale: float,
    model: fitloc.Model,
) -> list[tuple[str, dict[str, str], int, int | None]]:
    """(label, fio options, requests it stands for, start of a sequential run or None)
    per window and direction with I/O (reads and writes apart: each its own rate,
    sizes and pattern, as their streams usually differ).
    `offsets` are already remapped into [0, size)."""
    out = []
    win = t_ns // window_ns
    secs = window_ns / 1e9 * time_scale
    for w in np.unique(win).tolist():
        sel = np.flatnonzero(win == w)
        ops = r["op"][sel]
        flushes = int((ops == OP["flush"]).sum())
        for tag, want in (("r", [OP["read"]]), ("w", [OP["write"], OP["write-zeroes"]])):
            mine = sel[np.isin(ops, want)]
            if not len(mine):
                continue
            o = _direction(r[mine], t_ns[mine], offsets[mine], nbytes[mine], size, tag, model)
            n = len(mine)
            # A byte rate, not rate_iops: with a size mix fio meters rate_iops in the
            # smallest size, so 4k/32k writes at rate_iops=78 ran at 19/s.
            o["rate"] = str(math.ceil(int(nbytes[mine].sum()) * rate_factor / secs))
            o["startdelay"] = f"{int(w * window_ns * time_scale / 1e6)}ms"
            o["runtime"] = f"{max(1, int(window_ns * time_scale / 1e6))}ms"
            o["time_based"] = "1"
            if tag == "w" and flushes:
                o["fsync"] = str(max(1, round(n / flushes)))
            seq_start = int(offsets[mine].min()) if o["rw"] in ("read", "write") else None
            # The window's flushes are counted with its writes (they ride on `fsync`).
            out.append((f"w{w:04d}.{tag}", o, n + (flushes if tag == "w" else 0), seq_start))
    return out


def _direction(
    r: np.ndarray,
    t_ns: np.ndarray,
    off: np.ndarray,
    b: np.ndarray,
    size: int,
    tag: str,
    model: fitloc.Model,
) -> dict[str, str]:
    """fio options for one direction's requests of one window: pattern, sizes, depth."""
    seq = fitloc.seq_share(off, b)
    verb = "read" if tag == "r" else "write"
    sizes = bssplit(b)
    if str(model.gran) not in {x.split("/")[0] for x in sizes.split(":")}:
        # A 0 % entry of the stream's smallest size: fio's block for offsets (zipf's
        # ranks, zoned_abs's picks) is the job's smallest size, the same in every window.
        sizes = f"{model.gran}/0:{sizes}"
    o: dict[str, str] = {
        "rw": verb if seq >= fitloc.SEQ_RANDOM_BELOW else f"rand{verb}",
        "bssplit": sizes,
        "iodepth": str(min(256, max_in_flight(r, t_ns))),
    }
    if seq < fitloc.SEQ_RANDOM_BELOW:
        if model.kind == "zipf":
            o["random_distribution"] = f"zipf:{model.theta:g}:0"
        else:
            o["random_distribution"] = zoned_abs(fitloc.zones(off, b, model.gran, size))
        if round(seq * 100) >= 1:
            o["percentage_random"] = str(100 - round(seq * 100))
        o["norandommap"] = "1"
    return o
