"""Base run vs one or more candidates: did a candidate get slower beyond the noise?

Per device model (when both runs used the same models: the firmware question),
op and stream, each metric is candidate minus base with a confidence interval:

- percentiles (p50 … p99.99) and the mean of device time: the spread of a bootstrap
  over each run's histogram (resampling events = multinomial bucket counts), 400
  resamples with a fixed seed, so the same question gets the same answer;
- IOPS (requests per second of the run, or of the time window): the counts as
  Poisson, variance n / duration² per run.

The interval is the change ± z standard errors, with z chosen for `confidence`
over all the gated tests of a candidate together (Bonferroni): a comparison asks
dozens of questions (every model x op x stream x metric), and at 95 % each a rerun
of the same workload would otherwise "regress" somewhere about every time.

A regression is a metric among the gated ones (`metrics`) that got worse (latency
up, IOPS down) by more than each of three bars: the noise (its whole interval on the
worse side of zero), the relative `threshold_pct` (histogram resolution, 0.78 %, does
not flag) and the absolute minimum effect (`min_effect_ns` for latency,
`min_effect_iops` for IOPS: a few microseconds of replay overhead on a fast device
do not flag; docs/regression.md says why the defaults are what they are). Each
judged metric names the bar that decided it (`decided_by`: the highest of the three)
and its height (`min_change`).
Runs of different workloads (analyzer/analyses/workloads.py) are compared but never
flagged: the answer says why they are not comparable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, cast

import numpy as np

import schemas
from analyzer.analyses import core as analyses
from analyzer.analyses import verdict as jetstress
from analyzer.analyses import workloads
from analyzer.analyses.filters import BadInput
from analyzer.analyses.histograms import LEVELS, SCHEME, Hist, merge, percentiles_from
from analyzer.store.interface import Reader
from analyzer.store.queries import MAX_NS, EventFilter
from schemas.documents.api import Comparison, ComparisonGroup, ComparisonSet, RunVerdict

PERCENTILES = tuple(name for _, name in LEVELS)
METRICS = (*PERCENTILES, "mean", "iops")
DEFAULT_METRICS = PERCENTILES
REPS = 400
MIN_COUNT = 30
# The absolute minimum effects (docs/regression.md, "Minimum effect"): over the
# replay overhead measured on the SSD-like device, under what matters on NVMe.
MIN_EFFECT_NS = 10_000.0
MIN_EFFECT_IOPS = 1.0
MAX_MIN_EFFECT_NS, MAX_MIN_EFFECT_IOPS = 1e12, 1e9  # what the API takes
DEFAULT_MIN_EFFECT = f"{MIN_EFFECT_NS / 1e3:g}us,{MIN_EFFECT_IOPS:g}iops"
RULES = ("noise", "threshold", "min_effect")
_TIME = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_RATE = ("iops", "io/s")


@dataclass(frozen=True)
class Gate:
    """What a change must exceed to flag, besides the noise."""

    threshold_pct: float = 5.0
    min_effect_ns: float = MIN_EFFECT_NS
    min_effect_iops: float = MIN_EFFECT_IOPS


def parse_metrics(text: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`p99,mean,iops` (or a list) to a tuple of known metrics; BadInput names a bad one."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        if item not in METRICS:
            raise BadInput(f"metric {item!r}: one of {', '.join(METRICS)}")
        if item not in out:
            out.append(item)
    if not out:
        raise BadInput(f"no metric given: one or more of {', '.join(METRICS)}")
    return tuple(out)


def parse_threshold(text: str | float) -> float:
    """`5%`, `5` or 5.0 to percent; BadInput for anything else or a negative value."""
    s = str(text).strip()
    try:
        v = float(s[:-1] if s.endswith("%") else s)
    except ValueError:
        raise BadInput(f"threshold {text!r}: a percentage such as 5%") from None
    if not (0 <= v <= 1000) or math.isnan(v):
        raise BadInput(f"threshold {text!r}: between 0% and 1000%")
    return v


def parse_min_effect(text: str) -> tuple[float, float]:
    """`10us`, `1iops`, `0.05ms,5iops` or `0` (no minimum for either) to
    (latency ns, IO/s); what is not given keeps its default. BadInput otherwise."""
    lat, iops = MIN_EFFECT_NS, MIN_EFFECT_IOPS
    why = f"min effect {text!r}: a time such as 10us, a rate such as 1iops, or 0"
    for item in (i.strip().lower() for i in str(text).split(",")):
        if not item:
            continue
        m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-zµ/]*)", item)
        if m is None:
            raise BadInput(why)
        v, unit = float(m[1]), m[2]
        if unit in _TIME and v * _TIME[unit] <= MAX_MIN_EFFECT_NS:
            lat = v * _TIME[unit]
        elif unit in _RATE and v <= MAX_MIN_EFFECT_IOPS:
            iops = v
        elif unit == "" and v == 0:
            lat, iops = 0.0, 0.0
        else:
            raise BadInput(why)
    return lat, iops


def _device_keys(store: Reader, run_id: str) -> dict[int, tuple[str, str]]:
    return {d["dev"]: (d["model"], d["firmware"]) for d in analyses.devices(store, run_id)}


def _grouped(rows: list[tuple], keys: dict[int, tuple[str, str]], by_model: bool) -> dict:
    """Rows per (model, op, stream); by_model False puts every device in one group."""
    out: dict[tuple, list[tuple]] = {}
    for r in rows:
        model = keys.get(r[0], ("", ""))[0] if by_model else "*"
        out.setdefault((model, r[1], r[2]), []).append(r)
    return out


def _firmware(rows: list[tuple], keys: dict[int, tuple[str, str]], model: str) -> list[str]:
    """Firmware revisions of the devices of `model` ("*": any) that have rows."""
    devs = {r[0] for r in rows}
    return sorted({fw for d, (m, fw) in keys.items() if d in devs and model in ("*", m)})


def _boot(h: Hist, reps: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap (reps x levels+1): the percentiles, then the mean, of resampled events."""
    n = h.count
    counts = rng.multinomial(n, h.n / n, size=reps)
    cum = np.cumsum(counts, axis=1)
    rep = analyses.representative(h)
    out = np.empty((reps, len(LEVELS) + 1))
    for j, (q, _) in enumerate(LEVELS):
        k = analyses.rank(n, q)
        idx = (cum < k).sum(axis=1)
        out[:, j] = rep[np.minimum(idx, len(rep) - 1)]
    # A resampled event keeps its bucket's mean: the resample's mean is exact in expectation.
    out[:, -1] = counts @ (h.s / h.n) / n
    return out


def span_s(run: dict, f: EventFilter) -> float:
    end = min(int(run["duration_ns"]), f.t_to_ns if f.t_to_ns != MAX_NS else 1 << 62)
    return max(end - min(f.t_from_ns, end), 1) / 1e9


def _item(level: str, unit: str, base: float | None, cand: float | None) -> dict[str, Any]:
    delta = None if base is None or cand is None else cand - base
    return {
        "level": level,
        "unit": unit,
        "base": base,
        "candidate": cand,
        "delta": delta,
        "delta_pct": 100 * delta / base if delta is not None and base else None,
        "ci_low": None,
        "ci_high": None,
        "gated": False,
        "regression": False,
        "improvement": False,
        "decided_by": None,
        "min_change": None,
    }


def _judge(item: dict, z: float, sd: float, gate: Gate, gated: bool, worse_up: bool):
    """Flags where the change beats the noise, the threshold and the minimum effect;
    `decided_by` names the highest of the three bars, the one that decided."""
    d = item["delta"]
    lo, hi = d - z * sd, d + z * sd
    item["ci_low"], item["ci_high"], item["gated"] = float(lo), float(hi), gated
    big = item["delta_pct"] is not None and abs(item["delta_pct"]) > gate.threshold_pct
    floor = gate.min_effect_iops if item["unit"] == "IO/s" else gate.min_effect_ns
    worse, better = (lo > 0, hi < 0) if worse_up else (hi < 0, lo > 0)
    beyond = big and abs(d) > floor
    item["regression"] = bool(gated and worse and beyond)
    item["improvement"] = bool(gated and better and beyond)
    # With no base to take a percentage of, the threshold cannot be passed.
    rel = gate.threshold_pct * abs(item["base"]) / 100 if item["delta_pct"] is not None else None
    bars = {"noise": z * sd, "threshold": math.inf if rel is None else rel, "min_effect": floor}
    rule = max(RULES, key=lambda k: bars[k])
    item["decided_by"] = rule
    item["min_change"] = None if math.isinf(bars[rule]) else float(bars[rule])


# A metric waiting for its interval: the item, its standard error, whether it is
# gated, and whether up is worse.
_Pending = tuple[dict[str, Any], float, bool, bool]


def _metrics(
    hb: Hist,
    hc: Hist,
    spans: tuple[float, float],
    metrics: tuple[str, ...],
    reps: int,
    min_count: int,
    rng: np.random.Generator,
    pending: list[_Pending],
) -> list[dict[str, Any]]:
    """One group's items (percentiles, mean, IOPS); those with an interval to judge go
    to `pending` with their standard error."""
    span_b, span_c = spans
    pb, pc = percentiles_from(hb), percentiles_from(hc)
    enough = hb.count >= min_count and hc.count >= min_count
    boot = _boot(hc, reps, rng) - _boot(hb, reps, rng) if enough else None
    items = []
    for j, (q, name) in enumerate(LEVELS):
        it = _item(name, "ns", pb[name], pc[name])
        # A tail percentile needs events beyond it in both runs to mean anything.
        if boot is not None and min(hb.count, hc.count) * (1 - q) >= 1:
            pending.append((it, float(boot[:, j].std()), name in metrics, True))
        items.append(it)
    mean = _item("mean", "ns", float(hb.s.sum() / hb.count), float(hc.s.sum() / hc.count))
    if boot is not None:
        pending.append((mean, float(boot[:, -1].std()), "mean" in metrics, True))
    iops = _item("iops", "IO/s", hb.count / span_b, hc.count / span_c)
    if enough:
        sd = math.sqrt(hb.count / span_b**2 + hc.count / span_c**2)
        pending.append((iops, sd, "iops" in metrics, False))
    return [*items, mean, iops]


def _legacy(it: dict[str, Any]) -> dict[str, Any]:
    return {
        "level": it["level"],
        "base_ns": it["base"],
        "candidate_ns": it["candidate"],
        "delta_ns": it["delta"],
        "delta_pct": it["delta_pct"],
        "ci_low_ns": it["ci_low"],
        "ci_high_ns": it["ci_high"],
        "regression": it["regression"],
        "improvement": it["improvement"],
    }


def _judge_all(
    groups: dict[str, dict],
    pending: list[_Pending],
    confidence: float,
    gate: Gate,
    comparable: bool,
) -> tuple[int, float]:
    """Intervals for every pending item, simultaneous over the gated ones; the rows'
    flags follow. Returns the number of gated tests and z."""
    tests = max(1, sum(1 for p in pending if p[2]))
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2 / tests)
    for it, sd, gated, worse_up in pending:
        _judge(it, z, sd, gate, comparable and gated, worse_up)
    for g in groups.values():
        for row in g["rows"]:
            for it, legacy in zip(row["metrics"], row["percentiles"], strict=False):
                legacy.update(ci_low_ns=it["ci_low"], ci_high_ns=it["ci_high"])
                legacy.update(regression=it["regression"], improvement=it["improvement"])
            row["regression"] = any(it["regression"] for it in row["metrics"])
    return tests, z


def compare(
    store: Reader,
    base: dict,
    cand: dict,
    fb: EventFilter,
    fc: EventFilter,
    threshold_pct: float = 5.0,
    confidence: float = 0.95,
    metrics: tuple[str, ...] = DEFAULT_METRICS,
    reps: int = REPS,
    min_count: int = MIN_COUNT,
    min_effect_ns: float = MIN_EFFECT_NS,
    min_effect_iops: float = MIN_EFFECT_IOPS,
) -> Comparison:
    """One candidate against the base: per device model, op and stream, every metric with
    its interval; `regression` where a gated metric got worse beyond the noise, the
    threshold and the minimum effect."""
    comparable, paired = workloads.pairing(base, cand)
    kb, kc = _device_keys(store, base["id"]), _device_keys(store, cand["id"])
    rb = analyses.hist_rows(store, base["id"], fb, "device")
    rc = analyses.hist_rows(store, cand["id"], fc, "device")
    models_b = {kb.get(r[0], ("", ""))[0] for r in rb}
    models_c = {kc.get(r[0], ("", ""))[0] for r in rc}
    by_model = models_b == models_c
    gb, gc = _grouped(rb, kb, by_model), _grouped(rc, kc, by_model)
    ops, streams = schemas.op_names(), analyses.stream_names(store, cand["id"])
    rng = np.random.default_rng(12345)
    pending: list[_Pending] = []
    span_b, span_c = span_s(base, fb), span_s(cand, fc)
    groups: dict[str, dict] = {}
    for key in sorted(set(gb) & set(gc)):
        model, op, st = key
        hb, hc = merge(gb[key]), merge(gc[key])
        g = groups.setdefault(
            model,
            {
                "model": model if by_model else ", ".join(sorted(models_b | models_c)),
                "base_firmware": _firmware(rb, kb, model),
                "candidate_firmware": _firmware(rc, kc, model),
                "rows": [],
            },
        )
        spans = (span_b, span_c)
        items = _metrics(hb, hc, spans, metrics, reps, min_count, rng, pending)
        row: dict[str, Any] = {
            "op": op,
            "op_name": ops.get(op, str(op)),
            "stream": st,
            "stream_name": streams.get(st, f"stream-{st}"),
            "base_count": hb.count,
            "candidate_count": hc.count,
            "metrics": items,
            # The percentiles as this endpoint has always given them.
            "percentiles": [_legacy(it) for it in items[: len(LEVELS)]],
        }
        g["rows"].append(row)
    gate = Gate(threshold_pct, min_effect_ns, min_effect_iops)
    tests, z = _judge_all(groups, pending, confidence, gate, comparable)
    return {
        "base": {"id": base["id"], "name": base["name"]},
        "candidate": {"id": cand["id"], "name": cand["name"]},
        "metric": "device time (ns)",
        "comparable": comparable,
        "workload": paired,
        "paired_by": "device model" if by_model else "all devices (the runs' models differ)",
        "confidence": confidence,
        "intervals": f"simultaneous over the {tests} gated tests (Bonferroni): change ± "
        f"{z:.2f} standard errors (bootstrap; Poisson for IOPS)",
        "bootstrap_resamples": reps,
        "threshold_pct": threshold_pct,
        "min_effect_ns": min_effect_ns,
        "min_effect_iops": min_effect_iops,
        "metrics": list(metrics),
        "histogram_scheme": SCHEME,
        "regression": any(r["regression"] for g in groups.values() for r in g["rows"]),
        "groups": cast(list[ComparisonGroup], list(groups.values())),
    }


def compare_many(
    store: Reader,
    base_ref: str,
    cand_refs: list[str],
    args: analyses.FilterArgs,
    threshold_pct: float = 5.0,
    confidence: float = 0.95,
    metrics: tuple[str, ...] = DEFAULT_METRICS,
    mode: str = "performance",
    min_effect_ns: float = MIN_EFFECT_NS,
    min_effect_iops: float = MIN_EFFECT_IOPS,
) -> ComparisonSet:
    """The base against each candidate (the same filters on every run), each run's
    Jetstress verdict, and `regression`: any comparable candidate regressed.

    Raises IotapeError for a run that does not exist, BadInput for a filter a run
    cannot take."""
    if not cand_refs:
        raise BadInput("no candidate run: give one or more after the base")
    base = analyses.find_run(store, base_ref)
    cands = [analyses.find_run(store, r) for r in cand_refs]
    fb = analyses.resolve_filter(store, base["id"], args)
    out = []
    for c in cands:
        fc = analyses.resolve_filter(store, c["id"], args)
        r = compare(store, base, c, fb, fc, threshold_pct, confidence, metrics,
                    min_effect_ns=min_effect_ns, min_effect_iops=min_effect_iops)  # fmt: skip
        r["verdict"] = _verdict(store, c["id"], fc, mode)
        out.append(r)
    return {
        "base": {
            "id": base["id"],
            "name": base["name"],
            "verdict": _verdict(store, base["id"], fb, mode),
        },
        "filter": analyses.describe_filter(fb),
        "threshold_pct": threshold_pct,
        "min_effect_ns": min_effect_ns,
        "min_effect_iops": min_effect_iops,
        "confidence": confidence,
        "metrics": list(metrics),
        "mode": mode,
        "comparable": all(r["comparable"] for r in out),
        "regression": any(r["regression"] for r in out),
        "candidates": out,
    }


def _verdict(store: Reader, run_id: str, f: EventFilter, mode: str) -> RunVerdict:
    v = jetstress.verdict(store, run_id, f, mode)
    return {"result": v["result"], "checks": v["checks"]}


LABELS = {"noise": "noise", "threshold": "threshold", "min_effect": "min effect"}


def reason(it: Mapping[str, Any], fmt: Callable[[float, str], str]) -> str:
    """Which bar decided a judged metric, in words: `within min effect (10.0 µs)`
    or, for a flagged one, `over noise (4.2 µs)` (the highest bar it beat);
    `fmt(value, unit)` writes the bar."""
    if it["decided_by"] is None:
        return "not judged"
    word = "over" if it["regression"] or it["improvement"] else "within"
    bar = "no base" if it["min_change"] is None else fmt(it["min_change"], it["unit"])
    return f"{word} {LABELS[it['decided_by']]} ({bar})"


def regressions(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every flagged metric of a `compare` or `compare_many` result, one dict each."""
    cands = result.get("candidates", [result])
    out = []
    for c in cands:
        for g in c["groups"]:
            for r in g["rows"]:
                for it in r["metrics"]:
                    if it["regression"]:
                        out.append(
                            # `run`, not `candidate`: the metric's own `candidate`
                            # key is the candidate's value.
                            {**it, "run": c["candidate"]["name"], "model": g["model"],
                             "op": r["op_name"], "stream": r["stream_name"]}
                        )  # fmt: skip
    return out
