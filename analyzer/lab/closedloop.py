"""The read cache's prediction as a closed loop: the baseline's session reads issued
by the engine's session threads, each thread's next read when its last one is done
(plus its time outside reads), the array's read cache (analyzer.tiering.fillqueue)
deciding each hit at that moment.

Why not the baseline's order: a closed loop reorders the reads, and which reads
come when decides an LRU's hits. A database whose units are cached reads at the
SSD's latency and makes most of the look-ups, all hits; one whose units are not
reads at the disks' and makes few. The measured `twoctl/c1` cache ran three or
four of its six databases at about 20x at a time, the others at 1-3x, the fast
ones changing now and then; the array counted 0.93 of its look-ups as hits. LRU
on the baseline's order (every database at its baseline rate) hits 0.81; the same
LRU on the measured run's own order 0.96, while each database's own sequence of
units is alike in both runs (its stack distances); copying each database's trace
at its measured mean rate gives 0.85. The hits come from the rate following the
cache's state read by read (docs/hybrid.md, "The read cache with six databases").

The model, per loop (a database) and its `threads` threads: they take the loop's
session reads in the baseline's order (from the start again when they run out: a
database's access pattern is stationary over the run); a read is a hit when
every unit it touches is (one look-up per unit, as the array's); a hit takes the
array's SSD time (`ArrayHit`, or the fast device's profile), a miss the slow
device's mean for its size times `slowdown` (the queue, analyzer.lab.slowqueue),
then the thread's time outside reads. Background reads (the maintenance's
fixed-rate reader: 24 % of `twoctl/c1`'s baseline database reads) are looked up
at their recorded times and wait for no one. A fill takes `Mover.fill_s`, one at
a time per controller (each controller has its own cache and mover). Counted over
the baseline's span: each loop's reads against the same loops without the cache
(every read a miss at the baseline's latency): the gain.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from analyzer.lab.slowqueue import SlowQueue, baseline_miss_s, load, miss_factor
from analyzer.tiering.accesses import accesses
from analyzer.tiering.events import WRITE, Events
from analyzer.tiering.fillqueue import FillQueueLRU
from analyzer.tiering.projection import Profile, mean_latency


@dataclass(frozen=True)
class Loops:
    """What the closed loop replays: the baseline's database reads (time order), each
    one's loop, units, and latency as a hit and as a miss (s), and each loop's
    threads and time outside reads."""

    loop: np.ndarray  # per read; -1: a background read (issued at its own time)
    starts: np.ndarray  # per read: its first unit in `uid`
    uid: np.ndarray  # dense unit ids, per (read, unit)
    hit_s: np.ndarray  # per read
    miss_s: np.ndarray  # per read
    threads: int  # per loop
    other_s: np.ndarray  # per loop
    span_s: float
    t_s: np.ndarray  # per read: its recorded issue time from the span's start
    cache: np.ndarray  # per read: its controller's cache (each its own mover)

    def background(self) -> tuple[np.ndarray, np.ndarray]:
        """The background reads (not a session's: maintenance, a fixed-rate reader)
        and their times."""
        i = np.flatnonzero(self.loop < 0)
        return i, self.t_s[i]


@dataclass(frozen=True)
class ArrayHit:
    """A hit in the emulated array's read cache: the SSD's time by the model's figures
    (analyzer/lab/array_model.toml: `ssd_read_ms` + bytes at `ssd_mb_s`) plus the
    host's path to the array (loop device, FUSE, the server), which the baseline
    shows on its writes: their recorded latency less the model's own (its
    counters). Not the fast probe's device: the array's hits are served by its
    model behind FUSE (0.36 ms measured in `twoctl/c1`'s cache run, the probe's
    loop device over memory 0.12 ms)."""

    ssd_s: float  # per request before its transfer
    ssd_mb_s: float
    path_s: float
    ssd_write_s: float = 0.0  # per write before its transfer (a fill's SSD write)

    def latency(self, reads: Events) -> np.ndarray:
        return self.ssd_s + reads.nbytes / (self.ssd_mb_s * 1e6) + self.path_s


@dataclass(frozen=True)
class CacheSite:
    """Where the read cache is, for the closed loop (each array per request of the
    baseline's database events): the array's hit latency (None: the fast device's
    profile), which requests are a session thread's (the rest are background reads;
    None: all), each one's controller (each has its own cache and mover; None: one)
    and its offset on the array, whose units the cache holds (a database region
    not on a unit boundary shares its first and last units with its neighbours;
    None: the events' own offsets)."""

    hit: ArrayHit | None = None
    session: np.ndarray | None = None
    controller: np.ndarray | None = None
    array_offset: np.ndarray | None = None


def host_path_s(writes_lat_ns: np.ndarray, counters: dict[str, Any] | None) -> float | None:
    """The host's path to the array from the baseline: its recorded writes' mean
    latency (every write on the array) less the model's mean write latency (its
    counters over the same run); None without counters."""
    if not counters or not counters.get("writes") or not len(writes_lat_ns):
        return None
    model = float(counters["write_latency_s_sum"]) / float(counters["writes"])
    return max(float(writes_lat_ns.mean()) / 1e9 - model, 0.0)


def array_hit(
    ev: Events, counters: dict[str, Any] | None, model: Mapping[str, Any]
) -> ArrayHit | None:
    """The array's hit latency from the baseline's trace `ev` (all its requests), its
    counters and the array's model (`ArrayModel` as a mapping); None without
    counters (not the array)."""
    writes = ev.lat_ns[(ev.op == WRITE) & (ev.lat_ns >= 0)]
    path = host_path_s(writes, counters)
    if path is None:
        return None
    return ArrayHit(
        float(model["ssd_read_ms"]) / 1e3,
        float(model["ssd_mb_s"]),
        path,
        float(model["ssd_write_ms"]) / 1e3,
    )


@dataclass(frozen=True)
class Mover:
    """How long the cache's mover takes for one fill: the unit's data read from the
    disks, then written to the SSDs (arraytier.c: `move_set_ops` issues all of a
    unit's chunk reads at once, one per data disk, and `move_op_done` starts the SSD
    write when the last of them is done). `read_s`: a chunk's transfer (the unit's
    bytes at the disks' bandwidth, over the chunks read at once); each chunk read
    also waits and positions as a miss does, and the fill waits for the slowest:
    `fork` is E[the longest of the chunks' latencies] / E[one] (`fork_join`), so
    the reads take `fork` misses' latency, not one; `write_s`: the SSD write (0
    where the fast device is not modelled)."""

    read_s: float
    write_s: float
    fork: float = 1.0

    def fill_s(self, miss_s: float) -> float:
        return self.read_s + self.fork * miss_s + self.write_s


def fork_join(lat_s: np.ndarray, n: int) -> float:
    """E[max of n independent draws] / E[one draw] of the latencies `lat_s` (their
    empirical distribution: E[max] = sum over the sorted values' steps of
    (1 - F^n)); 1 for n <= 1 or no data. A unit's copy reads its n chunks from n
    disks at once and waits for the last (arraytier.c), each disk's response a
    draw of what a host read's is; the disks' queues are taken independent (shared
    load makes them move together, so this leans long)."""
    x = np.sort(np.asarray(lat_s, dtype=float))
    if n <= 1 or not len(x) or x.mean() <= 0:
        return 1.0
    below = np.arange(len(x)) / len(x)  # F just below each sorted value
    return float(np.sum(np.diff(np.r_[0.0, x]) * (1 - below**n)) / x.mean())


def loops_from(
    reads: Events, loop: np.ndarray, unit: int, fast: Profile, slow: Profile, threads: int,
    other_s: np.ndarray, span_s: float, hit: ArrayHit | None = None,
    cache: np.ndarray | None = None, units: Events | None = None,
) -> Loops:  # fmt: skip
    """`units`: the same reads at the offsets whose units the cache holds (None:
    `reads`' own)."""
    acc = accesses(reads if units is None else units, unit)
    return Loops(
        loop=loop,
        starts=acc.starts,
        uid=acc.uid.astype(np.int64),
        hit_s=hit.latency(reads) if hit is not None else mean_latency(reads, fast) / 1e9,
        miss_s=mean_latency(reads, slow) / 1e9,
        threads=max(threads, 1),
        other_s=other_s,
        span_s=span_s,
        t_s=(reads.t_ns - reads.t_ns.min()) / 1e9 if len(reads) else np.zeros(0),
        cache=np.zeros(len(reads), dtype=np.int64) if cache is None else cache,
    )


def run(
    lp: Loops, k: int, fill_s: float, slowdown: float = 1.0, phase: float = 0.0
) -> dict[str, Any]:
    """One closed-loop run over the span with a cache of `k` units (0: none) per
    controller, each loop starting `phase` (0-1) into its sequence of reads."""
    n = len(lp.other_s)
    seq = [np.flatnonzero(lp.loop == j) for j in range(n)]
    cursor = [int(phase * len(x)) for x in seq]
    ends = np.r_[lp.starts[1:], len(lp.uid)]
    caches = [
        FillQueueLRU(k, fill_s) for _ in range(int(lp.cache.max()) + 1 if len(lp.cache) else 1)
    ]
    done = np.zeros(n, dtype=np.int64)
    hits = np.zeros(n, dtype=np.int64)
    looks = 0
    # (time, loop, thread or background read): the threads start at 0, a background
    # read (loop -1) at its recorded time from the span's start.
    heap = [(0.0, j, th) for j in range(n) if len(seq[j]) for th in range(lp.threads)]
    heap += [(float(t), -1, int(i)) for i, t in zip(*lp.background(), strict=True)]
    heapq.heapify(heap)
    span = lp.span_s
    while heap:
        t, j, th = heapq.heappop(heap)
        if t >= span:
            continue
        i = th if j < 0 else int(seq[j][cursor[j] % len(seq[j])])
        hit = k > 0
        if k > 0:
            cache = caches[lp.cache[i]]
            for u in lp.uid[lp.starts[i] : ends[i]].tolist():
                hit &= cache.read(u, t)  # every unit looked up, as the array does
                looks += 1
        if j < 0:
            continue
        cursor[j] += 1
        end = t + (lp.hit_s[i] if hit else lp.miss_s[i] * slowdown)
        if end <= span:
            done[j] += 1
            hits[j] += hit
        heapq.heappush(heap, (end + float(lp.other_s[j]), j, th))
    fills = sum(c.fills for c in caches)
    return {"reads": done, "hits": hits, "lookups": looks, "fills": fills}


ROUNDS = 10  # evaluations for the queue's fixed point (bisection on the slowdown)
# Each evaluation is the mean of runs starting at these points of the loops' reads:
# which databases a cache keeps fast is decided early and holds (docs/hybrid.md: the
# measured c1 cache ran three or four databases at ~20x at a time, the others at
# 1-3x), so one run is one draw of that choice (c2's two baselines: 10.7x and 8.2x).
PHASES = (0.0, 1 / 3, 2 / 3)


def gain(
    lp: Loops, k: int, base_reads_per_s: float, q: SlowQueue | None, mover: Mover
) -> dict[str, Any]:
    """Each loop's gain with the cache against the same loops without it, at the fixed
    point of the slow device's queue: a slowdown f of the misses gives a run, the
    run's reads, hits and fills a load on the disks (`slowqueue.load`, the
    baseline's reads/s split as the loops' own without the cache) and that load a
    slowdown F (`miss_factor`); F - f falls as f rises (slower misses, fewer reads
    and fills), bisected. Without `q`, no queue: f = 1 and fills are instant (the
    simulator's `lru`)."""
    ref = np.mean([run(lp, 0, 0.0, 1.0, ph)["reads"] for ph in PHASES], axis=0)
    rate = base_reads_per_s * ref / ref.sum() if ref.sum() else ref

    def at(f: float) -> dict[str, Any]:
        fill = mover.fill_s(f * baseline_miss_s(q)) if q is not None else 0.0
        runs = [run(lp, k, fill, f, ph) for ph in PHASES]
        r: dict[str, Any] = {
            x: np.mean([y[x] for y in runs], axis=0) for x in ("reads", "hits", "lookups", "fills")
        }
        r["gains"] = np.divide(r["reads"], ref, out=np.ones(len(ref)), where=ref > 0)
        r["gain"] = float(r["reads"].sum() / ref.sum()) if ref.sum() else 1.0
        r["slowdown"], r["fill_s"] = f, fill
        return r

    def excess(r: dict[str, Any]) -> float:
        assert q is not None
        hit = np.divide(r["hits"], r["reads"], out=np.zeros(len(ref)), where=r["reads"] > 0)
        rho, residual = load(q, rate, rate * r["gains"], hit, np.zeros(len(ref)),
                             r["fills"] / lp.span_s)  # fmt: skip
        r["utilization"] = rho
        return miss_factor(q, rho, residual) - r["slowdown"]

    if q is None:
        best = at(1.0)
        best["rounds"] = 1
        return best
    lo, hi, rounds = 0.0, 1.0, 1
    best = at(hi)
    while excess(best) > 0 and hi < 1e3:
        lo, hi = hi, hi * 2
        best, rounds = at(hi), rounds + 1
    while rounds < ROUNDS:
        mid = (lo + hi) / 2
        r = at(mid)
        rounds += 1
        if excess(r) > 0:
            lo = mid
        else:
            hi, best = mid, r
    best["rounds"] = rounds
    return best
