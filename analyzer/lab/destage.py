"""How the array's destaging grows with a faster loop's writes, from the baseline's
trace and the array's own model (no second implementation of it).

The controller's write-back cache acknowledges a write and destages its stripe later
(analyzer/lab/src/arraycache.c): a stripe goes once full, after `destage_delay_ms`,
or under pressure, `destage_depth` at a time, each a RAID 6 read-modify-write,
reconstruct-write or full-stripe write. The baseline's trace shows none of that disk
time (the writes are acknowledged from the cache), so the prediction takes it from
the baseline's counters as background (slowqueue.with_disk_busy). It is not fixed: a
configuration that runs the loop g times as fast writes g times as fast, and more
writes coalesce per destage, so the destages' disk time grows, by less than g. The
counters show it (`iotape lab hybrid --device array`, destage operations a second,
baseline against the read cache's run): 667 -> 974 at 2.8x the writes
(`hybrid2-h1`), 692 -> 1,128 at 10.2x (`twoctl/c1`), 1,507 -> 2,209 at 7.6x
(`ctlmerge-c2`).

`growth` feeds the baseline's writes, their issue times divided by g, to the array's
offline mode (`iotape-array --replay`: the same model on its own clock, no FUSE)
with the baseline's model (no tier, no read cache), once per controller's device,
and returns the disks' busy seconds per second at each g over that at g = 1.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from analyzer.lab.array import SERVER
from analyzer.tiering.events import WRITE, Events

# The write rates (times the baseline's) the curve is taken at; between them the
# prediction interpolates, past the last it holds the last (the disks saturate).
GAINS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)


def destage_busy(ev: Events, model: Mapping[str, Any], gain: float, space: int) -> float:
    """The array's disks' busy seconds a second destaging the writes of `ev` (the
    baseline's requests, each controller's device `space` bytes apart) issued `gain`
    times as fast; 0 without writes."""
    writes = ev.op == WRITE
    if not writes.any() or gain <= 0:
        return 0.0
    t0 = int(ev.t_ns.min())
    span_s = max(int(ev.t_ns.max()) - t0, 1) / 1e9 / gain
    stripe = (int(model["disks"]) - 2) * (int(model["chunk_kb"]) << 10)
    argv_model = [f"{k}={v}" for k, v in {**model, "tier_mb": 0, "cache_ssd_mb": 0}.items()]
    busy = 0.0
    for c in np.unique(ev.offset[writes] // space).tolist():
        on = ev.offset // space == c
        base = int(c) * space
        size = -(-int((ev.offset[on] + ev.nbytes[on]).max() - base) // stripe) * stripe
        m = writes & on
        t = ((ev.t_ns[m] - t0) / gain).astype(np.int64)
        order = np.argsort(t, kind="stable")
        off, nb = ev.offset[m][order] - base, ev.nbytes[m][order]
        feed = "".join(
            f"{a} 1 {b} {n}\n" for a, b, n in zip(t[order].tolist(), off.tolist(), nb.tolist(),
                                                 strict=True)
        )  # fmt: skip
        argv = [str(SERVER), "--replay", str(size), *argv_model]
        run = subprocess.run(argv, input=feed, capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"{SERVER.name} --replay: {run.stderr.strip()}")
        busy += float(json.loads(run.stdout[run.stdout.index("{") :])["disk_busy_s"])
    return busy / span_s


def growth(
    ev: Events, model: Mapping[str, Any], space: int, gains: Sequence[float] = GAINS
) -> tuple[tuple[float, float], ...]:
    """(g, the destages' disk time at g writes over that at 1) for each of `gains`;
    empty without writes."""
    base = destage_busy(ev, model, 1.0, space)
    if base <= 0:
        return ()
    return tuple((float(g), destage_busy(ev, model, g, space) / base) for g in gains)
