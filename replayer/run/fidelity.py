"""`iotape replay fidelity`: how closely a replay reproduced the original, measured
at the device on both sides.

Requests are paired by (op, offset, size) in order of occurrence (the k-th read
of 4 KiB at byte X in the original with the k-th in the replay), which also gives
each replayed request its original's stream; a replay that `iotape replay run`
relabelled by plan job keeps its own label for the requests left unpaired. The
replay's clock is aligned to the original by the median gap over all paired
requests: the offset between two recordings' clocks is arbitrary, and the median
is the offset with the least absolute error. Aligning on the first requests only
measured fio's start-up instead (they run while fio still sets jobs up, and
shifted every error by ±0.1 ms). A replay that drifts is not hidden by it: the
drift is reported on its own (`drift_ms_per_s`, the least-squares slope of the
error against time) and still shows in the error's tails.

A synthetic replay issues requests of its own (fitted sizes and offsets), so its
pairs are coincidences: where fewer than half the requests pair, both traces are
aligned at their first request instead, and issue-time errors are not reported
(they would measure chance).

Per time window (timewindows.py): requests, IOPS error and issue-time error
beside the wake-up floor `replay run` measured during the run, and whether the
replay is within the floor-relative goal.

Locality (locality.py) is measured over all requests: footprint, hot shares,
sequential share and the LRU hit-ratio curve. A replay whose curve is far from
the original's is unfaithful on locality however good its rate is.

A plan that moved offsets (--remap, databases side by side) recorded where each
request went; `compare` pairs through that mapping (mapped.py) and reports how
many paired and why the others did not ("pairing").

`compare` streams both traces (fidstream.py, localitystream.py): its memory does
not grow with their length, and its answers are `compare_in_memory`'s wherever
every pair lies within pairing.HORIZON_NS (60 s) of each other.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np

from recorder.tracefile import open_trace
from replayer.plan import locality
from replayer.plan.source import OP, load, request_times
from replayer.run import fidstream, localitystream, mapped, ordered, timewindows
from replayer.run.ahead import ahead, both
from replayer.run.pairing import HORIZON_NS, KeysAhead

MIN_MATCH_SHARE = 0.5  # below it, pairs are chance (a synthetic replay)


class FidelityReport(TypedDict):
    """A replay against its original; each figure's pair is [original, replay]."""

    original: str
    replayed: str
    duration_s: list[float]
    start_shift_ms: float
    alignment: str
    overall: dict[str, Any]
    streams: dict[str, dict[str, Any]]
    # With the replay's issue times paired (not a synthetic replay):
    windows: NotRequired[list[dict[str, Any]]]
    wakeup_floor: NotRequired[dict[str, Any] | None]
    floor_goal: NotRequired[dict[str, Any]]
    # A recorded closed-loop replay: why its issue-time figures are left out.
    closed_loop: NotRequired[str]
    pairing: NotRequired[dict[str, Any]]  # how many paired, through what (mapped.py)
    locality: NotRequired[dict[str, Any]]  # always there; set last, so it comes last


def _keys(r: np.ndarray) -> np.ndarray:
    return (
        (r["op"].astype(np.uint64) << np.uint64(56))
        ^ (r["offset"].astype(np.uint64) << np.uint64(8))
        ^ r["bytes"].astype(np.uint64)
    )


def _occurrence(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, rank of each among equal keys in time order), for positions in time order."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    start = np.r_[0, np.flatnonzero(sk[1:] != sk[:-1]) + 1]
    counts = np.diff(np.r_[start, len(sk)])
    rank_sorted = np.arange(len(sk)) - np.repeat(start, counts)
    rank = np.empty(len(sk), np.int64)
    rank[order] = rank_sorted
    return keys, rank


def match(orig: np.ndarray, rep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i_orig, i_rep) of matched requests."""
    ko, ro = _occurrence(_keys(orig))
    kr, rr = _occurrence(_keys(rep))
    # Compound (key, rank) as a structured sort key.
    a = np.rec.fromarrays([ko, ro])
    b = np.rec.fromarrays([kr, rr])
    _, io, ir = np.intersect1d(a, b, assume_unique=True, return_indices=True)
    order = np.argsort(io, kind="stable")
    return io[order], ir[order]


def _per_second(t_ns: np.ndarray, w: np.ndarray, nbins: int) -> np.ndarray:
    sec = (t_ns // 1_000_000_000).astype(np.int64)
    ok = (sec >= 0) & (sec < nbins)
    return np.bincount(sec[ok], weights=w[ok], minlength=nbins)


def _mape(o: np.ndarray, r: np.ndarray) -> float | None:
    ok = o > 0
    return round(float(np.mean(np.abs(r[ok] - o[ok]) / o[ok]) * 100), 3) if ok.any() else None


def _tv(a: np.ndarray, b: np.ndarray) -> float | None:
    if not len(a) or not len(b):
        return None
    sizes = np.union1d(a, b)
    pa = np.bincount(np.searchsorted(sizes, a), minlength=len(sizes)) / len(a)
    pb = np.bincount(np.searchsorted(sizes, b), minlength=len(sizes)) / len(b)
    return round(float(0.5 * np.abs(pa - pb).sum()), 4)


def _pct(x: np.ndarray, qs=(50, 90, 99)) -> dict:
    if not len(x):
        return {}
    out = {f"p{q}_ms": round(float(np.percentile(x, q)) / 1e6, 4) for q in qs}
    out["max_ms"] = round(float(x.max()) / 1e6, 4)
    return out


def _drift(t_ns: np.ndarray, err_ns: np.ndarray) -> float | None:
    """Least-squares slope of the issue-time error against time, in ms per second."""
    if len(t_ns) < 2 or np.ptp(t_ns) == 0:
        return None
    x = (t_ns - t_ns.mean()) / 1e9
    return round(float((x * (err_ns - err_ns.mean())).sum() / (x * x).sum()) / 1e6, 4)


def _figures(o, to, r, tr, pairs_o, pairs_r, nbins, timed: bool = True) -> dict:
    data_o = o["op"] != OP["flush"]
    data_r = r["op"] != OP["flush"]
    ones_o, ones_r = np.ones(len(o)), np.ones(len(r))
    iops_o, iops_r = _per_second(to, ones_o, nbins), _per_second(tr, ones_r, nbins)
    mb_o = _per_second(to, o["bytes"].astype(np.float64), nbins)
    mb_r = _per_second(tr, r["bytes"].astype(np.float64), nbins)
    rf = lambda x, d: round(float(np.mean(x["op"][d] == OP["read"])), 4) if d.any() else None  # noqa: E731
    f = {
        "requests": [len(o), len(r)],
        "iops_mean": [round(float(iops_o.mean()), 1), round(float(iops_r.mean()), 1)],
        "iops_mape_pct": _mape(iops_o, iops_r),
        "mbps_mape_pct": _mape(mb_o, mb_r),
        "read_fraction": [rf(o, data_o), rf(r, data_r)],
        "size_hist_tv": _tv(o["bytes"][data_o], r["bytes"][data_r]),
        "match_share": round(len(pairs_o) / len(o), 4) if len(o) else None,
    }
    if timed and len(pairs_o):
        signed = (tr[pairs_r] - to[pairs_o]).astype(np.float64)
        f["issue_error"] = _pct(np.abs(signed))
        f["drift_ms_per_s"] = _drift(to[pairs_o], signed)
        if len(pairs_o) > 1:
            ia = np.abs(np.diff(tr[pairs_r]) - np.diff(to[pairs_o])).astype(np.float64)
            f["interarrival_error"] = _pct(ia)
    return f


def _report(
    paths: tuple[str | Path, str | Path],
    durations_ns: tuple[int, int],
    shift: int,
    timed: bool,
    overall: dict[str, Any],
) -> FidelityReport:
    """A report of `paths` (original, replay), its streams still to fill in."""
    return {
        "original": str(paths[0]),
        "replayed": str(paths[1]),
        "duration_s": [round(d / 1e9, 3) for d in durations_ns],
        "start_shift_ms": round(shift / 1e6, 3),
        "alignment": "paired requests" if timed else "first request (few pairs: synthetic?)",
        "overall": overall,
        "streams": {},
    }


def compare_in_memory(
    original: str | Path, replayed: str | Path, window_s: float = timewindows.WINDOW_S
) -> FidelityReport:
    """`compare` with both traces held whole: what it answered before it streamed, kept
    as the reference its tests and bench/replay_memory.py measure it against."""
    so, sr = load(original), load(replayed)
    o, r = so.records, sr.records
    io, ir = match(o, r)
    shift = 0
    timed = len(io) >= MIN_MATCH_SHARE * len(o) and len(io) > 0
    if timed:
        shift = int(np.median(sr.t_ns[ir] - so.t_ns[io]))
    tr = sr.t_ns - shift
    to = so.t_ns
    nbins = max(1, int(so.duration_ns // 1_000_000_000))
    durations = (so.duration_ns, sr.duration_ns)
    figures = _figures(o, to, r, tr, io, ir, nbins, timed)
    out = _report((original, replayed), durations, shift, timed, figures)
    # A replayed request belongs to the stream of the original it matched.
    rep_stream = np.full(len(r), -1, np.int64)
    if sr.metadata().get("stream_labels"):
        # `iotape replay run` labelled the replay by plan job: an unmatched request
        # (a sync, or one the replay got wrong) still counts in its own stream.
        ids = {so.stream_name(s): s for s in np.unique(o["stream"]).tolist()}
        own = np.array([ids.get(sr.stream_name(s), -1) for s in r["stream"].tolist()], np.int64)
        rep_stream[:] = own
    rep_stream[ir] = o["stream"][io]
    for sid in np.unique(o["stream"]).tolist():
        mo = o["stream"] == sid
        mr = rep_stream == sid
        po = np.flatnonzero(mo)
        pr = np.flatnonzero(mr)
        sel = mo[io]
        # Re-index the pairs into the per-stream arrays.
        io_s = np.searchsorted(po, io[sel])
        ir_s = np.searchsorted(pr, ir[sel])
        out["streams"][so.stream_name(sid)] = _figures(
            o[mo], to[mo], r[mr], tr[mr], io_s, ir_s, nbins, timed
        )
    unmatched = len(r) - len(ir)
    out["overall"]["unmatched_replay_requests"] = unmatched
    out["pairing"] = mapped.section(None, None, len(io), len(o), len(r))  # by recorded offsets
    floor = timewindows.floor_of(sr.metadata())
    mono0 = sr.header.get("mono_start_ns")
    if mono0 is not None and len(r):
        # The replay's records count from the recorder's start (CLOCK_MONOTONIC).
        mono0 = int(mono0) + int(request_times(r[:1])[0]) + shift
    if timed:
        rows = timewindows.windows(to, tr, io, ir, so.duration_ns, floor, mono0, window_s)
        out["windows"] = rows
        out["wakeup_floor"] = (floor or {}).get("overall")
        out["floor_goal"] = timewindows.verdict(
            out["overall"].get("issue_error", {}).get("p99_ms"), floor, rows
        )
    out["locality"] = locality.figures(o, so.t_ns, r, sr.t_ns)
    return out


def compare(
    original: str | Path,
    replayed: str | Path,
    window_s: float = timewindows.WINDOW_S,
    horizon_ns: int = HORIZON_NS,
    plan: Path | None = None,
) -> FidelityReport:
    """Per-stream, per-window and overall fidelity figures; each pair is
    [original, replay]. Both traces stream (fidstream.py): memory stays flat in
    their length. Pairs through the mapping of `plan` (or of the replay's own plan:
    mapped.plan_path)."""
    # Both traces read at once, and each read ahead of the pairing (ahead.py); the
    # plan's mapping read meanwhile (its errors after the scans', as in turn).
    with ThreadPoolExecutor(1, thread_name_prefix="iotape-plan") as pool:
        planned = pool.submit(mapped.early, plan, Path(replayed))
        so, sr = both(ordered.scan, original, replayed)
        plan, mapping = planned.result()
    m = mapped.mapper_of(mapping, so, sr)
    tally = mapped.Tally(m) if m else None
    # The original's keys through the mapping, and what the mapping expects of each
    # batch, made in the thread that reads it (numpy, off the pairing's thread;
    # all counted once the last batch has come).
    keyed = KeysAhead(m.keys) if m else None
    keys = (keyed, m.replay_keys) if keyed and m else None
    acc = fidstream.Figures(so, sr, window_s)
    try:
        read = ordered.batches(so)
        read = tally.counted(read) if tally else read
        origs = ahead(keyed.made(read) if keyed else read)
        origs = keyed.given(origs) if keyed else origs
        fidstream.drive_batches(origs, ahead(ordered.batches(sr)), acc, horizon_ns, keys)
        pairs = acc.all.pairs
        timed = pairs >= MIN_MATCH_SHARE * so.count and pairs > 0
        # The replay's clock offset: the median gap over all pairs.
        shift = int(acc.all.issue.median()) if timed else 0
        acc.finish(shift, timed)
        durations = (so.duration_ns, sr.duration_ns)
        out = _report((original, replayed), durations, shift, timed, {})
        out["overall"] = fidstream.figures(acc.all, shift, timed)
        out["streams"] = {
            so.stream_name(sid): fidstream.figures(g, shift, timed)
            for sid, g in acc.streams.items()
        }
    finally:
        acc.close()
    out["overall"]["unmatched_replay_requests"] = sr.count - acc.all.pairs
    out["pairing"] = mapped.section(plan, tally, acc.all.pairs, so.count, sr.count)
    floor = timewindows.floor_of(sr.metadata())
    mono0 = sr.header.get("mono_start_ns")
    if mono0 is not None:
        # The replay's records count from the recorder's start (CLOCK_MONOTONIC).
        mono0 = int(mono0) + sr.t0 + shift
    if timed:
        rows = acc.windows.rows(floor, mono0)
        out["windows"] = rows
        out["wakeup_floor"] = (floor or {}).get("overall")
        out["floor_goal"] = timewindows.verdict(
            out["overall"].get("issue_error", {}).get("p99_ms"), floor, rows
        )
    out["locality"] = _locality(*acc.settle())
    return out


def _locality(o: localitystream.Profile, r: localitystream.Profile) -> dict[str, Any]:
    """locality.figures of both traces, streamed (localitystream.py); the replay's
    LRU curve at the original's cache sizes."""
    po = o.figures()
    caps = [c // locality.UNIT for c in po["lru_caps_bytes"]]
    return locality.side_by_side(po, r.figures(caps))


def report(
    original: Path,
    replayed: Path,
    anchor: Path | None,
    window_s: float,
    horizon_ns: int = HORIZON_NS,
    plan: Path | None = None,
) -> dict[str, FidelityReport]:
    """`replay fidelity`: the replay ("iotape") and fio's plain replay ("fio_plain",
    given `anchor`) each against the original; both paired through `plan`'s mapping
    (the anchor replays the same mapped requests)."""
    res = {"iotape": compare(original, replayed, window_s, horizon_ns, plan)}
    if anchor is not None:
        if plan is None:
            plan = mapped.plan_path(None, ordered.scan(replayed))
        res["fio_plain"] = compare(original, anchor, window_s, horizon_ns, plan)
    with open_trace(replayed) as t:
        meta = t.header.get("metadata") or {}
    replay_of = meta.get("replay_of")
    timing = replay_of.get("timing") if isinstance(replay_of, dict) else None
    if timing is not None:
        _closed_loop(res["iotape"], str(timing))
    return res


OPEN_LOOP = (
    "issue_error",
    "drift_ms_per_s",
    "interarrival_error",
    "iops_mape_pct",
    "mbps_mape_pct",
)


def _closed_loop(rep: FidelityReport, timing: str) -> None:
    """A recorded dependent or afap replay: the figures that compare issue times
    or per-second rates with the trace's are left out, and the report says why
    and where its figures are (closedloop.py: `replay fidelity ORIGINAL JOBDIR`)."""
    for f in [rep["overall"], *rep["streams"].values()]:
        for k in OPEN_LOOP:
            f.pop(k, None)
    for k in ("windows", "wakeup_floor", "floor_goal"):
        rep.pop(k, None)  # type: ignore[misc]
    loc = rep.pop("locality", None)
    rep["closed_loop"] = (
        f"a {timing} replay issues each request when the requests it waits for completed, "
        "not at its recorded time: issue-time error, drift and per-second IOPS error would "
        "measure the target's speed; its speed-up, latency and dependencies: `iotape replay "
        "fidelity ORIGINAL JOBDIR`"
    )
    if loc is not None:
        rep["locality"] = loc


def meets_goals(fig: FidelityReport, iops_pct: float = 2.0, p99_ms: float = 1.0) -> bool:
    o = fig["overall"]
    return (o["iops_mape_pct"] or 0) <= iops_pct and o.get("issue_error", {}).get(
        "p99_ms", 1e9
    ) <= p99_ms
