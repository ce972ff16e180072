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
slow device's queue getting shorter, nor the copies a cache or tier adds to it.

The slow device bounds the gain too (the utilization law): its c disks can be
busy at most c seconds a second. From the baseline's trace of the slow device,
each request's service time on c FIFO servers (completion minus the later of its
issue and the completion c before it, in completion order) gives the busy time;
per read of the databases the device spent W = busy / reads, and with a read hit
ratio h it spends W - h x S_read (S_read: a database read's mean service); a tier
also takes its write hits off the slow device (- h_w x writes / reads x S_write),
a write-through cache does not. The copies take the simulated migrated bytes at
the device's stated bandwidth plus one read's service per unit, spread over the
trace's span: C disk-seconds a second. So reads/s <= (c - C) / W', and the bound
on the gain is that over the baseline's reads/s. The prediction is the smaller of the two gains.

Each database's session threads are a closed loop of their own (the engine gives
every database its threads), so with `loops` (each request's database) the law is
applied per loop and the gains summed: X'/X_base = sum_k X_k g_k / sum_k X_k.
Which loops run faster feeds back into the placement: a loop at g_k times its rate
counts g_k times the heat on its units in each interval, so the tier keeps its
units. The prediction iterates to that fixed point: the simulator reruns with each
loop's requests counted round(g_k) times (copies at the same instants: heat, not
new pages), until the rounded gains repeat. With 6 databases of one thread on the
array, the measured tier ran three databases 14-17x and three 1.2x (8.9x in all)
where one loop over all threads predicted 3.9x (docs/hybrid.md, "Why predictions
miss"). A cache that admits on a miss (LRU) does not count heat: copies at one
instant change nothing, so its fixed point is the per-loop law's first step. A
read cache is therefore predicted by a closed loop instead (`closed_loop_gain`,
analyzer/lab/closedloop.py): the session threads issue the baseline's reads and the
cache, as the array runs it, decides each hit when the read is issued.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import numpy as np

from analyzer.lab import closedloop, hostcpu
from analyzer.lab.slowqueue import (
    DeviceTime,
    SlowQueue,
    queue_report,
    queued_gains,
    slow_queue,
    utilization_bound,
)
from analyzer.tiering.accesses import request_hits
from analyzer.tiering.events import READ, Events
from analyzer.tiering.params import MiB, Params
from analyzer.tiering.policies import prepare
from analyzer.tiering.projection import profile, project
from analyzer.tiering.simulate import simulate

NS = 1e9


def subset(ev: Events, keep: np.ndarray) -> Events:
    return Events(*(getattr(ev, f.name)[keep] for f in fields(Events)))


def db_mask(ev: Events, regions: list[tuple[int, int]]) -> np.ndarray:
    """Which of `ev`'s requests are in a database region (`db_events` keeps them, in
    order)."""
    keep = np.zeros(len(ev), dtype=bool)
    for base, end in regions:
        keep |= (ev.offset >= base) & (ev.offset < end)
    return keep


def db_events(ev: Events, regions: list[tuple[int, int]], unit: int) -> Events:
    """The database regions' requests, each region's offsets from its own start and
    the regions laid end to end on unit boundaries: the engine numbers its units
    per database from the region's base (workload/src/tier.c), the log is not
    tiered."""
    keep = db_mask(ev, regions)
    offset = ev.offset.copy()
    at = 0
    for base, end in regions:
        inside = (ev.offset >= base) & (ev.offset < end)
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


def _reads_hit(ev: Events, p: Params, ctl: np.ndarray | None = None) -> np.ndarray:
    """Each request's hit; with `ctl` (each request's controller) each controller's
    requests through a tier or cache of its own, of an equal share of the capacity:
    on the array each controller is its own server with its own SSDs, policy and heat
    (hybrid.py, `_array_ssd`), so a database competes for its controller's units
    only, where one pool of both lets one controller's databases take more than its
    share."""
    assert p.capacity is not None
    n = int(ctl.max()) + 1 if ctl is not None and len(ctl) else 1
    if n > 1 and ctl is not None:
        out = np.zeros(len(ev), dtype=bool)
        share = replace(p, capacity=p.capacity // n)
        for c in range(n):
            mine = ctl == c
            if mine.any():
                out[mine] = _reads_hit(subset(ev, mine), share)
        return out
    r = prepare(ev, p)
    return request_hits(r.acc, r.hits(p.units(p.capacity)).hit)


def loops_of(db: Events, regions: list[tuple[int, int]], unit: int) -> np.ndarray:
    """Each of `db_events`' requests' database (the index of its region): its
    session threads' closed loop."""
    ends = np.cumsum([-(-(end - base) // unit) * unit for base, end in regions])
    return np.searchsorted(ends, db.offset, side="right")


# Fixed-point rounds; each is one simulation of the (weighted) trace and moves one
# loop's copies (per_loop_gain), so up to a few rounds per loop.
MAX_ROUNDS = 40


def _miss_part(reads: Events, hit: np.ndarray, slow: Any) -> float:
    """The misses' share (s) of `reads`' mean projected latency: each miss at the
    slow device's profile (as `project`'s), over all the reads."""
    if not len(reads) or hit.all():
        return 0.0
    miss = subset(reads, ~hit)
    lat = project(miss, np.zeros(len(miss), dtype=bool), slow, slow)
    return (lat["slow_only"]["mean_ns"] or 0.0) / NS * len(miss) / len(reads)


def _loop_latencies(
    base: Events, p: Params, loops: np.ndarray, copies: np.ndarray, fast: Any, slow: Any,
    ctl: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Per loop: the baseline's and the projected mean read latency (s, both from the
    devices' profiles, as `predict`'s) when each loop's requests are counted
    `copies[loop]` times by the simulator (each original's hit its first copy's),
    its reads' and writes' hit ratios, and the projected latency's share from
    misses (`_miss_part`)."""
    rep = copies[loops]
    idx = np.repeat(np.arange(len(base)), rep)
    first = np.r_[True, idx[1:] != idx[:-1]] if len(idx) else np.zeros(0, dtype=bool)
    hit = _reads_hit(subset(base, idx), p, None if ctl is None else ctl[idx])[first]
    reads = base.op == READ
    was, now, missed = np.zeros(len(copies)), np.zeros(len(copies)), np.zeros(len(copies))
    r_hit, w_hit = np.zeros(len(copies)), np.zeros(len(copies))
    for k in range(len(copies)):
        mine = reads & (loops == k)
        wrote = ~reads & (loops == k)
        if wrote.any():
            w_hit[k] = hit[wrote].mean()
        if mine.any():
            r_hit[k] = hit[mine].mean()
            lat = project(subset(base, mine), hit[mine], fast, slow)
            was[k] = (lat["slow_only"]["mean_ns"] or 0.0) / NS
            now[k] = (lat["projected"]["mean_ns"] or 0.0) / NS
            missed[k] = _miss_part(subset(base, mine), hit[mine], slow)
    return was, now, r_hit, w_hit, missed


def next_copies(copies: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The fixed point's next step: one loop's copies moved to its wanted count, the
    loop farthest from it (the lowest on a tie). The heat feedback is positive (a
    faster loop earns its units more heat), so two loops sharing what is left of
    the tier evenly is an equilibrium the array does not keep: the one ahead takes
    the units. Moving every loop at once keeps such a tie tied (`ctlmerge-c2`: 2.5
    fast databases of 6 predicted where the run had 2 on each controller)."""
    out = copies.copy()
    j = int(np.argmax(np.abs(wanted - copies)))
    out[j] = wanted[j]
    return out


def per_loop_gain(
    base: Events,
    p: Params,
    loops: np.ndarray,
    threads: int,
    base_reads_per_s: float,
    fast: Any,
    slow: Any,
    queue: SlowQueue | None = None,
    ctl: np.ndarray | None = None,
) -> dict[str, Any]:
    """Little's law per closed loop (`loops`: each request's loop, 0..n-1; the
    threads split evenly, each loop's baseline rate its share of the reads) at the
    fixed point of the placement's heat feedback (the module's docstring); with
    `queue`, each round's gains are `queued_gains`' (the misses slowed by the slow
    device's load at those gains)."""
    n = int(loops.max()) + 1 if len(loops) else 0
    reads = base.op == READ
    count = np.array([(reads & (loops == k)).sum() for k in range(n)], dtype=float)
    copies = np.ones(n, dtype=np.int64)
    r_base, r_new, r_hit, w_hit, missed = _loop_latencies(base, p, loops, copies, fast, slow, ctl)
    rate = base_reads_per_s * count / count.sum() if count.sum() else count
    per_thread = threads / n if n else 0.0
    other = np.maximum(np.divide(per_thread, rate, out=np.zeros(n), where=rate > 0) - r_base, 0)
    gains = np.ones(n)
    slowdown, rho = 1.0, None
    rounds, converged = 0, False
    for rounds in range(1, MAX_ROUNDS + 1):
        if rounds > 1:
            _, r_new, r_hit, w_hit, missed = _loop_latencies(
                base, p, loops, copies, fast, slow, ctl
            )
        if queue is not None:
            w_off = w_hit if p.policy == "tiering" else np.zeros(n)
            gains, slowdown, rho = queued_gains(
                queue, rate, r_base, other, r_new - missed, missed, r_hit, w_off
            )
        else:
            ok = r_new + other > 0
            gains = np.where(ok, (r_base + other) / np.where(ok, r_new + other, 1), 1.0)
        nxt = np.maximum(np.rint(gains), 1).astype(np.int64)
        if np.array_equal(nxt, copies):
            converged = True
            break
        copies = next_copies(copies, nxt)
    total = float((count * gains).sum() / count.sum()) if count.sum() else None
    writes = np.array([(~reads & (loops == k)).sum() for k in range(n)], dtype=float)
    done = count * gains  # each loop's reads at its gain: the mix the slow device sees
    return {
        "read_throughput_gain": total,
        "read_hit_ratio": float((done * r_hit).sum() / done.sum()) if done.sum() else 0.0,
        "write_hit_ratio": (
            float((writes * gains * w_hit).sum() / (writes * gains).sum()) if writes.sum() else 0.0
        ),
        "rounds": rounds,
        "converged": converged,
        "miss_slowdown": slowdown,
        "slow_utilization": rho,
        "loops": [
            {"reads": int(c), "baseline_ms": rb * 1e3, "other_ms": o * 1e3, "gain": float(g)}
            for c, rb, o, g in zip(count, r_base, other, gains, strict=True)
        ],
    }


def closed_loop_gain(
    base: Events,
    p: Params,
    loops: np.ndarray | None,
    threads: int,
    base_reads_per_s: float,
    profiles: tuple[Any, Any],
    q: SlowQueue | None,
    dev: DeviceTime | None,
    site: closedloop.CacheSite | None = None,
) -> dict[str, Any]:
    """A read cache's gain by the closed loop (analyzer.lab.closedloop): each
    database's threads (the engine's `threads` split evenly) issue its baseline
    session reads, the cache deciding each hit when it is issued, the misses
    queued at the load the run makes (`q`; None: at the baseline's latency, fills
    instant). `profiles`: the fast and the slow device's; `site`: the array's hit
    latency, each request's controller and offset on the array, and which are a
    session's (`closedloop.CacheSite`; None: the fast device's latency, one cache
    of `base`'s units, every read a session's)."""
    site = site or closedloop.CacheSite()
    fast, slow = profiles
    hit = site.hit
    reads = base.op == READ
    rd = subset(base, reads)
    of = loops[reads] if loops is not None else np.zeros(len(rd), dtype=np.int64)
    n = int(of.max()) + 1 if len(of) else 0
    if site.session is not None:
        of = np.where(site.session[reads], of, -1)
    count = np.bincount(of[of >= 0], minlength=n).astype(float)
    span = float(count.sum()) / base_reads_per_s
    ctl = site.controller[reads] if site.controller is not None else None
    on = site.array_offset
    units = replace(rd, offset=on[reads]) if on is not None else rd
    lp = closedloop.loops_from(rd, of, p.unit, fast, slow, 1, np.zeros(n), span, hit, ctl, units)
    caches = int(ctl.max()) + 1 if ctl is not None and len(ctl) else 1
    # The time outside reads as the one-loop law takes it (the baseline's cycle less
    # its mean read), the same for every loop: per loop it is a small difference of
    # large numbers (the trace's reads per database differ from the engine's counts
    # by up to 12 % in twoctl/c1).
    r_base = float(lp.miss_s[of >= 0].mean()) if count.sum() else 0.0
    other = max(threads / base_reads_per_s - r_base, 0.0)
    lp = replace(lp, threads=max(round(threads / n), 1), other_s=np.full(n, other))
    assert p.capacity is not None
    # The disks' response to a session read in the baseline (its recorded latency less
    # the host's path): the distribution a copy's chunk reads each draw from.
    known = rd.lat_ns[(of >= 0) & (rd.lat_ns >= 0)] / NS - (hit.path_s if hit is not None else 0.0)
    mover = closedloop.Mover(
        p.unit / (dev.mb_s * 1e6) / dev.copy_reads if dev is not None else 0.0,
        hit.ssd_write_s + p.unit / (hit.ssd_mb_s * 1e6) if hit is not None else 0.0,
        closedloop.fork_join(np.maximum(known, 0.0), dev.copy_reads) if dev is not None else 1.0,
    )
    r = closedloop.gain(lp, p.units(p.capacity) // caches, base_reads_per_s, q, mover)
    reads_done = r["reads"].sum()
    return {
        "model": "closed loop",
        "read_throughput_gain": r["gain"],
        "read_hit_ratio": float(r["hits"].sum() / reads_done) if reads_done else 0.0,
        "fills": float(r["fills"]),
        "fills_per_read": float(r["fills"] / reads_done) if reads_done else 0.0,
        "fill_ms": r["fill_s"] * 1e3,
        "fill_fork_join": mover.fork,
        "miss_slowdown": r["slowdown"],
        "slow_utilization": r.get("utilization"),
        "rounds": r["rounds"],
        "loops": [
            {
                "reads": int(c),
                "baseline_ms": r_base * 1e3,
                "other_ms": other * 1e3,
                "gain": float(g),
            }
            for c, g in zip(count, r["gains"], strict=True)
        ],
    }


def _bound(
    dev: DeviceTime, p: Params, hr: Any, by_loop: Any, closed: dict[str, Any] | None
) -> dict[str, Any]:
    """The utilization bound with the hits and copies of the prediction's own mix."""
    # A tier serves its writes' hits from the fast device; a cache writes through.
    w_hit = (hr["count"]["write"] or 0.0) if p.policy == "tiering" else 0.0
    r_hit = hr["count"]["read"] or 0.0
    if by_loop is not None:  # the hits of the mix the loops' gains make
        r_hit = by_loop["read_hit_ratio"]
        w_hit = by_loop["write_hit_ratio"] if p.policy == "tiering" else 0.0
    copied = hr["migrated_bytes"]
    if closed is not None:  # the hits and fills of the closed loop's order
        r_hit, copied = closed["read_hit_ratio"], int(closed["fills"] * p.unit)
    return utilization_bound(dev, r_hit, copied, p.unit, w_hit)


def predict(
    base: Events,
    fast: Events,
    p: Params,
    threads: int,
    base_reads_per_s: float,
    dev: DeviceTime | None = None,
    loops: np.ndarray | None = None,
    queue: bool = True,
    closed: bool = True,
    site: closedloop.CacheSite | None = None,
    cpu: hostcpu.Demand | None = None,
) -> dict[str, Any]:
    """The prediction for one configuration from the baseline's database events,
    the fast device's measured requests, the engine's session threads (all
    databases), the baseline's database reads per second, its slow device's
    time (None: no utilization bound, no queue) and each request's closed loop
    (`loops_of`; None: one loop of all threads). `queue`: the misses wait in the
    slow device's queue at the configuration's load (`queued_gains`); False keeps
    them at the baseline's latency. `closed`: a read cache (`lru`) is predicted by
    the closed loop (`closed_loop_gain`, with what `site` says of the array and
    the requests), its hits as the loop's order makes them; False: the law on the
    baseline's order (per loop, at its heat fixed point). `cpu`: the baseline's CPU
    (`hostcpu.demand`; None: the host's cores not modelled, `_host_cpu`)."""
    sim = simulate(base, p)
    hr = sim["hit_ratio"]
    q = slow_queue(dev, p, hr["migrated_bytes"]) if dev is not None and queue else None
    reads = base.op == READ
    ctl = site.controller if site is not None and site.controller is not None else None
    hit = _reads_hit(base, p, ctl)[reads]
    fast_p, slow_p = profile(fast), profile(subset(base, reads))
    lat = project(subset(base, reads), hit, fast_p, slow_p)
    r_base = (lat["slow_only"]["mean_ns"] or 0.0) / NS
    r_new = (lat["projected"]["mean_ns"] or 0.0) / NS
    cycle = threads / base_reads_per_s if base_reads_per_s > 0 else 0.0
    other = max(cycle - r_base, 0.0)
    gain = (r_base + other) / (r_new + other) if r_new + other > 0 else None
    missed = _miss_part(subset(base, reads), hit, slow_p)
    queued: dict[str, Any] | None = None
    if q is not None and gain is not None:
        w_one = (hr["count"]["write"] or 0.0) if p.policy == "tiering" else 0.0
        one = [base_reads_per_s, r_base, other, r_new - missed, missed, hit.mean(), w_one]
        g, f, rho = queued_gains(q, *(np.array([float(x)]) for x in one))
        gain = float(g[0])
        queued = queue_report(q, rho, f)
    one_loop = gain
    by_loop = None
    if loops is not None and len(loops) == len(base) and len(np.unique(loops)) > 1:
        by_loop = per_loop_gain(base, p, loops, threads, base_reads_per_s, fast_p, slow_p, q, ctl)
        gain = by_loop["read_throughput_gain"]
    cl = None
    if closed and p.policy == "lru" and base_reads_per_s > 0 and reads.any():
        loop_of = loops if loops is not None and len(loops) == len(base) else None
        cl = closed_loop_gain(
            base, p, loop_of, threads, base_reads_per_s, (fast_p, slow_p), q, dev, site
        )
        gain = cl["read_throughput_gain"]
        if q is not None:  # the queue at the closed loop's own load and fills
            queued = queue_report(q, cl["slow_utilization"], cl["miss_slowdown"])
            queued["copies_per_read"] = cl["fills_per_read"]
    bound = _bound(dev, p, hr, by_loop, cl) if dev is not None else None
    host = _host_cpu(cpu, gain, cl or by_loop, threads, base_reads_per_s)
    gains = [(host or {}).get("read_throughput_gain", gain)]
    gains += [(bound or {}).get("read_throughput_gain")]
    # The closed loop's hits and fills are the prediction's (the simulator's beside).
    ordered = {"read_hit_ratio": hr["count"]["read"], "migrated_bytes": hr["migrated_bytes"]}
    return {
        "policy": p.policy,
        "params": sim["params"],
        "read_hit_ratio": cl["read_hit_ratio"] if cl else hr["count"]["read"],
        "write_hit_ratio": hr["count"]["write"],
        "migrated_bytes": int(cl["fills"] * p.unit) if cl else hr["migrated_bytes"],
        "baseline_order": ordered,
        "read_latency_ms": {
            "baseline": r_base * 1e3,
            "projected": r_new * 1e3,
            "fast_device": (lat["fast_only"]["mean_ns"] or 0.0) / 1e6,
            "misses_share": missed * 1e3,
        },
        "queue": queued,
        "littles_law": {
            "threads": threads,
            "baseline_reads_per_s": base_reads_per_s,
            "other_time_per_read_ms": other * 1e3,
            "read_throughput_gain": gain,
            "one_loop_gain": one_loop,
            "per_loop": by_loop,
            "closed_loop": cl,
        },
        "utilization_bound": bound,
        "host_cpu": host,
        "read_throughput_gain": min((g for g in gains if g is not None), default=None),
    }


def _host_cpu(
    cpu: hostcpu.Demand | None, gain: float | None, loops: dict[str, Any] | None, threads: int,
    base_reads_per_s: float,
) -> dict[str, Any] | None:  # fmt: skip
    """The prediction's gain with the host's cores (`hostcpu.bounded`): per loop of
    `loops` (the per-loop law's or the closed loop's report: each loop's baseline
    reads and gain, the threads split evenly) or one loop of all threads at `gain`;
    None without the baseline's CPU or a gain."""
    if cpu is None or gain is None:
        return None
    rows = (loops or {}).get("loops") or [{"reads": 1, "gain": gain}]
    count = np.array([float(x["reads"]) for x in rows])
    g = np.array([float(x["gain"]) for x in rows])
    rate = base_reads_per_s * count / count.sum() if count.sum() else count
    per = threads / len(rows)
    cycle = np.divide(per, rate * g, out=np.full(len(rows), np.inf), where=rate * g > 0)
    return hostcpu.bounded(cpu, g, count, cycle)
