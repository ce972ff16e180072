"""A run over time: IOPS, MB/s, queue depth and latency per interval, and requests
over (time x offset) as a heat map per device."""

from __future__ import annotations

from analyzer.analyses.filters import BadInput, devices
from analyzer.store import queries
from analyzer.store.interface import Reader
from analyzer.store.queries import EventFilter
from schemas.documents.api import DeviceHeatmap, Heatmap, Point, Timeseries

MAX_INTERVALS = 20_000


def timeseries(store: Reader, run: dict, f: EventFilter, interval_s: float | None) -> Timeseries:
    """IOPS, MB/s, mean queue depth and device latency per interval of completion time."""
    duration = max(int(run["duration_ns"]), 1)
    if interval_s is None:
        # About 200 points, on a round number of milliseconds.
        interval_ns = max(1_000_000, round(duration / 200 / 1e6) * 1_000_000)
    else:
        interval_ns = round(interval_s * 1e9)
        if interval_ns < 1000:
            raise BadInput(f"interval {interval_s} s: the shortest is 1 µs (0.000001)")
    span = min(duration, f.t_to_ns) - min(f.t_from_ns, duration)
    if span // interval_ns + 1 > MAX_INTERVALS:
        raise BadInput(
            f"interval {interval_ns / 1e9:g} s gives more than {MAX_INTERVALS} points over "
            f"{span / 1e9:g} s; give a longer interval or a shorter time window"
        )
    cols = ["k", "ios", "bytes", "nlat", "slat", "max", "p50", "p99"]
    rows = queries.records(store, "timeseries", cols, step=interval_ns, **f.params(run["id"]))
    by_k = {r["k"]: r for r in rows}
    points: list[Point] = []
    secs = interval_ns / 1e9
    if rows:
        for k in range(rows[0]["k"], rows[-1]["k"] + 1):
            r = by_k.get(k)
            if r is None:
                points.append({"t_s": k * secs, "iops": 0.0, "mb_s": 0.0, "queue_depth": 0.0,
                               "lat_mean_ns": None, "p50_ns": None, "p99_ns": None,
                               "max_ns": None})  # fmt: skip
                continue
            has = r["nlat"] > 0
            points.append(
                {
                    "t_s": k * secs,
                    "iops": r["ios"] / secs,
                    "mb_s": r["bytes"] / secs / 1e6,
                    # Little's law: time spent at the device per second of wall time.
                    "queue_depth": (r["slat"] or 0) / interval_ns,
                    "lat_mean_ns": r["slat"] / r["nlat"] if has else None,
                    "p50_ns": r["p50"] if has else None,
                    "p99_ns": r["p99"] if has else None,
                    "max_ns": r["max"] if has else None,
                }
            )
    return {
        "interval_s": secs,
        "queue_depth": "mean requests at the device (Little's law: device time / interval)",
        "points": points,
    }


# ------------------------------------------------------------------ heat map


def heatmap(
    store: Reader, run_id: str, f: EventFilter, time_bins: int, offset_bins: int
) -> Heatmap:
    """Requests and bytes over (completion time x offset), one grid per device."""
    names = {d["dev"]: d["name"] for d in devices(store, run_id)}
    cols = ["dev", "ios", "t_lo", "t_hi", "o_lo", "o_hi"]
    out: list[DeviceHeatmap] = []
    for ext in queries.records(store, "extent_by_dev", cols, **f.params(run_id)):
        t_step = max(1, -(-(ext["t_hi"] - ext["t_lo"] + 1) // time_bins))
        o_step = max(1, -(-(ext["o_hi"] - ext["o_lo"] + 1) // offset_bins))
        p = {**f.params(run_id), "dev": ext["dev"]}
        cells = queries.run(
            store, "heatmap", t0=ext["t_lo"], t_step=t_step, o0=ext["o_lo"], o_step=o_step, **p
        )
        out.append(
            {
                "dev": ext["dev"],
                "name": names.get(ext["dev"], f"{ext['dev'] >> 20}:{ext['dev'] & 0xFFFFF}"),
                "ios": ext["ios"],
                "t0_s": ext["t_lo"] / 1e9,
                "t_step_s": t_step / 1e9,
                "offset0": ext["o_lo"],
                "offset_step": o_step,
                "time_bins": time_bins,
                "offset_bins": offset_bins,
                "cells": [[int(a), int(b), int(c), int(d)] for a, b, c, d in cells],
            }
        )
    return {"cells": "[time bin, offset bin, requests, bytes]", "devices": out}
