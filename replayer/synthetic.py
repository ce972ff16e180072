"""Synthetic mode: each stream fitted per time window with fio's own knobs.

One fio job per (stream, target, window, direction): `startdelay` places it,
`runtime` bounds it, `rate` (bytes/s) gives the rate, `bssplit` the size mix,
`rw` random or sequential (by the share of requests that start where the
previous one ended), `random_distribution=zoned` where the offsets
fell, `iodepth` the most requests the trace had in flight, `fsync` the writes
per flush.
"""

from __future__ import annotations

import math

import numpy as np

from iotape.replayer.source import OP, max_in_flight

ZONES = 10
MAX_SIZES = 16


def percentages(counts: np.ndarray) -> np.ndarray:
    """Integer percentages summing to 100 (largest remainder)."""
    counts = np.asarray(counts, dtype=np.float64)
    share = counts / counts.sum() * 100
    out = np.floor(share).astype(np.int64)
    rest = 100 - int(out.sum())
    if rest:
        out[np.argsort(-(share - out), kind="stable")[:rest]] += 1
    return out


def bssplit(nbytes: np.ndarray) -> str:
    sizes, counts = np.unique(nbytes, return_counts=True)
    if len(sizes) > MAX_SIZES:
        keep = np.sort(np.argsort(-counts, kind="stable")[:MAX_SIZES])
        sizes, counts = sizes[keep], counts[keep]
    pct = percentages(counts)
    parts = [f"{int(s)}/{int(p)}" for s, p in zip(sizes, pct, strict=True) if p > 0]
    return ":".join(parts)


def zoned(offsets: np.ndarray, size: int) -> str:
    """fio's `zoned:access%/range%:...`, zones without accesses folded into a neighbour."""
    zone = np.minimum(offsets * ZONES // max(size, 1), ZONES - 1).astype(np.int64)
    access = percentages(np.bincount(zone, minlength=ZONES))
    parts: list[list[int]] = []
    pending = 0
    for a in access.tolist():
        if a == 0:
            if parts:
                parts[-1][1] += 100 // ZONES
            else:
                pending += 100 // ZONES
            continue
        parts.append([a, 100 // ZONES + pending])
        pending = 0
    return "zoned:" + ":".join(f"{a}/{r}" for a, r in parts)


def window_jobs(
    r: np.ndarray,
    t_ns: np.ndarray,
    offsets: np.ndarray,
    nbytes: np.ndarray,
    size: int,
    window_ns: int,
    rate_factor: float,
    time_scale: float,
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
            o = _direction(r[mine], t_ns[mine], offsets[mine], nbytes[mine], size, tag)
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
    r: np.ndarray, t_ns: np.ndarray, off: np.ndarray, b: np.ndarray, size: int, tag: str
) -> dict[str, str]:
    """fio options for one direction's requests of one window: pattern, sizes, depth."""
    seq = float(np.mean(off[1:] == (off[:-1] + b[:-1]))) if len(off) > 1 else 0.0
    verb = "read" if tag == "r" else "write"
    o: dict[str, str] = {
        "rw": verb if seq > 0.5 else f"rand{verb}",
        "bssplit": bssplit(b),
        "iodepth": str(min(256, max_in_flight(r, t_ns))),
    }
    if seq <= 0.5:
        o["random_distribution"] = zoned(off, size)
        o["norandommap"] = "1"
    return o
