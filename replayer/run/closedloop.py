"""`iotape replay fidelity ORIGINAL JOBDIR` of a dependent or afap replay (closed
loop): how the application would have run on the target, per stream.

A closed-loop replay issues each request when the requests it waits for have
completed, plus its think time, not at its recorded time: on a faster target it
finishes sooner, on a slower one later. So the open-loop figures (issue-time
error, drift, per-second IOPS error, the wake-up floor) measure nothing here and
are not reported; instead, per stream (the plan's stream of each job):

- the original's and the replay's throughput: requests over their span (the
  stream's first issue to its last completion), and the speed-up, replay over
  original;
- latency percentiles beside the original's: the original's from the trace, from
  the block layer's entry (queue time, else dispatch) to completion, which is
  the nearest the trace has to the system call; the replay's are iotape-lanes'
  own, from the system call's issue to its return, merged over the stream's jobs
  from their histograms (bucket midpoints: within 3.2 % of the exact value);
- the dependencies honoured: requests issued before one they waited for had
  completed, as iotape-lanes counted them (results/summary.json), 0 unless the
  replay is wrong;
- given `truth` (a trace of the application itself run on the target), the same
  figures of it and the replay's error against it, IOPS and p50 latency.

The traces are read a chunk at a time; latencies are kept per stream on disk
(quantiles.Spill), so memory stays flat in the trace's length.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import schemas
from base.errors import IotapeError
from recorder.tracefile import open_trace
from replayer.plan.model import Manifest
from replayer.plan.source import OP, replayable, request_times
from replayer.run.quantiles import Spill
from schemas.documents.closed_loop import (
    ClosedLoopReport,
    Latency,
    Side,
    StreamFigures,
    TruthError,
)
from schemas.documents.summary import ReplaySummary

OVERALL = "overall"
NOT_REPORTED = (
    "issue-time error, drift and per-second IOPS error: a dependent replay issues "
    "each request when the requests it waits for completed, not at its recorded "
    "time, so they would measure the target's speed, not the replay's accuracy"
)
LATENCY_SOURCES = {
    "original": "the trace: block-layer entry (queue, else dispatch) to completion",
    "replay": "iotape-lanes: the system call's issue to its return",
    "truth": "the trace: block-layer entry (queue, else dispatch) to completion",
}
DATA_OPS = ("read", "write", "trim")


@dataclass
class _Acc:
    """One stream's requests as they stream past."""

    requests: int = 0
    first: int | None = None
    last: int | None = None
    lat: dict[str, Spill] = field(default_factory=lambda: {k: Spill() for k in ("read", "write")})
    lat_all: Spill = field(default_factory=Spill)

    def add(self, start: np.ndarray, end: np.ndarray, op: np.ndarray) -> None:
        self.requests += len(start)
        lo, hi = int(start.min()), int(end.max())
        self.first = lo if self.first is None else min(self.first, lo)
        self.last = hi if self.last is None else max(self.last, hi)
        data = op != OP["flush"]
        ok = data & (end > start)
        self.lat_all.add((end - start)[ok])
        for name in ("read", "write"):
            m = ok & (op == OP[name])
            self.lat[name].add((end - start)[m])

    def side(self) -> Side:
        span = (self.last - self.first) if self.first is not None and self.last else 0
        pct = _spill_pcts(self.lat_all)
        return Side(
            requests=self.requests,
            span_s=round(span / 1e9, 4),
            iops=round(self.requests / (span / 1e9), 1) if span > 0 else None,
            latency=Latency(
                requests=self.lat_all.count,
                p50_ms=pct[0],
                p99_ms=pct[1],
                read_p50_ms=_spill_pcts(self.lat["read"])[0],
                write_p50_ms=_spill_pcts(self.lat["write"])[0],
            ),
        )

    def close(self) -> None:
        self.lat_all.close()
        for s in self.lat.values():
            s.close()


def _spill_pcts(s: Spill) -> tuple[float | None, float | None]:
    if not s.count:
        return None, None
    (p50, p99), _ = s.percentiles((50, 99), lambda x: x)
    return round(p50 / 1e6, 4), round(p99 / 1e6, 4)


def trace_sides(path: Path) -> dict[str, Side]:
    """Per stream name (and OVERALL): a trace's requests, span, IOPS and latency."""
    accs: dict[str, _Acc] = {}
    try:
        with open_trace(path) as t:
            names = {int(k): str(v) for k, v in schemas.stream_names().items()}
            names |= {
                int(k): str(v)
                for k, v in (t.header.get("streams") or {}).items()
                if str(k).isdigit()
            }
            for chunk in t.iter_chunks():
                r = chunk[replayable(chunk)]
                if not len(r):
                    continue
                queued = r["ts_queue_ns"].astype(np.int64)
                start = np.where(queued > 0, queued, request_times(r))
                end = r["ts_complete_ns"].astype(np.int64)
                end = np.maximum(end, start)
                accs.setdefault(OVERALL, _Acc()).add(start, end, r["op"])
                for sid in np.unique(r["stream"]).tolist():
                    m = r["stream"] == sid
                    name = names.get(int(sid), f"stream{sid}")
                    accs.setdefault(name, _Acc()).add(start[m], end[m], r["op"][m])
    except (OSError, ValueError) as e:
        raise IotapeError(f"{path}: {e}") from None
    try:
        if OVERALL not in accs:
            raise IotapeError(f"{path}: the trace holds no requests to compare")
        return {k: a.side() for k, a in accs.items()}
    finally:
        for a in accs.values():
            a.close()


def _hist_pct(hist: list[tuple[float, float, int]], q: float) -> float | None:
    """Percentile q of merged [lower, upper, count] buckets, at the bucket's midpoint
    (report.c's hist_pct rank: the first bucket holding ceil(q % of all))."""
    if not hist:
        return None
    hist = sorted(hist)
    total = sum(n for _, _, n in hist)
    want = max(1, int(np.ceil(q / 100 * total - 1e-9)))
    seen = 0
    for lo, hi, n in hist:
        seen += n
        if seen >= want:
            return round((lo + hi) / 2 / 1e6, 4)
    return None  # unreachable: seen reaches total


def _lanes_side(jobs: Iterable[dict[str, Any]], where: Path) -> Side:
    jobs = list(jobs)
    hists: dict[str, list[tuple[float, float, int]]] = {d: [] for d in DATA_OPS}
    requests = 0
    firsts, lasts = [], []
    for j in jobs:
        for d in (*DATA_OPS, "sync"):
            s = j.get(d) or {}
            requests += int(s.get("total_ios", 0))
            if d in hists:
                if s.get("total_ios") and "lat_hist_ns" not in s:
                    raise IotapeError(
                        f"{where}: job {j.get('jobname')}: no latency histogram (an "
                        "iotape-lanes older than this iotape? rerun `replay run`)"
                    )
                hists[d] += [(float(a), float(b), int(n)) for a, b, n in s.get("lat_hist_ns", [])]
        if "first_ns" in j:
            firsts.append(int(j["first_ns"]))
            lasts.append(int(j["last_ns"]))
    span = (max(lasts) - min(firsts)) if firsts else 0
    every = [b for d in DATA_OPS for b in hists[d]]
    return Side(
        requests=requests,
        span_s=round(span / 1e9, 4),
        iops=round(requests / (span / 1e9), 1) if span > 0 else None,
        latency=Latency(
            requests=sum(n for _, _, n in every),
            p50_ms=_hist_pct(every, 50),
            p99_ms=_hist_pct(every, 99),
            read_p50_ms=_hist_pct(hists["read"], 50),
            write_p50_ms=_hist_pct(hists["write"], 50),
        ),
    )


def replay_sides(jobdir: Path, man: Manifest) -> dict[str, Side]:
    """Per stream name (and OVERALL): the replay's figures from iotape-lanes' JSON."""
    out = jobdir / "results" / "fio.json"
    try:
        text = out.read_text()
        res = json.loads(text[text.index("{") :])
    except (OSError, ValueError):
        raise IotapeError(
            f"{out}: no iotape-lanes result (run `iotape replay run` first)"
        ) from None
    if res.get("fio version") != "iotape-lanes":
        raise IotapeError(f"{out}: not iotape-lanes' output (a closed-loop plan runs with it)")
    stream_of = {j.name: j.stream for j in man.jobs}
    by_stream: dict[str, list[dict]] = {}
    for j in res.get("jobs", []):
        name = j.get("jobname")
        if name not in stream_of:
            raise IotapeError(f"{out}: job {name!r} is not a job of {jobdir / 'plan.json'}")
        by_stream.setdefault(stream_of[name], []).append(j)
    sides = {s: _lanes_side(js, out) for s, js in by_stream.items()}
    sides[OVERALL] = _lanes_side(res.get("jobs", []), out)
    return sides


def _err(replay: float | None, truth: float | None) -> float | None:
    return round((replay - truth) / truth * 100, 2) if replay is not None and truth else None


def _figures(o: Side, r: Side, t: Side | None) -> StreamFigures:
    f = StreamFigures(
        original=o,
        replay=r,
        speed_up=round(r.iops / o.iops, 3) if r.iops and o.iops else None,
    )
    if t is not None:
        f.truth = t
        f.error = TruthError(
            iops_error_pct=_err(r.iops, t.iops),
            p50_error_pct=_err(r.latency.p50_ms, t.latency.p50_ms),
        )
    return f


def report(
    original: Path, jobdir: Path, man: Manifest, truth: Path | None = None
) -> ClosedLoopReport:
    """The closed-loop fidelity of the replay in `jobdir` (plan `man`) of `original`."""
    summary_path = jobdir / "results" / "summary.json"
    summary = ReplaySummary.read(summary_path)
    early = summary.issued_before_predecessor
    rep = replay_sides(jobdir, man)
    orig = trace_sides(original)
    tru = trace_sides(truth) if truth is not None else None
    empty = Side(
        requests=0, span_s=0.0, iops=None, latency=Latency(requests=0, p50_ms=None, p99_ms=None)
    )
    streams = {
        name: _figures(orig[name], rep.get(name, empty), (tru or {}).get(name))
        for name in orig
        if name != OVERALL
    }
    return ClosedLoopReport(
        original=str(original),
        jobdir=str(jobdir),
        timing=str(man.timing),
        think_scale=float(man.think_scale) if man.think_scale is not None else None,
        truth=str(truth) if truth is not None else None,
        issued_before_predecessor=early,
        group_commit_taken=summary.group_commit_taken,
        timer_writes=summary.timer_writes,
        clock_requests=summary.clock_requests,
        latency_sources=LATENCY_SOURCES,
        not_reported=NOT_REPORTED,
        overall=_figures(orig[OVERALL], rep[OVERALL], tru[OVERALL] if tru else None),
        streams=streams,
    )
