"""Synthetic mode: each stream fitted per time window with fio's own knobs.

One fio job per (stream, target, window): `startdelay` places it, `runtime`
bounds it, `rate_iops` gives the rate, `rwmixread` the read share, `bssplit`
the size mix, `rw` random or sequential (by the share of requests that start
where the previous one ended), `random_distribution=zoned` where the offsets
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
) -> list[tuple[int, dict[str, str], int, int | None]]:
    """(window, fio options, requests it stands for, start of a sequential run or None)
    per window with I/O.
    `offsets` are already remapped into [0, size)."""
    out = []
    win = t_ns // window_ns
    secs = window_ns / 1e9 * time_scale
    for w in np.unique(win).tolist():
        sel = win == w
        ops = r["op"][sel]
        reads = ops == OP["read"]
        writes = np.isin(ops, [OP["write"], OP["write-zeroes"]])
        data = reads | writes
        if not data.any():
            continue
        off, b = offsets[sel][data], nbytes[sel][data]
        nr, nw = int(reads.sum()), int(writes.sum())
        seq = float(np.mean(off[1:] == (off[:-1] + b[:-1]))) if len(off) > 1 else 0.0
        sequential = seq > 0.5
        kind = "" if sequential else "rand"
        rw = {(True, False): f"{kind}read", (False, True): f"{kind}write"}.get(
            (nr > 0, nw > 0), f"{kind}rw" if kind else "rw"
        )
        rate_r = math.ceil(nr * rate_factor / secs) if nr else 0
        rate_w = math.ceil(nw * rate_factor / secs) if nw else 0
        if rate_r + rate_w == 0:
            continue
        o: dict[str, str] = {
            "rw": rw,
            "bssplit": bssplit(b),
            "rate_iops": f"{rate_r},{rate_w}"
            if nr and nw
            else str(rate_r or rate_w)
            if nr
            else f",{rate_w}",
            "iodepth": str(min(256, max_in_flight(r[sel], t_ns[sel]))),
            "startdelay": f"{int(w * window_ns * time_scale / 1e6)}ms",
            "runtime": f"{max(1, int(window_ns * time_scale / 1e6))}ms",
            "time_based": "1",
        }
        if nr and nw:
            o["rwmixread"] = str(round(100 * nr / (nr + nw)))
        seq_start = int(off.min()) if sequential else None
        if not sequential:
            o["random_distribution"] = zoned(off, size)
            o["norandommap"] = "1"
        flushes = int((ops == OP["flush"]).sum())
        if flushes and nw:
            o["fsync"] = str(max(1, round(nw / flushes)))
        out.append((w, o, int(sel.sum()), seq_start))
    return out
