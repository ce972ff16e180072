"""What the server answers, without HTTP, by module: filters (filters.py), latency
distributions (latency.py, from histograms.py), time series and heat maps
(timeseries.py), run-vs-run comparisons (comparison.py), history (history.py); here,
Jetstress verdicts and a run's catalog entry. The names of those modules are
re-exported here for callers that take them from `core`.

Bad input raises `BadInput` (the routes make it a 422); a run that does not exist
raises `IotapeError` from the catalog (a 404).
"""

from __future__ import annotations

from typing import Any

import schemas
from analyzer.analyses.filters import (
    BadInput,
    FilterArgs,
    describe_filter,
    devices,
    resolve_filter,
    stream_names,
)
from analyzer.analyses.histograms import (
    CACHE_SIZE,
    LEVELS,
    RELATIVE_ERROR,
    SCHEME,
    SUB_BUCKETS,
    Hist,
    bucket_edges,
    bucket_of,
    hist_rows,
    merge,
    percentiles_from,
    prewarm,
    rank,
    representative,
    summary,
)
from analyzer.analyses.latency import latency
from analyzer.analyses.timeseries import MAX_INTERVALS, heatmap, timeseries
from analyzer.store import catalog, queries
from analyzer.store.interface import Reader, Store
from analyzer.store.queries import EventFilter

__all__ = [
    "CACHE_SIZE",
    "LEVELS",
    "MAX_INTERVALS",
    "RELATIVE_ERROR",
    "SCHEME",
    "SUB_BUCKETS",
    "BadInput",
    "EventFilter",
    "FilterArgs",
    "Hist",
    "bucket_edges",
    "bucket_of",
    "describe_filter",
    "devices",
    "find_run",
    "heatmap",
    "hist_rows",
    "latency",
    "merge",
    "percentiles_from",
    "prewarm",
    "rank",
    "representative",
    "resolve_filter",
    "run_summary",
    "stream_names",
    "summary",
    "thresholds",
    "timeseries",
    "verdict",
]


# ------------------------------------------------------------------ verdict


def thresholds(mode: str) -> dict[str, float]:
    # The workload engine's copy of the reference thresholds: one source for both verdicts.
    from workload import profiles

    return profiles.thresholds(mode)


def verdict(store: Store, run_id: str, f: EventFilter, mode: str) -> dict[str, Any]:
    """Jetstress-style checks on the db-read and log-write streams, overall and per device."""
    th = thresholds(mode)
    ids = schemas.enum("stream")
    rows = hist_rows(store, run_id, f, "device")
    names = {d["dev"]: d["name"] for d in devices(store, run_id)}

    def checks(rs: list[tuple]) -> list[dict]:
        out = []
        for stream, key in (("db-read", "db_read"), ("log-write", "log_write")):
            sel = [r for r in rs if r[2] == ids[stream]]
            n = sum(r[4] for r in sel)
            avg = sum(r[5] for r in sel) / n / 1e6 if n else None
            mx = max(r[7] for r in sel) / 1e6 if n else None
            for what, value in (("avg", avg), ("max", mx)):
                limit = th[f"{key}_{what}_ms"]
                out.append(
                    {
                        "check": f"{stream} {what} ms",
                        "value": value,
                        "limit": limit,
                        "requests": n,
                        "pass": None if value is None else value <= limit,
                    }
                )
        return out

    def result(cs: list[dict]) -> str:
        known = [c["pass"] for c in cs if c["pass"] is not None]
        if not known:
            return "unknown"
        return "pass" if all(known) else "fail"

    overall = checks(rows)
    per_dev = []
    for dev in sorted({r[0] for r in rows}):
        cs = checks([r for r in rows if r[0] == dev])
        if any(c["requests"] for c in cs):
            per_dev.append({"dev": dev, "name": names.get(dev, str(dev)), "result": result(cs),
                            "checks": cs})  # fmt: skip
    cols = ["database", "target_iops", "achieved_iops", "db_read_avg_ms", "db_write_avg_ms"]
    cols += ["log_write_avg_ms", "verdict"]
    reported = queries.records(store, "workload_reports", cols, run_id=run_id)
    return {
        "mode": mode,
        "thresholds": th,
        "result": result(overall),
        "why": None
        if result(overall) != "unknown"
        else "no requests labelled db-read or log-write in this selection",
        "checks": overall,
        "per_device": per_dev,
        "per_database": reported,
    }


def run_summary(store: Reader, run: dict, f: EventFilter | None = None) -> dict[str, Any]:
    """A catalog entry for the API: the run, its devices and streams, and what matches `f`."""
    out = {k: v for k, v in run.items() if k not in ("header", "version", "state")}
    out["devices"] = devices(store, run["id"])
    out["streams"] = [
        {"stream": k, "name": v} for k, v in sorted(stream_names(store, run["id"]).items())
    ]
    if f is not None and not f.is_any():
        ios, nbytes = queries.run(store, "filtered_totals", **f.params(run["id"]))[0]
        out["matching"] = {"ios": int(ios), "bytes": int(nbytes or 0), "filter": describe_filter(f)}
    return out


def find_run(store: Reader, ref: str) -> dict:
    """The visible run named by id, unique id prefix or name (IotapeError if none)."""
    return catalog.resolve(store, ref)
