"""Synthetic mode's locality: which of fio's offset distributions reproduces a
stream's LRU hit-ratio curve, fitted and judged before any fio job runs.

Two candidates, both stock fio (3.33):
- `zipf:THETA:0` over the whole target span. fio draws a rank from its zipf
  generator (Gray's approximation) and hashes it to a block (rank x a golden
  ratio constant, modulo the blocks), so the hot blocks lie scattered, as in a
  trace that fio's own zipf made, or a database whose hot pages are everywhere.
  The explicit centre 0 gives every window's job the same rank -> block map:
  without it fio draws a random offset per job and each window would have a hot
  set of its own, destroying the reuse between windows.
- `zoned_abs` per window, the zones cut where the window's accesses fall: up to
  100 zones of about 1 % of the accesses each (fio picks a zone by an integer
  percentage, 1..100, so 1 % is its finest step), plus empty (0 %) zones over the
  largest untouched stretches so the footprint stays the trace's. It keeps
  positions and follows a hot region that moves, but picks uniformly inside a
  zone: hot blocks scattered finer than 1 % of the accesses blur.
Which is better depends on the trace, so both are simulated here on the
stream's own times, windows, directions and sequential share (fio's algorithm,
with numpy's random numbers) and the one whose LRU curve is closer to the
original's wins (locality.py measures both the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replayer.plan import locality

GOLDEN_RATIO_64 = np.uint64(0x61C8864680B583EB)  # fio's __hash_u64
ZONES_ACCESS = 100  # fio's zoned pick: an integer percentage
ZONES_MAX = 256  # fio 3.33's ZONESPLIT_MAX
GAPS_MAX = 60  # each splits a zone in three: 100 + 2 x 60 < 256, and the option stays short
GAP_NEIGHBOURS = 8
GAP_RATIO = 12  # x the local median gap: uniform picks leave such a gap 1 time in 4,000
FIT_MAX = 400_000  # requests a fit simulates (a prefix of the stream)
THETAS = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 1.05, 1.1, 1.2, 1.3, 1.5, 1.8)
SEQ_RANDOM_BELOW = 0.95
KINDS = ("auto", "zipf", "zoned")  # above this sequential share a window is a sequential job


@dataclass
class Model:
    kind: str  # "zipf" or "zoned"
    theta: float  # zipf's best fit (used when kind is zipf)
    gran: int  # fio's block for offsets: the smallest request size
    gap_pp: dict[str, float]  # simulated largest LRU gap of each candidate


def zipf_blocks(rng: np.random.Generator, n: int, theta: float, nranges: int) -> np.ndarray:
    """Blocks as fio 3.33's zipf_next draws them, centre 0 (lib/zipf.c)."""
    m = min(nranges, 10_000_000)  # fio caps its zeta sum there
    zetan = float(np.sum(np.arange(1, m + 1, dtype=np.float64) ** -theta))
    zeta2 = 1.0 + 0.5**theta
    alpha = 1.0 / (1.0 - theta)
    eta = (1.0 - (2.0 / nranges) ** (1.0 - theta)) / (1.0 - zeta2 / zetan)
    u = rng.random(n)
    z = u * zetan
    # np.where computes every branch: the ranks 1 and 2 rows may overflow here.
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        rest = 1 + np.floor(nranges * np.maximum(eta * u - eta + 1.0, 0) ** alpha)
    rest = np.nan_to_num(np.minimum(rest, nranges), nan=nranges)
    val = np.where(z < 1.0, 1, np.where(z < 1.0 + 0.5**theta, 2, rest)).astype(np.uint64) - 1
    with np.errstate(over="ignore"):
        return ((val * GOLDEN_RATIO_64) % np.uint64(nranges)).astype(np.int64)


def zones(off: np.ndarray, b: np.ndarray, gran: int, size: int) -> list[tuple[int, int]]:
    """(access %, bytes) per zone from byte 0: equal-access zones, empty gaps apart."""
    if not len(off):
        return [(100, size // gran * gran)]
    s = np.sort(off // gran * gran)
    q = s[np.linspace(0, len(s), ZONES_ACCESS, endpoint=False).astype(np.int64)]
    end = min(size // gran * gran, -(-int((off + b).max()) // gran) * gran)
    gaps = np.diff(s) - gran
    big = np.flatnonzero(_untouched(gaps))
    big = big[np.argsort(-gaps[big], kind="stable")[:GAPS_MAX]]
    edges = np.unique(np.r_[0, q, s[big] + gran, s[big + 1], end])
    edges = edges[edges <= end]
    counts = np.histogram(s, bins=edges)[0]
    if counts.sum() == 0:
        return [(100, end)]
    pct = percentages(counts)
    return [
        (int(p), int(hi - lo))
        for p, lo, hi in zip(pct.tolist(), edges[:-1].tolist(), edges[1:].tolist(), strict=True)
    ]


def _untouched(gaps: np.ndarray) -> np.ndarray:
    """Gaps that are stretches the stream leaves alone, not chance: at least a cache
    unit and GAP_RATIO times the median of the GAP_NEIGHBOURS gaps either side.
    Cutting every large gap of a sparse window shrank a uniform region's footprint
    by 11 % (each window then drew from half of it)."""
    if len(gaps) < 2:
        return gaps >= locality.UNIT
    k = min(GAP_NEIGHBOURS, len(gaps) - 1)
    padded = np.pad(gaps.astype(np.float64), k, mode="reflect")
    near = np.lib.stride_tricks.sliding_window_view(padded, 2 * k + 1)
    local = np.median(np.delete(near, k, axis=1), axis=1)
    return (gaps >= locality.UNIT) & (gaps >= GAP_RATIO * np.maximum(local, 1))


def percentages(counts: np.ndarray) -> np.ndarray:
    """Integer percentages summing to 100 (largest remainder)."""
    counts = np.asarray(counts, dtype=np.float64)
    share = counts / counts.sum() * 100
    out = np.floor(share).astype(np.int64)
    rest = 100 - int(out.sum())
    if rest:
        out[np.argsort(-(share - out), kind="stable")[:rest]] += 1
    return out


def zoned_blocks(rng: np.random.Generator, zs: list[tuple[int, int]], gran: int, n: int):
    """Byte offsets as fio's zoned_abs picks them: a zone by percentage, a block in it."""
    pct = np.array([p for p, _ in zs], np.float64)
    sizes = np.array([z for _, z in zs], np.int64)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    k = rng.choice(len(zs), size=n, p=pct / pct.sum())
    return starts[k] + rng.integers(0, np.maximum(sizes[k] // gran, 1)) * gran


def with_runs(rng: np.random.Generator, off: np.ndarray, b: np.ndarray, seq: np.ndarray):
    """fio's percentage_random: with probability `seq` a request continues where the
    previous one ended instead of taking its own random offset."""
    cont = rng.random(len(off)) < seq
    cont[:1] = False
    last = np.maximum.accumulate(np.where(~cont, np.arange(len(off)), 0))
    cb = np.r_[0, np.cumsum(b)]
    return off[last] + (cb[np.arange(len(off))] - cb[last])


def seq_share(off: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(off[1:] == off[:-1] + b[:-1])) if len(off) > 1 else 0.0


def _gap(curve: np.ndarray, want: np.ndarray) -> float:
    goal = np.array(locality.FRACTIONS) >= locality.GOAL_FROM
    return float(np.abs(curve - want)[goal].max()) * 100


def choose(
    is_write: np.ndarray,
    win: np.ndarray,
    off: np.ndarray,
    b: np.ndarray,
    size: int,
    seed: int,
    want_kind: str = "auto",
) -> Model:
    """The candidate whose simulated LRU curve is closest to the stream's own
    (`want_kind` zipf or zoned forces one: to compare them on a real replay)."""
    n = min(len(off), FIT_MAX)
    is_write, win, off, b = is_write[:n], win[:n], off[:n], b[:n]
    gran = int(b[b > 0].min()) if (b > 0).any() else 4096
    caps = locality.caps_for(len(np.unique(off // locality.UNIT)))
    want, _ = locality.hit_curve(off, b, caps)
    rng = np.random.default_rng(seed)
    seq = np.zeros(n)
    zoned = np.zeros(n, np.int64)
    for cell in _cells(is_write, win):
        s = seq_share(off[cell], b[cell])
        seq[cell] = s if s < SEQ_RANDOM_BELOW else 1.0
        zoned[cell] = zoned_blocks(rng, zones(off[cell], b[cell], gran, size), gran, len(cell))

    def gap(draw: np.ndarray) -> float:
        return _gap(locality.hit_curve(with_runs(rng, draw, b, seq), b, caps)[0], want)

    gaps = {"zoned": gap(zoned)}
    nranges = max(1, size // gran)
    tried = {t: gap(zipf_blocks(rng, n, t, nranges) * gran) for t in THETAS}
    best = min(tried, key=tried.__getitem__)
    for t in (best - 0.04, best - 0.02, best + 0.02, best + 0.04):
        if t > 0 and abs(t - 1.0) > 0.005:
            tried[round(t, 3)] = gap(zipf_blocks(rng, n, t, nranges) * gran)
    theta = min(tried, key=tried.__getitem__)
    gaps["zipf"] = tried[theta]
    kind = want_kind if want_kind != "auto" else min(gaps, key=gaps.__getitem__)
    return Model(kind, theta, gran, gaps)


def _cells(is_write: np.ndarray, win: np.ndarray) -> list[np.ndarray]:
    """Row indices per (window, direction): what one synthetic job stands for."""
    key = win * 2 + is_write
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    return np.split(order, cuts)
