"""A device model across firmware versions: percentiles, mean and IOPS per version, with
intervals, and the versions where they changed.

Every visible run with a device of the model counts; only that model's devices'
requests are looked at. A run's version is the firmware its devices of the model
report (the trace's device table), or the value of a tag (`tag="firmware"`, as
`iotape ingest --tag firmware=X` sets it). Repeated runs of one version pool into
its interval: a bootstrap that resamples runs, then events within each (requests
in a run are not independent of the run, so run-to-run spread belongs in the
interval); IOPS per run is taken as Poisson. Change points come from E-Divisive
(changepoint.py) over the per-run values, split only between versions.
"""

from __future__ import annotations

import re
from typing import Any, cast

import numpy as np

import schemas
from analyzer.analyses import changepoint
from analyzer.analyses import core as analyses
from analyzer.analyses.comparison import METRICS, span_s
from analyzer.analyses.filters import BadInput, FilterArgs
from analyzer.analyses.histograms import LEVELS, Hist, merge
from analyzer.store import catalog
from analyzer.store.interface import Reader
from schemas.documents.api import GivenFilter, History, HistoryGroup, HistoryPoint, Skipped

REPS = 200
DEFAULT_CHANGE_METRICS = ("p50", "p99", "mean", "iops")


def version_key(v: str) -> tuple:
    """Natural order: 1.9 before 1.10, GDC5 before GDC10; numbers before letters."""
    return tuple((0, int(p), "") if p.isdecimal() else (1, 0, p) for p in re.findall(r"\d+|\D+", v))


def _runs_of_model(store: Reader, model: str, tag: str | None) -> tuple[list[dict], list[Skipped]]:
    """(runs with their version and devices of the model, skipped runs with why)."""
    runs: list[dict] = []
    skipped: list[Skipped] = []
    for run in catalog.all_runs(store):
        devs = [d for d in analyses.devices(store, run["id"]) if d["model"] == model]
        if not devs:
            continue
        if tag is not None:
            version = run["tags"].get(tag)
            if version is None:
                skipped.append({"run": run["name"], "why": f"no tag {tag!r}"})
                continue
        else:
            version = "+".join(sorted({d["firmware"] or "?" for d in devs}))
        runs.append({"run": run, "version": str(version), "devs": {d["dev"] for d in devs}})
    return runs, skipped


def _run_groups(store: Reader, r: dict, args: FilterArgs) -> dict[tuple[str, str], Hist] | None:
    """Histograms per (op name, stream name) of the run's devices of the model; None
    when the run has no such stream as the filter names."""
    run = r["run"]
    try:
        f = analyses.resolve_filter(
            store, run["id"], FilterArgs(**{**args.__dict__, "device": None})
        )
    except BadInput as e:
        if str(e).startswith("stream"):
            return None
        raise
    ops, streams = schemas.op_names(), analyses.stream_names(store, run["id"])
    rows = [x for x in analyses.hist_rows(store, run["id"], f, "device") if x[0] in r["devs"]]
    groups: dict[tuple[str, str], list[tuple]] = {}
    for x in rows:
        key = (ops.get(x[1], str(x[1])), streams.get(x[2], f"stream-{x[2]}"))
        groups.setdefault(key, []).append(x)
    r["span_s"] = span_s(run, f)
    return {k: merge(v) for k, v in groups.items()}


def _values(h: Hist, span_s: float) -> dict[str, float]:
    p = analyses.percentiles_from(h)
    out = {name: p[name] for _, name in LEVELS}
    out["mean"] = float(h.s.sum() / h.count)
    out["iops"] = h.count / span_s
    return out


def _pooled(hists: list[Hist], spans: list[float], confidence: float, rng) -> dict[str, Any]:
    """A version's values from its runs pooled, each with a bootstrap interval."""
    buckets = np.unique(np.concatenate([h.b for h in hists]))
    k = len(hists)
    counts = np.zeros((k, len(buckets)))
    sums = np.zeros(len(buckets))
    lo = np.full(len(buckets), np.iinfo(np.int64).max)
    hi = np.zeros(len(buckets), dtype=np.int64)
    for i, h in enumerate(hists):
        at = np.searchsorted(buckets, h.b)
        counts[i, at] = h.n
        sums[at] += h.s
        lo[at] = np.minimum(lo[at], h.lo)
        hi[at] = np.maximum(hi[at], h.hi)
    n_total = counts.sum(axis=1)
    pooled = Hist(buckets, counts.sum(axis=0).astype(np.int64), sums, lo, hi)
    point = _values(pooled, sum(spans) / k)
    point["iops"] = float(np.mean([h.count / s for h, s in zip(hists, spans, strict=True)]))
    rep = analyses.representative(pooled)
    bmean = np.divide(sums, pooled.n, out=np.zeros_like(sums), where=pooled.n > 0)
    # Resample runs (k of k with replacement), then each chosen run's events.
    samples = np.stack([rng.multinomial(int(n_total[i]), counts[i] / n_total[i], size=REPS)
                        for i in range(k)])  # fmt: skip
    pick = rng.integers(0, k, size=(REPS, k)) if k > 1 else np.zeros((REPS, 1), dtype=np.int64)
    boot = samples[pick, np.arange(REPS)[:, None], :].sum(axis=1)
    n = boot.sum(axis=1)
    cum = np.cumsum(boot, axis=1)
    alpha = (1 - confidence) / 2
    out: dict[str, Any] = {}
    for q, name in LEVELS:
        ranks = np.maximum(1, np.ceil(n * q - 1e-9))
        idx = (cum < ranks[:, None]).sum(axis=1)
        out[name] = rep[np.minimum(idx, len(rep) - 1)]
    out["mean"] = boot @ bmean / n
    span = np.asarray(spans)
    pois = rng.poisson(n_total[pick]) / span[pick]
    out["iops"] = pois.mean(axis=1)
    result = {}
    for m in METRICS:
        a, b = np.quantile(out[m], [alpha, 1 - alpha])
        result[m] = {"value": point[m], "ci_low": float(a), "ci_high": float(b)}
    return result


def _order_versions(runs: list[dict], order: str) -> tuple[list[str], dict[str, int]]:
    """The versions in `order`, with each one's first run start; sorts `runs` so."""
    first: dict[str, int] = {}
    for r in runs:
        first[r["version"]] = min(
            first.get(r["version"], r["run"]["start_ns"]), r["run"]["start_ns"]
        )
    if order == "version":
        versions = sorted(first, key=version_key)
    else:
        versions = sorted(first, key=lambda v: (first[v], version_key(v)))
    rank = {v: i for i, v in enumerate(versions)}
    runs.sort(key=lambda r: (rank[r["version"]], r["run"]["start_ns"], r["run"]["id"]))
    return versions, first


def _group(
    key: tuple[str, str],
    runs: list[dict],
    versions: list[str],
    confidence: float,
    rng: np.random.Generator,
    cp: tuple[tuple[str, ...], float, float],
) -> HistoryGroup:
    """One op and stream: each version's pooled values, and the change points."""
    change_metrics, max_pvalue, min_change_pct = cp
    have = [r for r in runs if r["groups"] and key in r["groups"]]
    points: list[HistoryPoint] = []
    for v in versions:
        mine = [r for r in have if r["version"] == v]
        if not mine:
            continue
        hs = [r["groups"][key] for r in mine]
        spans = [r["span_s"] for r in mine]
        point = {"version": v, "runs": [r["run"]["name"] for r in mine],
                 "count": int(sum(h.count for h in hs)),
                 **_pooled(hs, spans, confidence, rng)}  # fmt: skip
        points.append(cast(HistoryPoint, point))
    per_run = [_values(r["groups"][key], r["span_s"]) for r in have]
    allowed = [i for i in range(1, len(have)) if have[i]["version"] != have[i - 1]["version"]]
    changes: dict[str, list] = {}
    for m in change_metrics:
        found = changepoint.e_divisive([x[m] for x in per_run], allowed, max_pvalue, min_change_pct)
        changes[m] = [{"version": have[c["index"]]["version"],
                       "previous_version": have[c["index"] - 1]["version"],
                       **{k: c[k] for k in ("before", "after", "change_pct", "p_value")}}
                      for c in found]  # fmt: skip
    return {"op_name": key[0], "stream_name": key[1], "points": points,
            "change_points": changes}  # fmt: skip


def history(
    store: Reader,
    model: str,
    tag: str | None = None,
    args: FilterArgs | None = None,
    order: str = "version",
    confidence: float = 0.95,
    change_metrics: tuple[str, ...] = DEFAULT_CHANGE_METRICS,
    max_pvalue: float = changepoint.MAX_PVALUE,
    min_change_pct: float = changepoint.MIN_CHANGE_PCT,
) -> History:
    """Per op and stream, each version's values with intervals and the change points."""
    if order not in ("version", "time"):
        raise BadInput(f"order {order!r}: version or time")
    if not model:
        raise BadInput("model: give a device model (`iotape runs show RUN` lists them)")
    args = args or FilterArgs()
    runs, skipped = _runs_of_model(store, model, tag)
    if not runs:
        known = sorted({d["model"] for r in catalog.all_runs(store)
                        for d in analyses.devices(store, r["id"]) if d["model"]})  # fmt: skip
        raise BadInput(
            f"model {model!r}: no run has a device of this model"
            + (f" with tag {tag!r}" if tag and skipped else "")
            + f" (models in the store: {', '.join(known) or 'none'})"
        )
    for r in runs:
        r["groups"] = _run_groups(store, r, args)
    versions, first = _order_versions(runs, order)
    rng = np.random.default_rng(12345)
    keys = sorted({k for r in runs if r["groups"] for k in r["groups"]})
    cp = (change_metrics, max_pvalue, min_change_pct)
    groups = [_group(key, runs, versions, confidence, rng, cp) for key in keys]
    return {
        "model": model,
        "version_from": f"tag {tag}" if tag else "device firmware",
        "order": order,
        "confidence": confidence,
        "filter": cast(
            GivenFilter,
            {k: v for k, v in args.__dict__.items() if v is not None and k != "device"},
        ),
        "versions": [
            {
                "version": v,
                "first_start_ns": first[v],
                "runs": [r["run"]["name"] for r in runs if r["version"] == v],
            }
            for v in versions
        ],
        "method": {
            "intervals": "bootstrap: runs of a version resampled, then events within each run; "
            "IOPS per run Poisson",
            "change_points": "E-Divisive (Matteson & James 2014) over per-run values, split "
            "between versions only, each split kept when a two-sample Student t-test gives "
            f"p <= {max_pvalue:g} and the change is at least {min_change_pct:g} % "
            "(as Hunter / Apache Otava test them)",
            "change_metrics": list(change_metrics),
        },
        "skipped": skipped,
        "groups": groups,
    }
