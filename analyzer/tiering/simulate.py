"""What an SSD tier or an SSD cache would have done with a run: the tiering simulator.

`simulate(events, params)` replays a run's reads and writes against a fast tier of
fixed-size units (extents) under one policy:

- `tiering`: array-style sub-LUN tiering. Heat per unit is counted each statistics
  interval (exponentially decayed with a half-life, or summed over a sliding
  history), and at each migration interval the hottest units are moved up and the
  coldest down, within a migration budget and a free headroom. Presets (`PRESETS`)
  set unit, intervals and heat model for four arrays, each naming its source.
- `lru`, `s3fifo`: an SSD read cache. Counted accesses (reads, or reads and writes)
  look the unit up and are admitted on a miss; the rest go to the slow tier.
- `oracle`: knows each migration window's accesses and holds that window's most
  accessed units: the best any placement fixed for a window can do, and so an upper
  bound for `tiering` at the same migration interval.
- `belady`: Belady's MIN (with bypass), the upper bound for a cache that admits only
  on a miss (`lru`, `s3fifo`).

A request that spans units makes one access per unit; it is a fast-tier hit by
count when all its units are in the fast tier, and its bytes are hits unit by unit.

The result has the hit ratios (by count and by bytes, read and write), a timeline
with promotions, demotions and migrated bytes as a share of host I/O, the skew curve,
a sweep of tier sizes and, given a fast and a slow run, projected latency.

The sweep is one pass for `lru` (Mattson's LRU stack distances: a cache of C units
hits exactly the accesses at distance < C), `oracle` (each window's ranking by count)
and `tiering` without a migration budget (each window's placement is the previous
window's top-k by heat, nested in k). Every access gets a "distance": the smallest
capacity in units that serves it; a request is served by a tier of C units when
all of its accesses' distances are < C. With one sort, every capacity is a lookup.
`s3fifo`, `belady` and budgeted `tiering` are not stack algorithms: their sweep
runs once per size, and says so (`one_pass: false`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from analyzer.store.interface import Store
from analyzer.store.queries import TIERING_COLUMNS as _COLUMNS
from analyzer.store.queries import TIERING_DEVICE_QUERY as DEVICE_QUERY
from analyzer.store.queries import TIERING_EVENTS_QUERY as EVENTS_QUERY
from analyzer.tiering import native
from iotape.errors import IotapeError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
POLICIES = ("tiering", "lru", "s3fifo", "oracle", "belady")
READ, WRITE = 0, 1
NEVER = native.NEVER


class TieringError(IotapeError):
    """Parameters that contradict each other or a run with nothing to simulate."""


# ------------------------------------------------------------------------ parameters


@dataclass(frozen=True)
class Params:
    """One simulation. Sizes in bytes, times in seconds."""

    policy: str = "tiering"
    unit: int = 4 * MiB
    capacity: int | None = None  # fast tier; None: 10 % of the run's footprint
    stats_interval_s: float = 5.0  # heat is counted per interval
    migrate_interval_s: float = 5.0  # placement changes at these boundaries
    half_life_s: float | None = 60.0  # heat decays by half over this; None: no decay
    history_s: float | None = None  # instead of decay: heat summed over this window
    budget_bytes: int | None = None  # most bytes moved per migration; None: no limit
    headroom: float = 0.0  # share of the fast tier kept free
    max_io_bytes: int | None = None  # larger I/Os are not counted (Easy Tier: 64 KiB)
    count_writes: bool = True  # writes count as heat / are admitted by a cache
    report_interval_s: float | None = None  # timeline step; None: about 100 points
    preset: str | None = None

    def units(self, capacity: int) -> int:
        """Fast-tier capacity in whole units, less the headroom."""
        return int(capacity * (1.0 - self.headroom)) // self.unit


@dataclass(frozen=True)
class Preset:
    unit: int
    stats_interval_s: float
    migrate_interval_s: float
    half_life_s: float | None
    history_s: float | None
    max_io_bytes: int | None
    source: str


PRESETS: dict[str, Preset] = {
    "msa": Preset(
        unit=4 * MiB,
        stats_interval_s=5.0,
        migrate_interval_s=5.0,
        half_life_s=60.0,
        history_s=None,
        max_io_bytes=None,
        source="HPE MSA 1050/2050/2040 best-practices guides: sub-LUN tiering moves 4 MB "
        "pages and re-evaluates placement every few seconds (5 s assumed here; the "
        "half-life is our choice); Demartek's MSA 2040 Jetstress evaluation (2016) "
        "saw the 4 MB page migrations (reference/jetstress_profiles.json)",
    ),
    "compellent": Preset(
        unit=2 * MiB,
        stats_interval_s=3600.0,
        migrate_interval_s=86400.0,
        half_life_s=86400.0,
        history_s=None,
        max_io_bytes=None,
        source="Dell Compellent (SC Series) Data Progression documentation: 2 MB default "
        "page size, pages moved once a day by the scheduled Data Progression run "
        "(heat statistics hourly and a one-day half-life are our assumptions)",
    ),
    "fastvp": Preset(
        unit=256 * MiB,
        stats_interval_s=3600.0,
        migrate_interval_s=86400.0,
        half_life_s=86400.0,
        history_s=None,
        max_io_bytes=None,
        source="EMC FAST VP white papers (VNX: 1 GB slices; VMAX: 768 KB x 360 = "
        "about 256 MB extent groups): statistics analysed hourly, relocation in a daily "
        "window, recent activity weighted more (a one-day half-life assumed); use "
        "--unit 1GiB for VNX",
    ),
    "easytier": Preset(
        unit=1 * GiB,
        stats_interval_s=300.0,
        migrate_interval_s=86400.0,
        half_life_s=None,
        history_s=86400.0,
        max_io_bytes=64 * KiB,
        source="IBM Easy Tier Redbooks (SVC/Storwize/DS8000): I/O statistics every 5 "
        "minutes, a migration plan from the last 24 hours, only small (<= 64 KB) I/Os "
        "counted as heat; extent = the pool's extent size (1 GiB assumed, --unit to change)",
    ),
}


def params_for(policy: str = "tiering", preset: str | None = None, **overrides: Any) -> Params:
    """Params for `policy`, from `preset` (msa when a tiering policy names none), with
    `overrides` (None values ignored) on top."""
    if policy not in POLICIES:
        raise TieringError(f"policy {policy!r}: not one of {', '.join(POLICIES)}")
    if preset is None and policy in ("tiering", "oracle"):
        preset = "msa"
    base: dict[str, Any] = {"policy": policy}
    if preset is not None:
        if preset not in PRESETS:
            raise TieringError(f"preset {preset!r}: not one of {', '.join(PRESETS)}")
        p = asdict(PRESETS[preset])
        p.pop("source")
        base.update(p, preset=preset)
    if policy in ("lru", "s3fifo", "belady") and overrides.get("count_writes") is None:
        base["count_writes"] = False  # an SSD *read* cache
    base.update({k: v for k, v in overrides.items() if v is not None})
    params = Params(**base)
    check(params)
    return params


def check(p: Params) -> None:
    if p.unit < 512 or p.unit & (p.unit - 1):
        raise TieringError(f"unit {p.unit}: must be a power of two of at least 512 bytes")
    if p.capacity is not None and p.capacity < 0:
        raise TieringError(f"capacity {p.capacity}: must not be negative")
    if not 0.0 <= p.headroom < 1.0:
        raise TieringError(f"headroom {p.headroom}: must be in [0, 1)")
    if p.stats_interval_s <= 0 or p.migrate_interval_s <= 0:
        raise TieringError("statistics and migration intervals must be positive")
    if p.migrate_interval_s < p.stats_interval_s:
        raise TieringError(
            f"migration interval {p.migrate_interval_s} s is shorter than the statistics "
            f"interval {p.stats_interval_s} s"
        )
    if p.half_life_s is not None and p.half_life_s <= 0:
        raise TieringError(f"half-life {p.half_life_s} s: must be positive")
    if p.budget_bytes is not None and p.budget_bytes < 0:
        raise TieringError(f"budget {p.budget_bytes}: must not be negative")


_SIZE_SUFFIX = {"": 1, "b": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'4M', '4MiB', '256MB', '1g', '65536' -> bytes (binary multiples, as arrays mean them)."""
    s = text.strip().lower().replace("ib", "").removesuffix("b") if text else ""
    num = s.rstrip("kmgt")
    suffix = s[len(num) :]
    try:
        value = float(num)
    except ValueError:
        raise TieringError(f"size {text!r}: not a number with an optional K/M/G/T suffix") from None
    if suffix not in _SIZE_SUFFIX or value < 0 or not math.isfinite(value):
        raise TieringError(f"size {text!r}: not a number with an optional K/M/G/T suffix")
    return int(value * _SIZE_SUFFIX[suffix])


# ------------------------------------------------------------------------ events


@dataclass
class Events:
    """A run's reads and writes in issue order, as numpy arrays (one row per request)."""

    t_ns: np.ndarray  # issue time (completion time where the issue time is unknown)
    dev: np.ndarray
    offset: np.ndarray
    nbytes: np.ndarray
    op: np.ndarray  # READ or WRITE
    lat_ns: np.ndarray  # device time; -1 where unknown

    def __len__(self) -> int:
        return len(self.t_ns)


def event_rows(op: np.ndarray, ts_issue_ns: np.ndarray, ts_complete_ns: np.ndarray) -> np.ndarray:
    """Which rows of a trace or store table become Events, in Events' order: the reads
    and writes, ordered by issue time (completion where the issue time is unknown)."""
    keep = np.flatnonzero(np.asarray(op) <= WRITE)
    issue = np.asarray(ts_issue_ns, dtype=np.int64)[keep]
    t = np.where(issue > 0, issue, np.asarray(ts_complete_ns, dtype=np.int64)[keep])
    return keep[np.argsort(t, kind="stable")]


def events_from_columns(
    ts_issue_ns: np.ndarray,
    ts_complete_ns: np.ndarray,
    dev: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    op: np.ndarray,
) -> Events:
    """Events from trace or store columns: reads and writes only, ordered by issue time."""
    rows = event_rows(op, ts_issue_ns, ts_complete_ns)
    issue = np.asarray(ts_issue_ns, dtype=np.int64)[rows]
    done = np.asarray(ts_complete_ns, dtype=np.int64)[rows]
    return Events(
        t_ns=np.where(issue > 0, issue, done),
        dev=np.asarray(dev, dtype=np.int64)[rows],
        offset=np.asarray(offset, dtype=np.int64)[rows],
        nbytes=np.asarray(nbytes, dtype=np.int64)[rows],
        op=np.asarray(op, dtype=np.int8)[rows],
        lat_ns=np.where((issue > 0) & (done >= issue), done - issue, -1),
    )


def load_events(store: Store, run_id: str) -> Events:
    """A run's reads and writes from the store (one Arrow query)."""
    t = store.arrow(EVENTS_QUERY.sql(store.dialect), {"run_id": run_id})
    cols = [t.column(c).to_numpy() for c in _COLUMNS]
    return events_from_columns(*cols)


def load_run(store: Store, ref: str) -> tuple[dict[str, Any], Events]:
    """(run, events) for `ref`: a run, or RUN@DEVICE for one device's events of a run
    (a profile replay recorded on a fast and a slow device at once)."""
    from analyzer.store import catalog

    try:
        return (run := catalog.resolve(store, ref)), load_events(store, run["id"])
    except IotapeError:
        name, sep, device = ref.rpartition("@")
        if not sep or not name or not device:
            raise
    run = catalog.resolve(store, name)
    t = store.arrow(DEVICE_QUERY.sql(store.dialect), {"run_id": run["id"], "name": device})
    devs = t.column("dev").to_numpy() if t.num_rows else []
    if not len(devs):
        raise TieringError(f"run {name!r} has no device named {device!r}")
    ev = load_events(store, run["id"])
    keep = np.isin(ev.dev, devs)
    return {**run, "device": device}, Events(*(getattr(ev, f.name)[keep] for f in fields(Events)))


def load_trace(path: str) -> Events:
    """A trace file's reads and writes, without a store (the benchmark, scripts)."""
    from recorder.tracefile import open_trace

    with open_trace(path) as tr:
        r = tr.read_all()
    return events_from_columns(*(r[c] for c in _COLUMNS))


# ------------------------------------------------------------------------ accesses


@dataclass
class Accesses:
    """One row per (request, unit) it touches, in request order."""

    req: np.ndarray  # the request of each access
    starts: np.ndarray  # first access of each request
    uid: np.ndarray  # dense unit id (int32)
    nbytes: np.ndarray  # bytes of the request inside this unit
    n_units: int
    identity: bool  # one access per request: req is 0..n-1


def accesses(ev: Events, unit: int) -> Accesses:
    shift = unit.bit_length() - 1
    n = len(ev)
    first = ev.offset >> shift
    last = (ev.offset + np.maximum(ev.nbytes, 1) - 1) >> shift
    if np.array_equal(first, last):  # the common case: no request crosses a unit boundary
        uid, n_units = _dense(ev.dev, first)
        idx = np.arange(n, dtype=np.int64)
        return Accesses(idx, idx, uid, ev.nbytes, n_units, identity=True)
    k = last - first + 1
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(k[:-1], out=starts[1:])
    total = int(k.sum())
    req = np.repeat(np.arange(n, dtype=np.int64), k)
    unit_idx = first[req] + (np.arange(total, dtype=np.int64) - starts[req])
    lo = np.maximum(ev.offset[req], unit_idx << shift)
    hi = np.minimum(ev.offset[req] + ev.nbytes[req], (unit_idx + 1) << shift)
    uid, n_units = _dense(ev.dev[req], unit_idx)
    return Accesses(req, starts, uid, np.maximum(hi - lo, 0), n_units, identity=False)


def _factorize(key: np.ndarray) -> tuple[np.ndarray, int]:
    """Integer keys to ids 0..n-1 in key order: a lookup table where the keys span a
    small range (large units, few devices), else a sort."""
    lo, hi = int(key.min()), int(key.max())
    if hi - lo <= max(4 * len(key), 1 << 24):
        present = np.zeros(hi - lo + 1, dtype=bool)
        rel = key - lo
        present[rel] = True
        ids = np.cumsum(present, dtype=np.int32)
        ids -= 1
        return ids[rel], int(ids[-1]) + 1
    keys, inv = np.unique(key, return_inverse=True)
    return inv.astype(np.int32), len(keys)


def _dense(dev: np.ndarray, unit_idx: np.ndarray) -> tuple[np.ndarray, int]:
    """(device, unit index) pairs to dense unit ids."""
    if len(dev) == 0:
        return np.zeros(0, dtype=np.int32), 0
    if dev[0] == dev[-1] and (dev == dev[0]).all():
        return _factorize(unit_idx)
    dev_i, n_dev = _factorize(dev)
    return _factorize(unit_idx * n_dev + dev_i)


def _counted(p: Params, ev: Events, acc: Accesses) -> np.ndarray:
    """Accesses that count as heat, or that a cache looks up and admits."""
    op = ev.op if acc.identity else ev.op[acc.req]
    ok = op == READ
    if p.count_writes:
        ok |= op == WRITE
    if p.max_io_bytes is not None:
        ok &= (ev.nbytes if acc.identity else ev.nbytes[acc.req]) <= p.max_io_bytes
    return ok


# ------------------------------------------------------------------------ policies


MAX_WINDOWS = 10_000_000


def _windows(t_acc: np.ndarray, t0: int, step_ns: int) -> np.ndarray:
    """Boundaries (access indices) of consecutive windows of step_ns from t0."""
    if len(t_acc) == 0:
        return np.zeros(1, dtype=np.int64)
    n = int((int(t_acc[-1]) - t0) // step_ns) + 1
    if n > MAX_WINDOWS:
        # One boundary per window: a nanosecond interval over a minute's trace would
        # ask for tens of GiB (the API's fuzz test found it), not a useful simulation.
        raise TieringError(
            f"an interval of {step_ns / 1e9:g} s cuts the run into {n:,} windows (at most "
            f"{MAX_WINDOWS:,}); give a longer stats or migrate interval"
        )
    edges = t0 + step_ns * np.arange(n + 1, dtype=np.int64)
    return np.searchsorted(t_acc, edges, side="left")


def _counts(ids: np.ndarray, n_units: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ids and their counts: a bincount when the window is dense, else a sort."""
    if 4 * len(ids) >= n_units:
        c = np.bincount(ids, minlength=n_units)
        u = np.flatnonzero(c)
        return u, c[u]
    return _sorted_unique(ids)


def _sorted_unique(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(ids, return_counts=True) by a plain sort: several times faster here."""
    if len(ids) == 0:
        return ids[:0], np.zeros(0, dtype=np.int64)
    s = np.sort(ids)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    return s[starts], np.diff(np.r_[starts, len(s)])


def _rank(score: np.ndarray, units: np.ndarray, k: int | None = None) -> np.ndarray:
    """`units` (ascending ids) ordered hottest first, ties to the lower id, so that every
    policy and the sweep agree; only the first k when k is given."""
    if k is not None and k <= 0:
        return units[:0]
    if k is not None and k < len(units):
        s = score[units]
        # Everything as hot as the k-th hottest, then a stable sort of just those.
        kth = np.partition(s, len(s) - k)[len(s) - k]
        units = units[s >= kth]
    order = units[np.argsort(-score[units], kind="stable")]
    return order if k is None else order[:k]


def _top(score: np.ndarray, units: np.ndarray, k: int) -> np.ndarray:
    """The set `_rank(score, units, k)` holds, unordered: without the sort, which is
    most of a migration's cost when no budget makes the order matter."""
    if k <= 0:
        return units[:0]
    if k >= len(units):
        return units
    s = score[units]
    kth = np.partition(s, len(s) - k)[len(s) - k]
    above = units[s > kth]
    return np.concatenate([above, units[s == kth][: k - len(above)]])


class _Heat:
    """Heat per unit: decayed counts (kept scaled up so that a step costs only the units
    touched) or a sliding sum over the last `history` windows."""

    def __init__(self, n_units: int, decay: float, history: int | None) -> None:
        self.h = np.zeros(n_units, dtype=np.float64)
        self.inv_decay = 1.0 / decay
        self.scale = 1.0
        self.history = history
        self.past: deque[tuple[np.ndarray, np.ndarray]] = deque()

    def add(self, units: np.ndarray, counts: np.ndarray) -> None:
        if self.history is not None:
            self.h[units] += counts
            self.past.append((units, counts))
            if len(self.past) > self.history:
                u, c = self.past.popleft()
                self.h[u] -= c
            return
        self.scale *= self.inv_decay
        if self.scale > 1e150:  # renormalise before the scaled counts overflow
            self.h /= self.scale
            self.scale = 1.0
        self.h[units] += counts * self.scale


def _tiering_heat(p: Params, n_units: int, stats_per_migration: int) -> _Heat:
    decay = 0.5 ** (p.stats_interval_s / p.half_life_s) if p.half_life_s else 1.0
    # A half-life far below the interval forgets everything each interval; the
    # floor keeps 1 / decay finite (0.5 ** big underflows to 0).
    decay = max(decay, 1e-100)
    history = None
    if p.history_s is not None:
        history = max(1, round(p.history_s / p.stats_interval_s))
    return _Heat(n_units, decay, history)


def _migration_steps(p: Params) -> tuple[int, int]:
    stats_ns = max(1, round(p.stats_interval_s * 1e9))
    return stats_ns, max(1, round(p.migrate_interval_s / p.stats_interval_s))


def tiering(
    p: Params, t_acc: np.ndarray, uid: np.ndarray, counted: np.ndarray, n_units: int, k: int,
    t0: int,
) -> tuple[np.ndarray, list[tuple[int, int, int]]]:  # fmt: skip
    """Array-style tiering of k units: hit per access and (t_ns, promoted, demoted) per
    migration. The tier starts empty; placements change only at migration boundaries."""
    stats_ns, per = _migration_steps(p)
    b = _windows(t_acc, t0, stats_ns)
    heat = _tiering_heat(p, n_units, per)
    fast = np.zeros(n_units, dtype=bool)
    hit = np.zeros(len(uid), dtype=bool)
    moves: list[tuple[int, int, int]] = []
    touched: list[np.ndarray] = []
    in_tier = np.zeros(0, dtype=np.int64)  # the units of `fast`, kept as a list too
    want = np.zeros(n_units, dtype=bool)  # scratch: the new target, cleared after use
    budget = None if p.budget_bytes is None else p.budget_bytes // p.unit
    for w in range(len(b) - 1):
        sl = slice(b[w], b[w + 1])
        hit[sl] = fast[uid[sl]]
        u, c = _counts(uid[sl][counted[sl]], n_units)
        heat.add(u, c)
        touched.append(u)
        if (w + 1) % per or k <= 0:
            continue
        if budget is None and p.history_s is None:
            # Decay scales every heat alike, so a unit neither in the tier nor touched
            # since the last migration still ranks below all k units in the tier: only
            # those two sets can make the new top k.
            hot, _ = _sorted_unique(np.concatenate([in_tier, *touched]))
            hot = hot[heat.h[hot] > 0]
        else:
            hot = np.flatnonzero(heat.h > 0)
        touched.clear()
        target = _top(heat.h, hot, k) if budget is None else _rank(heat.h, hot, k)
        want[target] = True
        promote = target[~fast[target]]  # hottest first
        out = in_tier[~want[in_tier]]
        if budget is None:
            demote = out
        else:
            # Each promotion into a full tier needs a demotion too: both move data.
            free = k - len(in_tier)
            # n moves cost n while there is room, 2n - free past it.
            fit = budget if budget <= free else max(free, (budget + free) // 2)
            n_p = min(len(promote), fit)
            promote = promote[:n_p]
            demote = _rank(-heat.h, np.sort(out), max(0, n_p - free))  # coldest first
        want[target] = False
        fast[demote] = False
        fast[promote] = True
        in_tier = target if budget is None else np.flatnonzero(fast)
        moves.append((t0 + (w + 1) * stats_ns, len(promote), len(demote)))
    return hit, moves


def _tiering_distance(
    p: Params, t_acc: np.ndarray, uid: np.ndarray, counted: np.ndarray, n_units: int, t0: int
) -> np.ndarray:
    """Per access, the smallest tier (units) that holds its unit under budget-free
    tiering: its unit's rank in the last placement's heat order (NEVER if unranked)."""
    stats_ns, per = _migration_steps(p)
    b = _windows(t_acc, t0, stats_ns)
    heat = _tiering_heat(p, n_units, per)
    rank = np.full(n_units, NEVER, dtype=np.int64)
    d = np.empty(len(uid), dtype=np.int64)
    for w in range(len(b) - 1):
        sl = slice(b[w], b[w + 1])
        d[sl] = rank[uid[sl]]
        u, c = _counts(uid[sl][counted[sl]], n_units)
        heat.add(u, c)
        if (w + 1) % per:
            continue
        order = _rank(heat.h, np.flatnonzero(heat.h > 0))
        rank.fill(NEVER)
        rank[order] = np.arange(len(order))
    return d


def _oracle_distance(
    p: Params, t_acc: np.ndarray, uid: np.ndarray, n_units: int, t0: int
) -> np.ndarray:
    """Per access, its unit's rank by access count within its own migration window."""
    stats_ns, per = _migration_steps(p)
    b = _windows(t_acc, t0, stats_ns * per)
    d = np.empty(len(uid), dtype=np.int64)
    rank = np.zeros(n_units, dtype=np.int64)
    count = np.zeros(n_units, dtype=np.float64)
    for w in range(len(b) - 1):
        sl = slice(b[w], b[w + 1])
        u, c = _counts(uid[sl], n_units)
        count[u] = c
        order = _rank(count, u)
        rank[order] = np.arange(len(order))
        d[sl] = rank[uid[sl]]
        count[u] = 0
    return d


def _lru_distance(acc: Accesses, counted: np.ndarray) -> np.ndarray:
    d = np.full(len(acc.uid), NEVER, dtype=np.int64)
    d[counted] = native.stack_distances(acc.uid[counted], acc.n_units)
    return d


def _cache_flags(policy: str, acc: Accesses, counted: np.ndarray, k: int) -> np.ndarray:
    sim = {"lru": native.lru, "s3fifo": native.s3fifo, "belady": native.belady}[policy]
    flags = np.zeros(len(acc.uid), dtype=np.uint8)
    flags[counted] = sim(acc.uid[counted], acc.n_units, k)
    return flags


# ------------------------------------------------------------------------ the result


@dataclass
class Run:
    """What a simulation needs, prepared once and shared by single runs and sweeps."""

    p: Params
    ev: Events
    acc: Accesses
    counted: np.ndarray
    t_acc: np.ndarray
    t0: int
    _distance: np.ndarray | None = field(default=None, repr=False)

    def one_pass(self) -> bool:
        return self.p.policy in ("lru", "oracle") or (
            self.p.policy == "tiering" and self.p.budget_bytes is None
        )

    def distance(self) -> np.ndarray:
        if self._distance is None:
            p, a = self.p, self.acc
            if p.policy == "lru":
                self._distance = _lru_distance(a, self.counted)
            elif p.policy == "oracle":
                self._distance = _oracle_distance(p, self.t_acc, a.uid, a.n_units, self.t0)
            else:
                self._distance = _tiering_distance(
                    p, self.t_acc, a.uid, self.counted, a.n_units, self.t0
                )
        return self._distance

    def hits(self, k: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
        """(hit per access, flags per access, tiering moves) for a tier of k units."""
        p, a = self.p, self.acc
        if p.policy in ("lru", "s3fifo", "belady"):
            flags = _cache_flags(p.policy, a, self.counted, k)
            return (flags & native.HIT) > 0, flags, []
        if p.policy == "oracle":
            hit = self.distance() < k
            return hit, np.zeros(len(hit), dtype=np.uint8), []
        hit, moves = tiering(p, self.t_acc, a.uid, self.counted, a.n_units, k, self.t0)
        return hit, np.zeros(len(hit), dtype=np.uint8), moves


def prepare(ev: Events, p: Params) -> Run:
    if len(ev) == 0:
        raise TieringError("the run has no reads or writes to simulate")
    check(p)
    acc = accesses(ev, p.unit)
    t_acc = ev.t_ns if acc.identity else ev.t_ns[acc.req]
    return Run(p, ev, acc, _counted(p, ev, acc), t_acc, int(ev.t_ns[0]))


def request_hits(acc: Accesses, hit: np.ndarray) -> np.ndarray:
    """A request is a hit when every unit it touches is in the fast tier."""
    if acc.identity or not len(hit):
        return hit
    return np.logical_and.reduceat(hit, acc.starts)


def _report(
    r: Run, hit: np.ndarray, flags: np.ndarray, moves: list[tuple[int, int, int]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(overall hit ratios, timeline), from one counting pass over (interval, op, hit,
    inserted/evicted) keys, so that reporting costs no more than the simulation."""
    ev, acc, p = r.ev, r.acc, r.p
    span = int(ev.t_ns[-1]) - r.t0
    step = p.report_interval_s or max(1e-3, span / 1e9 / 100)  # about 100 points
    step_ns = max(1, round(step * 1e9))
    n = span // step_ns + 1
    rh = request_hits(acc, hit)
    # One key per access: (interval, op, hit, inserted, evicted). Its counts and its
    # byte sums give every split; with one access per request (the common case) the
    # request counts come from the same tally.
    t_a = ev.t_ns if acc.identity else ev.t_ns[acc.req]
    op_a = ev.op if acc.identity else ev.op[acc.req]
    per, byt4 = native.tally(t_a, r.t0, step_ns, op_a, hit, flags, acc.nbytes, n)
    byt = byt4.sum(axis=3)
    if acc.identity:
        req = per.sum(axis=3)
    else:
        ri = (ev.t_ns - r.t0) // step_ns
        req = np.bincount(ri * 4 + ev.op * 2 + rh, minlength=4 * n).reshape(n, 2, 2)
    fl = per.sum(axis=(1, 2))  # (interval, inserted | evicted << 1)
    promoted = (fl[:, 1] + fl[:, 3]).astype(np.int64)
    demoted = (fl[:, 2] + fl[:, 3]).astype(np.int64)
    for t, pr, de in moves:
        i = min(n - 1, (t - r.t0) // step_ns)
        promoted[i] += pr
        demoted[i] += de
    # A read cache writes only what it fills (evicted clean data is dropped); a tier
    # copies both ways.
    moved = promoted if p.policy in ("lru", "s3fifo", "belady") else promoted + demoted
    migrated = moved * p.unit
    host_bytes = byt.sum(axis=(1, 2))

    def ratio(num: np.ndarray, den: np.ndarray) -> Any:
        if num.ndim == 0:
            return float(num / den) if den else None
        return [float(a / b) if b else None for a, b in zip(num, den, strict=True)]

    total: dict[str, Any] = {"count": {}, "bytes": {}}
    timeline: dict[str, Any] = {
        "interval_s": step_ns / 1e9,
        "t_s": (np.arange(n) * step_ns / 1e9).tolist(),
        "requests": req.sum(axis=(1, 2)).tolist(),
    }
    for name, ops in (("all", slice(None)), ("read", READ), ("write", WRITE)):
        for kind, arr in (("count", req), ("bytes", byt)):
            part = arr[:, ops, :]
            hits, all_ = (part[..., 1], part.sum(axis=-1))
            if name == "all":
                hits, all_ = hits.sum(axis=1), all_.sum(axis=1)
            suffix = "" if name == "all" else "_" + name
            timeline[f"hit_ratio_{kind}{suffix}"] = ratio(hits, all_)
            total[kind][name] = ratio(hits.sum(), all_.sum())
    timeline["host_bytes"] = host_bytes.astype(np.int64).tolist()
    timeline["promotions"] = promoted.tolist()
    timeline["demotions"] = demoted.tolist()
    timeline["migrated_bytes"] = migrated.tolist()
    timeline["migrated_share"] = ratio(migrated, host_bytes)
    total["requests"] = len(rh)
    total["hit_requests"] = int(req[..., 1].sum())
    total["bytes_total"] = int(byt.sum())
    total["bytes_hit"] = int(byt[..., 1].sum())
    total["migrated_bytes"] = int(migrated.sum())
    total["migrated_share"] = ratio(migrated.sum(), host_bytes.sum())
    return total, timeline


def skew(acc: Accesses, unit: int, points: int = 101) -> dict[str, Any]:
    """Share of I/O (accesses and bytes) against share of the touched capacity, units
    hottest first; and the capacity that serves 80 % and 100 % of the I/O."""
    counts, byts = native.unit_tally(acc.uid, acc.nbytes, acc.n_units)
    per_unit = counts.astype(np.float64)
    per_unit_bytes = byts.astype(np.float64)
    cum = np.cumsum(np.sort(per_unit)[::-1]) / per_unit.sum()
    cum_b = np.cumsum(np.sort(per_unit_bytes)[::-1]) / max(per_unit_bytes.sum(), 1)
    n = acc.n_units
    idx = np.unique(np.linspace(0, n, points).round().astype(np.int64))
    idx = idx[idx > 0]

    def units_for(share: float, c: np.ndarray) -> int:
        return int(np.searchsorted(c, share - 1e-12) + 1)

    return {
        "footprint_bytes": n * unit,
        "units": n,
        "curve": [
            {
                "capacity_share": float(i / n),
                "io_share": float(cum[i - 1]),
                "bytes_share": float(cum_b[i - 1]),
            }
            for i in idx
        ],
        "capacity_for_80pct_io": units_for(0.8, cum) * unit,
        "capacity_for_100pct_io": units_for(1.0, cum) * unit,
        "capacity_for_80pct_bytes": units_for(0.8, cum_b) * unit,
        "capacity_for_100pct_bytes": units_for(1.0, cum_b) * unit,
    }


def sweep_capacities(footprint_units: int, unit: int, extra: int | None = None) -> list[int]:
    """Tier sizes for a sweep: powers of two of units up to the footprint, and `extra`."""
    ks = {1 << i for i in range(max(1, footprint_units).bit_length() + 1)}
    ks.add(max(1, footprint_units))
    caps = {k * unit for k in ks}
    if extra is not None:
        caps.add(extra)
    return sorted(caps)


def sweep(r: Run, capacities: list[int]) -> dict[str, Any]:
    """Hit ratios (by count and bytes) for every capacity: one pass where the policy
    allows, else one run per size."""
    p, acc = r.p, r.acc
    rows = []
    if r.one_pass():
        d = r.distance()
        req_d = np.maximum.reduceat(d, acc.starts)
        req_sorted = np.sort(req_d)
        order = np.argsort(d, kind="stable")
        d_sorted = d[order]
        bytes_cum = np.concatenate(([0], np.cumsum(acc.nbytes[order])))
        total_b = int(bytes_cum[-1])
        for cap in capacities:
            k = p.units(cap)
            n_hit = int(np.searchsorted(req_sorted, k, side="left"))
            b_hit = int(bytes_cum[np.searchsorted(d_sorted, k, side="left")])
            rows.append(_row(cap, k, n_hit, len(req_d), b_hit, total_b))
    else:
        for cap in capacities:
            k = p.units(cap)
            hit, _, _ = r.hits(k)
            rh = request_hits(acc, hit)
            b_hit = int(acc.nbytes[hit].sum())
            rows.append(_row(cap, k, int(rh.sum()), len(rh), b_hit, int(acc.nbytes.sum())))
    return {"one_pass": r.one_pass(), "points": rows}


def _row(cap: int, k: int, n_hit: int, n: int, b_hit: int, b: int) -> dict[str, Any]:
    return {
        "capacity_bytes": cap,
        "units": k,
        "hit_ratio_count": n_hit / n if n else None,
        "hit_ratio_bytes": b_hit / b if b else None,
    }


# ------------------------------------------------------------------ projected latency

SIZE_CLASSES = tuple(range(12, 21))  # log2 of the request size: 4 KiB .. 1 MiB and up


def size_class(nbytes: np.ndarray) -> np.ndarray:
    lg = np.ceil(np.log2(np.maximum(nbytes, 1))).astype(np.int64)
    return np.clip(lg, SIZE_CLASSES[0], SIZE_CLASSES[-1])


def profile(ev: Events) -> dict[tuple[int, int], np.ndarray]:
    """A device's measured latency per (op, size class): sorted samples (ns)."""
    ok = ev.lat_ns >= 0
    op, cls, lat = ev.op[ok], size_class(ev.nbytes[ok]), ev.lat_ns[ok]
    out: dict[tuple[int, int], np.ndarray] = {}
    key = op.astype(np.int64) * 64 + cls
    order = np.lexsort((lat, key))
    key, lat = key[order], lat[order]
    bounds = np.flatnonzero(np.diff(key)) + 1
    for s, e in zip(np.r_[0, bounds], np.r_[bounds, len(key)], strict=True):
        if e > s:
            out[(int(key[s] // 64), int(key[s] % 64))] = lat[s:e]
    if not out:
        raise TieringError("the device run has no requests with a known device time")
    return out


def _samples(prof: dict[tuple[int, int], np.ndarray], op: int, cls: int) -> np.ndarray:
    """The samples of (op, class), else the nearest class of the op, else any op's."""
    if (op, cls) in prof:
        return prof[(op, cls)]
    same = [c for o, c in prof if o == op] or [c for _, c in prof]
    best = min(same, key=lambda c: (abs(c - cls), c))
    ops = [o for o, c in prof if c == best]
    return prof[(op if op in ops else ops[0], best)]


def mixture(groups: list[tuple[float, np.ndarray]]) -> dict[str, float | None]:
    """p50, p99 and mean of a weighted mixture of sample sets (weights: request counts).
    Percentiles are order statistics of the mixture CDF, as PERCENTILE_DISC."""
    groups = [(w, s) for w, s in groups if w > 0]
    if not groups:
        return {"p50_ns": None, "p99_ns": None, "mean_ns": None, "requests": 0}
    vals = np.concatenate([s for _, s in groups])
    wts = np.concatenate([np.full(len(s), w / len(s)) for w, s in groups])
    order = np.argsort(vals, kind="stable")
    vals, cum = vals[order], np.cumsum(wts[order])
    total = sum(w for w, _ in groups)

    def q(level: float) -> float:
        i = int(np.searchsorted(cum, level * total * (1 - 1e-12), side="left"))
        return float(vals[min(i, len(vals) - 1)])

    mean = sum(w * float(s.mean()) for w, s in groups) / total
    return {"p50_ns": q(0.5), "p99_ns": q(0.99), "mean_ns": mean, "requests": int(total)}


def project(
    ev: Events, req_hit: np.ndarray, fast: dict, slow: dict
) -> dict[str, dict[str, float | None]]:
    """Per request, the fast device's latency distribution for its op and size class if
    the simulation put it in the fast tier, else the slow device's: the mixture's
    p50/p99/mean, next to the all-slow and all-fast devices on the same requests."""
    key = ev.op.astype(np.int64) * 64 + size_class(ev.nbytes)
    out = {}
    for name, tier_of in (
        ("projected", req_hit),
        ("slow_only", np.zeros(len(ev), dtype=bool)),
        ("fast_only", np.ones(len(ev), dtype=bool)),
    ):
        groups = []
        for is_fast, prof in ((True, fast), (False, slow)):
            k, n = np.unique(key[tier_of == is_fast], return_counts=True)
            groups += [
                (float(c), _samples(prof, int(g // 64), int(g % 64)))
                for g, c in zip(k, n, strict=True)
            ]
        out[name] = mixture(groups)
    return out  # fmt: skip


def measured_latency(ev: Events) -> dict[str, float | None]:
    """A run's own device latency (reads and writes), defined as the projection's."""
    lat = ev.lat_ns[ev.lat_ns >= 0]
    if not len(lat):
        raise TieringError("the measured run has no requests with a known device time")
    return mixture([(float(len(lat)), np.sort(lat))])


def projection_error(
    projected: dict[str, float | None], measured: dict[str, float | None]
) -> dict[str, float | None]:
    """projected / measured - 1 for p50, p99 and mean (0.1: projection 10 % high)."""
    out: dict[str, float | None] = {}
    for k in ("p50_ns", "p99_ns", "mean_ns"):
        p, m = projected.get(k), measured.get(k)
        out[k.removesuffix("_ns")] = None if not p or not m else p / m - 1.0
    return out


# ------------------------------------------------------------------------ entry point


def default_capacity(footprint: int, unit: int) -> int:
    """The fast tier when none is given: 10 % of the footprint, at least one unit."""
    return max(unit, footprint // 10 // unit * unit)


def placement(ev: Events, p: Params) -> tuple[np.ndarray, Params]:
    """Per request, whether the simulation served it from the fast tier (every unit it
    touches there), and the parameters with the capacity filled in."""
    r = prepare(ev, p)
    capacity = (
        p.capacity if p.capacity is not None else default_capacity(r.acc.n_units * p.unit, p.unit)
    )
    hit, _, _ = r.hits(p.units(capacity))
    return request_hits(r.acc, hit), replace(p, capacity=capacity)


def simulate(
    ev: Events,
    p: Params,
    sweep_sizes: list[int] | bool = False,
    fast: Events | None = None,
    slow: Events | None = None,
    measured: Events | None = None,
) -> dict[str, Any]:
    """Everything `iotape analyze tiering` reports, as a JSON-ready dict. `measured`
    (a replay split by this placement, `iotape replay split`) is set beside the
    projection with the projection's error."""
    r = prepare(ev, p)
    footprint = r.acc.n_units * p.unit
    capacity = p.capacity if p.capacity is not None else default_capacity(footprint, p.unit)
    k = p.units(capacity)
    hit, flags, moves = r.hits(k)
    ratios, timeline = _report(r, hit, flags, moves)
    out: dict[str, Any] = {
        "params": {**asdict(replace(p, capacity=capacity))},
        "source": PRESETS[p.preset].source if p.preset else None,
        "simulator": "C" if native.native() else "Python reference",
        "capacity_units": k,
        "hit_ratio": ratios,
        "timeline": timeline,
        "skew": skew(r.acc, p.unit),
    }
    if sweep_sizes is not False:
        caps = (
            sweep_sizes
            if isinstance(sweep_sizes, list)
            else sweep_capacities(r.acc.n_units, p.unit, capacity)
        )
        out["sweep"] = sweep(r, caps)
    if (fast is None) != (slow is None):
        raise TieringError("projected latency needs both a fast run and a slow run")
    if fast is not None and slow is not None:
        out["latency"] = project(ev, request_hits(r.acc, hit), profile(fast), profile(slow))
        if measured is not None:
            m = measured_latency(measured)
            out["latency"]["measured"] = m
            out["latency"]["error"] = projection_error(out["latency"]["projected"], m)
    elif measured is not None:
        raise TieringError(
            "a measured run is compared with a projection: name a fast and a slow run"
        )
    return out  # fmt: skip


def analyze_run(
    store: Store,
    ref: str,
    p: Params,
    sweep_sizes: list[int] | bool = False,
    fast_ref: str | None = None,
    slow_ref: str | None = None,
    measured_ref: str | None = None,
) -> dict[str, Any]:
    """`simulate` over a stored run (id, id prefix or name), with device profiles from
    a fast and a slow run when both are named (each may be RUN@DEVICE), and a measured
    tiered run set beside the projection."""
    if (fast_ref is None) != (slow_ref is None):
        raise TieringError("projected latency needs both --fast-run and --slow-run")
    run, ev = load_run(store, ref)
    named: dict[str, Any] = {"run": {"id": run["id"], "name": run["name"]}}
    loaded: dict[str, Events | None] = {}
    for key, r in (("fast_run", fast_ref), ("slow_run", slow_ref), ("measured_run", measured_ref)):
        loaded[key] = None
        if r is not None:
            other, loaded[key] = load_run(store, r)
            named[key] = {"id": other["id"], "name": other["name"], "device": other.get("device")}
    fast, slow, measured = loaded["fast_run"], loaded["slow_run"], loaded["measured_run"]
    return {**named, **simulate(ev, p, sweep_sizes, fast, slow, measured)}
