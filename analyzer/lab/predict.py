"""What the baseline's trace predicts for the read cache and the tier, before either
runs: the simulator's hit ratio (`iotape analyze tiering` with the engine's own
parameters), the projected read latency (analyzer.tiering.projection: the fast
device's measured latencies for the hits, the baseline's for the misses) and the
closed loop's throughput by Little's law.

Little's law for a closed loop: N session threads, each waiting for one database
read at a time, do X = N / (R + Z) reads per second, R the mean read latency and Z
the rest of a thread's time per read (CPU, log commits, cache work), which the
baseline gives: Z = N / X_base - R_base. The same threads with a read latency R'
do X' = N / (R' + Z); the projected gain is X' / X_base = (R_base + Z) / (R' + Z).
The projection keeps the misses at the baseline's latency: it does not model the
slow device's queue getting shorter (nor the copies a cache or tier adds to it),
which is what the measurement beside it shows.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import numpy as np

from analyzer.tiering.accesses import request_hits
from analyzer.tiering.events import READ, Events
from analyzer.tiering.params import MiB, Params
from analyzer.tiering.policies import prepare
from analyzer.tiering.projection import profile, project
from analyzer.tiering.simulate import simulate

NS = 1e9


def subset(ev: Events, keep: np.ndarray) -> Events:
    return Events(*(getattr(ev, f.name)[keep] for f in fields(Events)))


def db_events(ev: Events, regions: list[tuple[int, int]], unit: int) -> Events:
    """The database regions' requests, each region's offsets from its own start and
    the regions laid end to end on unit boundaries: the engine numbers its units
    per database from the region's base (workload/src/tier.c), the log is not
    tiered."""
    keep = np.zeros(len(ev), dtype=bool)
    offset = ev.offset.copy()
    at = 0
    for base, end in regions:
        inside = (ev.offset >= base) & (ev.offset < end)
        keep |= inside
        offset[inside] = ev.offset[inside] - base + at
        at += -(-(end - base) // unit) * unit
    out = subset(ev, keep)
    out.offset = offset[keep]
    return out


def params(policy: str, capacity_mb: int, unit_kb: int, stats_s: float, migrate_s: float) -> Params:
    """The simulator's parameters for the engine's `--tier-policy tier|cache` with the
    same capacity, unit and intervals (docs/hybrid.md: `tier` is the `tiering` policy
    with the msa preset's decay and no budget, `cache` is `lru` without writes)."""
    base = Params(unit=unit_kb << 10, capacity=capacity_mb * MiB)
    if policy == "cache":
        return replace(base, policy="lru", count_writes=False)
    return replace(base, stats_interval_s=stats_s, migrate_interval_s=migrate_s, half_life_s=60.0)


def _reads_hit(ev: Events, p: Params) -> np.ndarray:
    r = prepare(ev, p)
    assert p.capacity is not None
    return request_hits(r.acc, r.hits(p.units(p.capacity)).hit)


def predict(
    base: Events, fast: Events, p: Params, threads: int, base_reads_per_s: float
) -> dict[str, Any]:
    """The prediction for one configuration from the baseline's database events,
    the fast device's measured requests, the engine's session threads (all
    databases) and the baseline's database reads per second."""
    sim = simulate(base, p)
    reads = base.op == READ
    hit = _reads_hit(base, p)[reads]
    lat = project(subset(base, reads), hit, profile(fast), profile(subset(base, reads)))
    r_base = (lat["slow_only"]["mean_ns"] or 0.0) / NS
    r_new = (lat["projected"]["mean_ns"] or 0.0) / NS
    cycle = threads / base_reads_per_s if base_reads_per_s > 0 else 0.0
    other = max(cycle - r_base, 0.0)
    gain = (r_base + other) / (r_new + other) if r_new + other > 0 else None
    hr = sim["hit_ratio"]
    return {
        "policy": p.policy,
        "params": sim["params"],
        "read_hit_ratio": hr["count"]["read"],
        "write_hit_ratio": hr["count"]["write"],
        "migrated_bytes": hr["migrated_bytes"],
        "read_latency_ms": {
            "baseline": r_base * 1e3,
            "projected": r_new * 1e3,
            "fast_device": (lat["fast_only"]["mean_ns"] or 0.0) / 1e6,
        },
        "littles_law": {
            "threads": threads,
            "baseline_reads_per_s": base_reads_per_s,
            "other_time_per_read_ms": other * 1e3,
            "read_throughput_gain": gain,
        },
    }
