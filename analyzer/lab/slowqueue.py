"""The slow device under a configuration: its time from the baseline's trace (the
utilization bound) and the queue a configuration's misses and copies build on its
disks (M/G/c by the Allen-Cunneen approximation: Allen, "Probability, Statistics,
and Queueing Theory", 2nd ed., 1990, sec. 6.4; exact for M/M/c,
Pollaczek-Khinchine at c = 1)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from analyzer.tiering.events import READ, Events
from analyzer.tiering.params import Params

NS = 1e9


@dataclass(frozen=True)
class DeviceTime:
    """The baseline's slow device, from its trace (service_times) and its stated
    bandwidth: what the utilization bound needs."""

    busy_s: float  # service time summed over every request
    span_s: float  # first issue to last completion
    reads: int  # database reads (the prediction's unit of work)
    read_service_s: float  # their mean service time
    writes: int  # database writes
    write_service_s: float  # their mean service time
    mb_s: float  # stated sequential bandwidth (copies)
    servers: int = 1  # disks serving at once
    requests: int = 0  # all requests with a service time (0: the database's reads and writes)
    service_s: float = 0.0  # their mean service time (0: the database reads')
    service_sq_s2: float = 0.0  # their mean squared service time (0: M/M/c's 2 x mean^2)
    background_s: float = 0.0  # disk-seconds the trace does not show, held per second
    copy_reads: int = 1  # disk reads a copied unit costs (the array: one per data chunk)
    position_s: float = 0.0  # each copy read's seek and rotation (0: a read's service)
    # (g, the background's disk time at g times the baseline's writes over at 1):
    # the write-back cache's destages (analyzer.lab.destage); empty: held fixed
    background_growth: tuple[tuple[float, float], ...] = ()


def service_times(ev: Events, servers: int = 1) -> np.ndarray:
    """Each request's service time (ns) on `servers` FIFO servers: completion minus
    the later of its issue and the completion `servers` before it (in completion
    order; exact for one FIFO disk); requests with no known time get 0."""
    ok = ev.lat_ns >= 0
    done = np.where(ok, ev.t_ns + ev.lat_ns, ev.t_ns)
    order = np.argsort(done, kind="stable")
    d = done[order]
    prev = np.r_[np.full(min(servers, len(d)), np.iinfo(np.int64).min), d[:-servers]][: len(d)]
    svc = np.where(ok[order], d - np.maximum(ev.t_ns[order], prev), 0)
    out = np.empty_like(svc)
    out[order] = svc
    return out


def device_time(
    ev: Events, db: Events, db_service_ns: np.ndarray, mb_s: float, servers: int = 1,
    write_back: bool = False,
) -> DeviceTime:  # fmt: skip
    """The slow device's time from the whole baseline trace `ev` and its database
    requests `db` (with their service times on `servers` disks). `write_back`: a
    controller's cache acknowledges the writes (the array: arraymodel.c admits a
    write into its cache and destages it later), so a write's time in the trace is
    the cache's, not the disks': only the reads count as the disks' work and their
    mix, the destages are background (`with_disk_busy`)."""
    reads = db.op == READ
    writes = ~reads
    svc = service_times(ev, servers)
    if write_back:
        svc = np.where(ev.op == READ, svc, 0)
    end = ev.t_ns + np.maximum(ev.lat_ns, 0)
    served = svc[svc > 0].astype(float) / NS
    return DeviceTime(
        busy_s=float(svc.sum()) / NS,
        span_s=float(end.max() - ev.t_ns.min()) / NS if len(ev) else 0.0,
        reads=int(reads.sum()),
        read_service_s=float(db_service_ns[reads].mean()) / NS if reads.any() else 0.0,
        writes=int(writes.sum()),
        write_service_s=(
            float(db_service_ns[writes].mean()) / NS if writes.any() and not write_back else 0.0
        ),
        mb_s=mb_s,
        servers=servers,
        requests=len(served),
        service_s=float(served.mean()) if len(served) else 0.0,
        service_sq_s2=float((served**2).mean()) if len(served) else 0.0,
    )


def with_disk_busy(
    dev: DeviceTime, array: dict[str, Any] | None, growth: tuple[tuple[float, float], ...] = ()
) -> DeviceTime:
    """`dev` with the baseline's own disk time where the array counts it
    (`disk_busy_s` over `now_s`, the baseline run's counters): a write-back
    controller acknowledges writes from its cache, so the trace shows no destage
    (read-modify-write) and its service times miss most of the disks' time (22 %
    of the disks' busy where the counters say 60 % in `arrayfast-full`). The
    difference is background: the destages, which grow with the configuration's
    writes by `growth` (analyzer.lab.destage: the array's own model on the
    baseline's writes at g times their rate; empty: held at the baseline's)."""
    if not array or not array.get("now_s") or dev.span_s <= 0:
        return dev
    busy = float(array["disk_busy_s"]) / float(array["now_s"]) * dev.span_s
    return replace(dev, background_s=max(busy - dev.busy_s, 0.0), background_growth=growth)


def striped(
    dev: DeviceTime, unit: int, chunk: int, array: dict[str, Any] | None = None
) -> DeviceTime:
    """`dev` as a striped set: a copied unit of `unit` bytes is read as unit / chunk
    chunks, each its own disk read (analyzer/lab/src/arraytier.c, `move_set_ops`),
    so it costs that many reads' positioning, not one; each positioning the mean
    seek and rotation per disk operation by the baseline's `array` counters (6.3 ms
    in `arrayfast-full`, where the trace's read service, which holds some of each
    disk's queue, says 10.7)."""
    if chunk <= 0:
        return dev
    ops = (array or {}).get("disk_reads", 0) + (array or {}).get("disk_writes", 0)
    pos = (array["disk_seek_s"] + array["disk_rotation_s"]) / ops if array and ops else 0.0
    return replace(dev, copy_reads=max(unit // chunk, 1), position_s=float(pos))


def copy_positioning(dev: DeviceTime) -> float:
    """The disks' time positioning for one copied unit: `copy_reads` seeks and
    rotations."""
    return dev.copy_reads * (dev.position_s or dev.read_service_s)


def utilization_bound(
    dev: DeviceTime, hit: float, migrated: int, unit: int, write_hit: float = 0.0
) -> dict[str, Any]:
    """The gain in reads/s the slow device allows (see the module's docstring)."""
    copy_s = migrated / (dev.mb_s * 1e6) + migrated / unit * copy_positioning(dev)
    span = dev.span_s * dev.servers  # disk-seconds the device has
    share = copy_s / span if span > 0 else 0.0
    per_read = 0.0
    if dev.reads:
        off = hit * dev.read_service_s + write_hit * dev.writes / dev.reads * dev.write_service_s
        per_read = dev.busy_s / dev.reads - off
    base_rate = dev.reads / dev.span_s if dev.span_s > 0 else 0.0
    room = dev.servers * (1 - share)
    gain = room / per_read / base_rate if per_read > 0 and base_rate > 0 else None
    return {
        "servers": dev.servers,
        "baseline_busy_share": dev.busy_s / span if span > 0 else None,
        "read_service_ms": dev.read_service_s * 1e3,
        "copy_share": share,
        "read_throughput_gain": None if gain is None else max(gain, 0.0),
    }


def erlang_c(servers: int, load: float) -> float:
    """M/M/c's probability that a request waits (Erlang C), `load` = arrivals x
    mean service (Erlangs, < servers), by the Erlang B recursion."""
    b = 1.0
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    rho = load / servers
    return b / (1 - rho * (1 - b))


def waiting(rho: float, servers: int, residual_s: float) -> float:
    """Mean wait (s) in the queue of `servers` FIFO servers at utilization `rho`
    with Poisson arrivals and a service mix of E[S^2] / (2 E[S]) = `residual_s`:
    the Allen-Cunneen approximation of M/G/c, C(c, c rho) / (c (1 - rho)) x
    E[S] (1 + scv) / 2 (A. O. Allen, Probability, Statistics, and Queueing
    Theory, 2nd ed., 1990, section 6.4; exact for M/M/c and, at c = 1, the
    Pollaczek-Khinchine formula of M/G/1). Infinite at rho >= 1."""
    if rho >= 1:
        return float("inf")
    rho = max(rho, 0.0)
    return erlang_c(servers, servers * rho) / (servers * (1 - rho)) * residual_s


@dataclass(frozen=True)
class SlowQueue:
    """The slow device's load under a configuration, from the baseline's trace
    (`slow_queue`): its requests per database read and their service mix, what a
    hit takes off, and what the configuration's copies add."""

    servers: int
    rho0: float  # the baseline's utilization: busy / (span x servers)
    fixed: float  # the part of rho0 the trace does not show (background: destages)
    work_s: float  # disk-seconds per database read in the baseline (all requests)
    requests_per_read: float  # the baseline's requests per database read
    service_s: float  # their mean service
    service_sq_s2: float  # their mean squared service
    read_service_s: float  # a database read's mean service (a read hit takes it off)
    write_service_s: float  # a database write's (a tier's write hit takes it off)
    writes_per_read: float
    copy_s: float  # one copied unit's service: its bytes at the bandwidth + one read
    copies_per_read: float  # a cache's fills per database read
    copies_per_s: float  # a tier's migrations per second
    background_growth: tuple[tuple[float, float], ...] = ()  # DeviceTime's
    copy_reads: int = 1  # the disk requests a copy is made of (DeviceTime's)


def slow_queue(dev: DeviceTime, p: Params, migrated: int) -> SlowQueue | None:
    """The slow device's queue for configuration `p` with the simulator's copies
    (`migrated` bytes over the baseline's span): each copied unit costs its bytes at
    the stated bandwidth plus `copy_reads` reads' service (as the utilization
    bound's): on the array a unit is read chunk by chunk from its stripe's data
    disks, each chunk its own seek and rotation (`striped`). A
    cache fills on a miss, so its fills come per read and a faster loop makes more;
    the tier migrates every interval, so its copies come per second."""
    if not dev.reads or dev.span_s <= 0 or dev.servers < 1:
        return None
    units = migrated / p.unit
    per_read = p.policy != "tiering"
    n = dev.requests or dev.reads + dev.writes
    mean = dev.service_s or dev.read_service_s
    return SlowQueue(
        servers=dev.servers,
        rho0=(dev.busy_s + dev.background_s) / (dev.span_s * dev.servers),
        fixed=dev.background_s / (dev.span_s * dev.servers),
        work_s=dev.busy_s / dev.reads,
        requests_per_read=n / dev.reads,
        service_s=mean,
        service_sq_s2=dev.service_sq_s2 or 2 * mean**2,
        read_service_s=dev.read_service_s,
        write_service_s=dev.write_service_s,
        writes_per_read=dev.writes / dev.reads,
        copy_s=p.unit / (dev.mb_s * 1e6) + copy_positioning(dev),
        copies_per_read=units / dev.reads if per_read else 0.0,
        copies_per_s=0.0 if per_read else units / dev.span_s,
        background_growth=dev.background_growth,
        copy_reads=dev.copy_reads,
    )


def background_scale(q: SlowQueue, writes_gain: float) -> float:
    """The background's disk time at `writes_gain` times the baseline's disk-bound
    writes over the baseline's (`background_growth` interpolated; past its last
    point its last; 1 without it)."""
    if not q.background_growth:
        return 1.0
    xs, ys = zip(*q.background_growth, strict=True)
    return float(np.interp(writes_gain, xs, ys))


def baseline_miss_s(q: SlowQueue) -> float:
    """A miss's latency in the model at the baseline's load: a read's service plus
    the wait W(rho0) of the baseline's mix."""
    return q.read_service_s + waiting(q.rho0, q.servers, q.service_sq_s2 / (2 * q.service_s))


def load(
    q: SlowQueue, rate: np.ndarray, reads: np.ndarray, r_hit: np.ndarray, w_hit: np.ndarray,
    copies: float,
) -> tuple[float, float]:  # fmt: skip
    """The slow device's utilization and its mix's E[S^2] / (2 E[S]) when the loops
    (baseline reads/s `rate`) do `reads` reads/s with read (write) hit ratios `r_hit`
    (`w_hit`) and the configuration copies `copies` units a second: the
    baseline's rho0 scaled by the work per second (every request per read but the
    hits'), the background (destages) grown with the writes that reach the disks
    (each loop's writes follow its reads; a tier's write hits destage to its SSDs),
    plus the copies. A copy enters the wait's mix as the disk requests it is made
    of: on the array a unit's chunks, each its own disk's request of a chunk's
    positioning and transfer (arraytier.c, `move_set_ops`), so a read queued behind
    a copy waits for one chunk, not the whole unit."""
    per_read = np.maximum(
        q.work_s - r_hit * q.read_service_s - w_hit * q.writes_per_read * q.write_service_s,
        0.0,
    )
    base_load = float(rate.sum()) * q.work_s
    scale = float((reads * per_read).sum()) / base_load if base_load > 0 else 1.0
    disk_writes = float((reads * (1 - w_hit)).sum()) / float(rate.sum()) if rate.sum() else 1.0
    fixed = q.fixed * background_scale(q, disk_writes)
    rho = (q.rho0 - q.fixed) * scale + fixed + copies * q.copy_s / q.servers
    asks = float((reads * np.maximum(q.requests_per_read - r_hit, 0.0)).sum())
    first = asks * q.service_s + copies * q.copy_s
    second = asks * q.service_sq_s2 + copies * q.copy_s**2 / max(q.copy_reads, 1)
    return rho, second / (2 * first) if first > 0 else 0.0


def miss_factor(q: SlowQueue, rho: float, residual: float) -> float:
    """How much longer a miss takes at utilization `rho` (and the mix's residual)
    than at the baseline's: (S_read + W(rho)) / (S_read + W(rho0))."""
    return (q.read_service_s + waiting(rho, q.servers, residual)) / baseline_miss_s(q)


def queued_gains(
    q: SlowQueue,
    rate: np.ndarray,
    r_base: np.ndarray,
    other: np.ndarray,
    hit_part: np.ndarray,
    miss_part: np.ndarray,
    r_hit: np.ndarray,
    w_hit: np.ndarray,
) -> tuple[np.ndarray, float, float]:
    """Each loop's gain when its misses wait in the slow device's queue at the
    configuration's load. A miss took the baseline's latency, modelled as a read's
    service plus the wait W(rho0) of the baseline's mix (`waiting`); with the
    configuration it takes f times that, f = (S_read + W(rho)) / (S_read +
    W(rho0)), where rho is the device's utilization at the loops' gains: the
    baseline's rho0 times the work per second against the baseline's (sum_k rate_k
    g_k x the work per read less the hits'), plus the copies' (a cache's fills per
    read at the loops' rate, a tier's per second) over the servers, and the wait's
    service mix adds the copies (long: a unit at the bandwidth) to the baseline's
    requests less the hits. `miss_part`: a loop's mean read latency's share from
    misses at the baseline's latency. Faster loops load the device and slow their
    misses: f is the fixed point (bisection; F(f) - f falls as f rises). Returns
    the gains, f and rho. `w_hit`: a tier's write hit ratios (zeros for a
    write-through cache). No copies and no hits leave f at 1: the old law."""

    def gains(f: float) -> np.ndarray:
        den = hit_part + miss_part * f + other
        return np.where(den > 0, (r_base + other) / np.where(den > 0, den, 1), 1.0)

    def state(f: float) -> tuple[float, float]:
        reads = rate * gains(f)
        copies = float(reads.sum()) * q.copies_per_read + q.copies_per_s
        return load(q, rate, reads, r_hit, w_hit, copies)

    def excess(f: float) -> float:  # F(f) - f, falling in f
        return miss_factor(q, *state(f)) - f

    lo, hi = 0.0, 1.0
    while excess(hi) > 0 and hi < 1e6:
        lo, hi = hi, hi * 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return gains(hi), hi, state(hi)[0]


def queue_report(q: SlowQueue, rho: Any, f: Any) -> dict[str, Any]:
    """What a prediction says of its slow device's queue: the model, the baseline's
    and the configuration's utilization, and how much slower a miss is."""
    return {
        "model": "M/G/c (Allen-Cunneen)",
        "servers": q.servers,
        "baseline_utilization": q.rho0,
        "utilization": rho,
        "miss_slowdown": f,
        "copy_ms": q.copy_s * 1e3,
        "copies_per_read": q.copies_per_read,
        "copies_per_s": q.copies_per_s,
        "background_growth": [list(x) for x in q.background_growth],
    }
