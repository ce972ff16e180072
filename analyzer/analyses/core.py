"""What the server answers, without HTTP, by module: filters (filters.py), latency
distributions (latency.py, from histograms.py), time series and heat maps
(timeseries.py), Jetstress verdicts (verdict.py), run-vs-run comparisons
(comparison.py), history (history.py); here, a run's catalog entry. The names of those modules are
re-exported here for callers that take them from `core`.

Bad input raises `BadInput` (the routes make it a 422); a run that does not exist
raises `IotapeError` from the catalog (a 404).
"""

from __future__ import annotations

from typing import cast

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
from analyzer.store.interface import Reader
from analyzer.store.queries import EventFilter
from schemas.documents.api import RunSummary

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
    "timeseries",
]


def run_summary(store: Reader, run: dict, f: EventFilter | None = None) -> RunSummary:
    """A catalog entry for the API: the run, its devices and streams, and what matches `f`."""
    out = {k: v for k, v in run.items() if k not in ("header", "version", "state")}
    out["devices"] = devices(store, run["id"])
    out["streams"] = [
        {"stream": k, "name": v} for k, v in sorted(stream_names(store, run["id"]).items())
    ]
    if f is not None and not f.is_any():
        ios, nbytes = queries.run(store, "filtered_totals", **f.params(run["id"]))[0]
        out["matching"] = {"ios": int(ios), "bytes": int(nbytes or 0), "filter": describe_filter(f)}
    return cast(RunSummary, out)


def find_run(store: Reader, ref: str) -> dict:
    """The visible run named by id, unique id prefix or name (IotapeError if none)."""
    return catalog.resolve(store, ref)
