"""Latency distributions of a run: device and queue time, overall and per op and
stream, from the histograms or (`exact=True`) as exact order statistics."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import schemas
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
    hists: dict[str, list[tuple]] = {}
    exact_rows: dict[str, list[dict]] = {}
    if exact:
        # Both metrics' exact statistics in one query: one read of the events, which
        # counts the complete_unseen records too where it can (DuckDB). It runs on
        # this store (the one a server's time limit interrupts) while the
        # histograms are read and merged beside it (DuckDB lets go of the GIL).
        with _beside(store, lambda s: _hists(s, run_id, f)) as got:
            exact_rows = _exact_rows(store, run_id, f)
        hists = got()
    else:
        hists = _hists(store, run_id, f)
    for metric in ("device", "queue"):
        rows = hists[metric]
        groups: dict[tuple[int, int], list[tuple]] = {}
        for r in rows:
            groups.setdefault((r[1], r[2]), []).append(r)
        overall = summary(merge(rows), cdf_points)
        per: list[GroupDistribution] = [
            {
                "op": op,
                "op_name": ops.get(op, str(op)),
                "stream": st,
                "stream_name": streams.get(st, f"stream-{st}"),
                **summary(merge(g), cdf_points),
            }
            for (op, st), g in sorted(groups.items())
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
        "excluded": excluded(store, run_id, f, counted=_unseen(exact_rows.get("device"))),
    }


def _hists(store: Reader, run_id: str, f: EventFilter) -> dict[str, list[tuple]]:
    return {m: hist_rows(store, run_id, f, m) for m in ("device", "queue")}


@contextlib.contextmanager
def _beside(store: Reader, fn: Callable[[Any], Any]) -> Iterator[Callable[[], Any]]:
    """Run fn(store) on a thread with a cursor of its own while the body runs; yields
    what gives its result (or raises its error) once the body is done. A store that
    shares one connection between threads (ClickHouse) runs it after the body."""
    per_request = getattr(store, "per_request", None)
    if getattr(store, "shared", True) or per_request is None:
        done: list[Any] = []
        yield lambda: done[0]
        done.append(fn(store))
        return
    result: list[Any] = []
    error: list[BaseException] = []

    def work() -> None:
        try:
            with per_request() as own:
                result.append(fn(own))
        except BaseException as e:  # handed to the caller
            error.append(e)

    t = threading.Thread(target=work, name="iotape-latency-hists", daemon=True)
    t.start()

    def get() -> Any:
        if error:
            raise error[0]
        return result[0]

    try:
        yield get
    finally:
        t.join()


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
