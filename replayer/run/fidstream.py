"""`replay fidelity` in memory that does not grow with the trace.

fidelity.compare_in_memory holds both traces whole (1.8 GiB of peak memory for
10 minutes at 8k IOPS, bench/replay_memory.py). Here both stream past in time order (ordered.py), a
batch at a time, and are paired as they come (pairing.py); each figure is kept
as what it needs, never as a column per request: per-second counts, size
counts, the drift's sums, the current window's errors, and the issue-time and
inter-arrival errors on disk for exact percentiles (quantiles.py).

The replay's clock offset (the median gap over all pairs) is known only once
every pair is, and the replay's per-second counts, the drift and the windows
depend on it. The traces are read once (with both traces' locality,
localitystream.py): what needs the offset is kept in order (in memory, then on disk), and summed
once it is known (Figures, later.py); reading and pairing both traces a first
time for the offset alone took a quarter of `replay fidelity`. Pairs that wait
for their turn in the original's order (behind an original the replay lost, a
whole horizon) wait narrowed, the earliest on disk (waiting.py).
The answers are fidelity.compare_in_memory's (the tests compare them) wherever
its pairs lie within the horizon (pairing.py); a request whose only partner is
further away is unpaired here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from replayer.run import localitystream, ordered
from replayer.run.ahead import Behind
from replayer.run.fidsums import Drift, Side
from replayer.run.later import LOST_ROWS, PAIR, PAIRED, REP, Later
from replayer.run.pairing import HORIZON_NS, Keys, Pairer
from replayer.run.quantiles import Spill
from replayer.run.timewindows import Windows
from replayer.run.waiting import Waiting

QS = (50, 90, 99)


@dataclass
class Group:
    """A stream's (or all streams') figures as they accumulate."""

    o: Side
    r: Side
    pairs: int = 0
    issue: Spill = field(default_factory=Spill)
    inter: Spill = field(default_factory=Spill)
    last_gap: int | None = None
    drift: Drift = field(default_factory=Drift)

    def paired(self, gaps: np.ndarray) -> None:
        """The pairs' figures that do not depend on the replay's clock offset."""
        self.pairs += len(gaps)
        self.issue.add(gaps)
        # |diff(tr) - diff(to)| of consecutive pairs is |diff(gap)|: no offset in it.
        prev = gaps if self.last_gap is None else np.r_[self.last_gap, gaps]
        self.inter.add(np.abs(np.diff(prev)))
        self.last_gap = int(gaps[-1])

    def mirrored(self, of: Group) -> None:
        """The pairs `of` (all streams) just took, where this stream took them all:
        counted, their gaps kept once, in `of`'s spills (Figures.paired)."""
        self.pairs = of.pairs

    def unmirror(self, of: Group) -> None:
        """Take the gaps kept in `of`'s spills as this stream's own, from here on."""
        for mine, theirs in ((self.issue, of.issue), (self.inter, of.inter)):
            for c in theirs.chunks():
                mine.add(c.copy())  # (a chunk may be a buffer read into again)
        self.last_gap = of.last_gap

    def close(self) -> None:
        self.issue.close()
        self.inter.close()


def _mape(o: np.ndarray, r: np.ndarray) -> float | None:
    ok = o > 0
    return round(float(np.mean(np.abs(r[ok] - o[ok]) / o[ok]) * 100), 3) if ok.any() else None


def _tv(a: dict[int, int], na: int, b: dict[int, int], nb: int) -> float | None:
    if not na or not nb:
        return None
    sizes = sorted(set(a) | set(b))
    pa = np.array([a.get(s, 0) for s in sizes]) / na
    pb = np.array([b.get(s, 0) for s in sizes]) / nb
    return round(float(0.5 * np.abs(pa - pb).sum()), 4)


def _pct(s: Spill, f, key: tuple) -> dict:
    """The percentiles of spill `s` transformed by `f`, which `key` names (a
    stream's spill that is all streams' is asked the same twice)."""
    if not s.count:
        return {}
    if key not in s.answers:
        s.answers[key] = s.percentiles(QS, f)
    vals, top = s.answers[key]
    out = {f"p{q}_ms": round(v / 1e6, 4) for q, v in zip(QS, vals, strict=True)}
    out["max_ms"] = round(top / 1e6, 4)
    return out


class _Off:
    """|x - shift| of a spill's read, into one buffer kept for the next: each read
    (a whole spill of millions of gaps) took two fresh arrays, their pages faulted
    in each time. Its answer is used before the next read (quantiles.Spill)."""

    def __init__(self, shift: int) -> None:
        self.shift = shift
        self._buf = np.empty(0, np.int64)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if len(self._buf) < len(x):
            self._buf = np.empty(len(x), np.int64)
        out = self._buf[: len(x)]
        np.subtract(x, self.shift, out=out)
        return np.abs(out, out=out)


def figures(g: Group, shift: int, timed: bool) -> dict:
    """fidelity._figures of the accumulated group."""
    f = {
        "requests": [g.o.n, g.r.n],
        "iops_mean": [round(float(g.o.iops.mean()), 1), round(float(g.r.iops.mean()), 1)],
        "iops_mape_pct": _mape(g.o.iops, g.r.iops),
        "mbps_mape_pct": _mape(g.o.mb, g.r.mb),
        "read_fraction": [g.o.read_fraction(), g.r.read_fraction()],
        "size_hist_tv": _tv(g.o.sizes, g.o.data, g.r.sizes, g.r.data),
        "match_share": round(g.pairs / g.o.n, 4) if g.o.n else None,
    }
    if timed and g.pairs:
        f["issue_error"] = _pct(g.issue, _Off(shift), ("issue", shift))
        f["drift_ms_per_s"] = g.drift.value()
        if g.pairs > 1:
            f["interarrival_error"] = _pct(g.inter, lambda x: x, ("inter",))
    return f


class Sink:
    """What one read of both traces feeds; the first read needs only the gaps.

    `ordered`: `paired` must see the pairs in the original's time order. A sink
    whose answer does not depend on that order (the gaps' percentiles, the
    relabelling's labels) gets each batch's pairs at once: an original request
    left unpaired (lost in the replay) holds back every later pair of an ordered
    sink until the horizon has passed it, the whole trace at NVMe rates."""

    ordered = True
    # The columns an ordered sink reads of the pairs that wait (original's, replay's;
    # None: whole rows): what waits is kept so (waiting.py).
    keep: tuple[np.dtype | None, np.dtype | None] = (None, None)

    def orig(self, o: np.ndarray) -> None: ...
    def rep(self, r: np.ndarray) -> None: ...
    def lost_rep(self, r: np.ndarray) -> None: ...
    def paired(self, o: np.ndarray, r: np.ndarray) -> None: ...


def _replay_upto(batches: Iterator[np.ndarray], held: list[np.ndarray], bound: int) -> np.ndarray:
    """The replay's requests before `bound`; what comes after stays in `held`."""
    while not held or not len(held[-1]) or held[-1]["t"][-1] < bound:
        nxt = next(batches, None)
        if nxt is None:
            break
        held.append(nxt)
    a = ordered.cat(held) if held else np.empty(0, ordered.COMPACT)
    cut = int(np.searchsorted(a["t"], bound, "left"))
    held[:] = [a[cut:]]
    return a[:cut]


def _at_least(batches: Iterator[np.ndarray], held) -> Iterator[np.ndarray]:
    """The batches, consecutive ones joined until they are as many requests as the
    pairer holds: it matches what it holds again at every step, so a replay slower
    than its original (most of the original held, up to the horizon) would cost
    a match of all of it per batch, however small the batches."""
    part: list[np.ndarray] = []
    n = 0
    for b in batches:
        part.append(b)
        n += len(b)
        if n >= held():
            yield ordered.cat(part) if len(part) > 1 else part[0]
            part, n = [], 0
    if part:
        yield ordered.cat(part) if len(part) > 1 else part[0]


def drive(
    so: ordered.Scan,
    sr: ordered.Scan,
    sink: Sink,
    horizon_ns: int = HORIZON_NS,
    keys: tuple[Keys, Keys] | None = None,
) -> None:
    """Both traces through `sink`, once: pairs in the original's order (the requests
    keyed by `keys`, (original's, replay's), pairing.Pairer)."""
    drive_batches(ordered.batches(so), ordered.batches(sr), sink, horizon_ns, keys)


def drive_batches(
    origs: Iterator[np.ndarray],
    reps: Iterator[np.ndarray],
    sink: Sink,
    horizon_ns: int,
    keys: tuple[Keys, Keys] | None = None,
) -> None:
    """`drive` over any two streams of ordered.COMPACT batches in time order."""
    pairer = Pairer(horizon_ns, *(keys or (None, None)))
    held: list[np.ndarray] = []
    # Pairs an ordered sink waits for (waiting.py: narrowed to what it reads, the
    # earliest on file past a budget).
    waiting = Waiting(sink.keep)

    def settle(step, before: int | None) -> None:
        sink.lost_rep(step.lost_rep)
        if not sink.ordered:
            if len(step.orig):
                sink.paired(step.orig, step.rep)
            return
        for o, r in waiting.settle(step.orig, step.rep, before):
            sink.paired(o, r)

    def final(bound: int) -> int:
        """Pairs whose original is before this time are final: a later pair's
        original is still held unpaired or comes in a later batch (at or after
        `bound`). Settling at `bound - horizon_ns` instead held every pair of
        the last horizon, a whole minute-long trace at NVMe rates."""
        h = pairer.earliest_held()
        return bound if h is None else min(h, bound)

    try:
        for ob in _at_least(origs, lambda: pairer.held):
            bound = int(ob["t"][-1])
            rb = _replay_upto(reps, held, bound)
            sink.orig(ob)
            sink.rep(rb)
            step = pairer.step(ob, rb, bound)
            settle(step, final(bound))
        empty = np.empty(0, ordered.COMPACT)
        for rb in itertools.chain(held, reps):
            if len(rb):
                sink.rep(rb)
                b = int(rb["t"][-1])
                step = pairer.step(empty, rb, b)
                settle(step, final(b))
        settle(pairer.step(empty, empty, None), None)
    finally:
        waiting.close()


class Figures(Sink):
    """Every figure, from one read of both traces. What depends on the replay's
    clock offset (the median gap over all pairs, known only once every pair is)
    waits until `finish` (later.py); the rest is summed as the rows pass."""

    # What `paired` reads of pairs that wait (Sink.keep): 31 bytes a pair, not 80.
    keep = (np.dtype([("t", "<i8"), ("n", "<i8"), ("stream", "u1")]), REP)

    def __init__(self, so: ordered.Scan, sr: ordered.Scan, window_s: float) -> None:
        nbins = max(1, so.duration_ns // 1_000_000_000)
        self.shift, self.timed = 0, False
        self.all = Group(Side(nbins), Side(nbins))
        self.streams = {sid: Group(Side(nbins), Side(nbins)) for sid in so.stream_ids}
        # A replay `replay run` labelled by plan job: an unpaired request (a sync, or
        # one the replay got wrong) still counts in its own stream.
        self.own = np.full(256, -1, np.int64)
        if sr.metadata().get("stream_labels"):
            ids = {so.stream_name(s): s for s in so.stream_ids}
            self.own[:] = [ids.get(sr.stream_name(s), -1) for s in range(256)]
        self.windows = Windows(so.duration_ns, window_s)
        # Both traces' locality, from the same read (each trace's rows all come
        # here once, in time order): reading them again for it took two more reads.
        self.locality = (localitystream.Profile(), localitystream.Profile())
        # Summed in threads of their own, behind the pairing (ahead.py); `settle`
        # waits for them.
        self._behind = (Behind(self.locality[0].add), Behind(self.locality[1].add))
        self.mirror: int | None = None  # the stream that took every pair so far
        self._later = Later()

    def orig(self, o: np.ndarray) -> None:
        self._behind[0](o)
        every = self.all.o.tally(o["t"], o)
        self.all.o.merge(every)
        sids = localitystream.distinct(o["stream"])
        for sid in sids:
            if len(sids) == 1:  # one stream (the usual batch): all its rows
                self.streams[sid].o.merge(every)
            else:
                self.streams[sid].o.add(o["t"], o, o["stream"] == sid)
        self.windows.times(0, o["t"])

    def rep(self, r: np.ndarray) -> None:
        # (Its rows are kept for later once paired or lost: every replayed request
        # comes once as one or the other, so none is kept twice.)
        self._behind[1](r)

    def lost_rep(self, r: np.ndarray) -> None:
        if len(r):
            self._later.add(LOST_ROWS, r)

    def paired(self, o: np.ndarray, r: np.ndarray) -> None:
        gaps = r["t"] - o["t"]
        sids = localitystream.distinct(o["stream"])
        # Every pair so far in one stream (one job's capture): its gaps are all
        # streams' gaps, kept once (written twice, their percentiles found twice,
        # they were a tenth of `replay fidelity`'s time); copied out if another
        # stream's pair comes.
        if self.mirror is None and not self.all.pairs and len(sids) == 1:
            self.mirror = sids[0]
        if self.mirror is not None and sids != [self.mirror]:
            self.streams[self.mirror].unmirror(self.all)
            self.mirror = None
        self.all.paired(gaps)
        if self.mirror is not None:
            self.streams[self.mirror].mirrored(self.all)
        else:
            for sid in sids:
                self.streams[sid].paired(gaps[o["stream"] == sid] if len(sids) > 1 else gaps)
        p = np.empty(len(o), PAIR)
        p["t_o"], p["gap"], p["stream"] = o["t"], gaps, o["stream"]
        self._later.add(PAIRED, p, r)

    def settle(self) -> tuple[localitystream.Profile, localitystream.Profile]:
        """Both traces' locality, once every request given has been summed."""
        for b in self._behind:
            b.join()
        return self.locality

    def finish(self, shift: int, timed: bool) -> None:
        """The figures that need the replay's clock offset `shift` (0 where it is
        not `timed`: too few pairs), from the calls kept in order."""
        self.shift, self.timed = shift, timed
        if self.mirror is not None:
            # Every pair was this stream's: its drift takes the very sums all streams'
            # does, call for call (summed once; a tenth of finish's time).
            g = self.streams[self.mirror]
            g.issue, g.inter, g.last_gap = self.all.issue, self.all.inter, self.all.last_gap
            g.drift = self.all.drift
        for kind, parts in self._later.calls():
            if kind == LOST_ROWS:
                (r,) = parts
                tr = r["t"] - shift
                self.all.r.add(tr, r)
                self.windows.times(1, tr)
                own = self.own[r["stream"]]
                for sid in np.unique(own[own >= 0]).tolist():
                    self.streams[sid].r.add(tr, r, own == sid)
            else:
                p, r = parts
                self._paired(p, r)

    def _paired(self, p: np.ndarray, r: np.ndarray) -> None:
        t_o, gaps = p["t_o"], p["gap"]
        err = gaps - self.shift if self.timed else gaps
        if self.timed:
            self.all.drift.add(t_o, err)
            self.windows.pairs(t_o, np.abs(err))
        # The replay's rows counted here and as lost (lost_rep): all of them, once;
        # the sums are of integers, so their order does not change them.
        tr = r["t"] - self.shift
        every = self.all.r.tally(tr, r)
        self.all.r.merge(every)
        self.windows.times(1, tr)
        sids = localitystream.distinct(p["stream"])
        for sid in sids:
            g = self.streams[sid]
            if len(sids) == 1:
                g.r.merge(every)  # (the same rows: one tally for both)
                if self.timed and g.drift is not self.all.drift:
                    g.drift.add(t_o, err)
                continue
            m = p["stream"] == sid
            g.r.add(tr, r, m)
            if self.timed:
                g.drift.add(t_o[m], gaps[m] - self.shift)

    def close(self) -> None:
        for b in self._behind:
            b.join(check=False)
        self._later.close()
        for g in [self.all, *self.streams.values()]:
            g.close()
