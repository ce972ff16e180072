"""Latency distributions of a run: device and queue time, overall and per op and
stream, from the histograms or (`exact=True`) as exact order statistics."""

from __future__ import annotations

from typing import cast

import schemas
from analyzer.analyses import exact_select
from analyzer.analyses.exact_select import ALL
from analyzer.analyses.filters import stream_names
from analyzer.analyses.histograms import LEVELS, SCHEME, excluded, hist_rows, merge, summary
from analyzer.store import queries
from analyzer.store.interface import Reader
from analyzer.store.queries import EventFilter
from schemas.documents.api import (
    Distribution,
    GroupDistribution,
    Latency,
    MetricLatency,
    Percentiles,
)


def latency(
    store: Reader, run_id: str, f: EventFilter, exact: bool = False, cdf_points: int = 200
) -> Latency:
    """Device and queue time: overall and per op and stream."""
    ops = schemas.op_names()
    streams = stream_names(store, run_id)
    out: dict[str, MetricLatency] = {}
    hists = {m: hist_rows(store, run_id, f, m) for m in ("device", "queue")}
    # Each group's histogram merged once, for the summaries and the exact selection.
    merged = {m: exact_select.grouped(rows) for m, rows in hists.items()}
    exact_rows: dict[str, list[dict]] = {}
    unseen: list[tuple[int, int, int]] | None = None
    if exact:
        # Selected inside the histograms' buckets where it can (exact_select), else
        # both metrics' exact statistics in one query: one read of the events either
        # way, which counts the complete_unseen records too (the
        # exact query: on DuckDB only).
        found = exact_select.select(store, run_id, f, hists, merged)
        if found is not None:
            exact_rows, unseen = found
        else:
            exact_rows = _exact_rows(store, run_id, f)
            unseen = _unseen(exact_rows.get("device"))
    for metric in ("device", "queue"):
        by_key = merged[metric]
        overall = summary(by_key.get(ALL) or merge([]), cdf_points)
        per: list[GroupDistribution] = [
            {
                "op": op,
                "op_name": ops.get(op, str(op)),
                "stream": st,
                "stream_name": streams.get(st, f"stream-{st}"),
                **summary(h, cdf_points),
            }
            for (op, st), h in by_key.items()
            if (op, st) != ALL
        ]
        if exact:
            _exact_into(exact_rows.get(metric, []), overall, per)
        out[metric] = {"all": overall, "groups": per}
    return {
        "method": "exact" if exact else "histogram",
        "histogram_scheme": SCHEME,
        "units": "ns",
        "device_time": "complete - issue (at the device); complete_unseen records left out",
        "queue_time": "issue - queue (in the block layer before dispatch)",
        "device": out["device"],
        "queue": out["queue"],
        "excluded": excluded(store, run_id, f, counted=unseen),
    }


def _exact_rows(store: Reader, run_id: str, f: EventFilter) -> dict[str, list[dict]]:
    """The exact statistics of each metric, by (op, stream), (-1, -1) for all."""
    levels = (n for _, n in queries.EXACT_LEVELS)
    cols = ["metric", "op", "stream", "n", "s", "lo", "hi", *levels, "unseen"]
    out: dict[str, list[dict]] = {"device": [], "queue": []}
    for r in queries.records(store, "exact_latency", cols, **f.params(run_id)):
        out[("device", "queue")[int(r["metric"])]].append(r)
    return out


def _unseen(rows: list[dict] | None) -> list[tuple[int, int, int]] | None:
    """unseen_count's rows (op, stream, n: n > 0, in order) from the exact query's
    device rows; None where it did not count them (or gave no rows)."""
    if not rows or any(r["unseen"] is None for r in rows):
        return None
    return sorted((r["op"], r["stream"], r["unseen"]) for r in rows if r["op"] >= 0 and r["unseen"])


def _exact_into(rows: list[dict], overall: Distribution, per: list[GroupDistribution]) -> None:
    """Replace histogram percentiles by exact order statistics."""
    names = [n for _, n in LEVELS]
    exact = {(r["op"], r["stream"]): r for r in rows}

    def pcts(key: tuple[int, int]) -> Percentiles | None:
        r = exact.get(key)
        if not (r and r["n"]):
            return None
        levels = zip(names, queries.EXACT_LEVELS, strict=True)
        found = {**{name: float(r[col]) for name, (_, col) in levels}, "max": float(r["hi"])}
        return cast(Percentiles, found)

    if (found := pcts((-1, -1))) is not None:
        overall["percentiles"] = found
    for g in per:
        if (found := pcts((g["op"], g["stream"]))) is not None:
            g["percentiles"] = found
