"""How long the tier and the read cache of an `iotape lab hybrid` output take to warm
(issue 38: is the first part of a run a warm-up, and is `--warm-s` 0 right?), from a
finished output's recordings (no lab run): per configuration the database reads per
second and their mean block-layer latency in each window of the run, and the gain of
reads/s over the same round's baseline counted from the start (the peer: what the lab
reports) and with the first SKIP seconds of every configuration left out (what a run
warmed for SKIP seconds would have shown, were the rest unchanged), and the stored
predictions' errors against each.

    PYTHONPATH=$PWD .venv/bin/python bench/hybrid_warmup.py DIR [DIR ...]
        [--window 5] [--skip 10,15,30] [-o FILE]
    (no root; JSON on stdout or FILE; a few seconds a directory)

DIR: a one-round output (OUT/baseline.iot, tier.iot, cache.iot) or a `--rounds N`
output (each OUT/round-K counted as one).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import json_out
import numpy as np

import schemas
from recorder.tracefile import open_trace

CONFIGS = ("baseline", "tier", "cache")


def reads(trace: Path) -> tuple[np.ndarray, np.ndarray]:
    """Each database read's issue time (s from the recording's first request) and its
    block-layer latency (ms)."""
    with open_trace(trace) as tr:
        r = tr.read_all()
    mine = r["stream"] == schemas.enum("stream")["db-read"]
    t0 = r["ts_issue_ns"].min()
    issue = (r["ts_issue_ns"][mine] - t0) / 1e9
    return issue, (r["ts_complete_ns"][mine] - r["ts_issue_ns"][mine]) / 1e6


def windows(issue: np.ndarray, lat: np.ndarray, width: float, end: float) -> list[dict]:
    """Reads/s and mean latency per window of `width` seconds up to `end`."""
    out = []
    for a in np.arange(0.0, end, width):
        b = min(a + width, end)
        m = (issue >= a) & (issue < b)
        n = int(m.sum())
        out.append({"from_s": float(a), "to_s": float(b), "reads_per_s": n / (b - a),
                    "read_ms_avg": float(lat[m].mean()) if n else None})  # fmt: skip
    return out


def rate(issue: np.ndarray, skip: float, end: float) -> float:
    """Reads/s from `skip` to `end` (the load's end: the engine's seconds)."""
    return float(((issue >= skip) & (issue < end)).sum()) / (end - skip)


def one_round(d: Path, width: float, skips: list[float]) -> dict[str, Any]:
    rep = json.loads((d / "report.json").read_text())
    o = rep["options"]
    end = float(o["seconds"])
    got = {k: reads(d / f"{k}.iot") for k in CONFIGS if (d / f"{k}.iot").exists()}
    within = [0.0, *[s for s in skips if s < end]]
    rates = {k: {str(s): rate(i, s, end) for s in within} for k, (i, _) in got.items()}
    base = rates["baseline"]
    gain = {
        k: {s: r[s] / base[s] if base[s] else None for s in r}
        for k, r in rates.items()
        if k != "baseline"
    }
    return {
        "dir": str(d),
        "seconds": end,
        "warm_s": o.get("warm_s", 0.0),
        "windows": {k: windows(i, lat, width, end) for k, (i, lat) in got.items()},
        "reads_per_s": rates,
        # peer: skip 0 (the lab's own figure); variants: the first SKIP s left out
        "gain": gain,
        # each prediction's error (predicted / measured - 1) against each of them
        "error": {k: _both(rep["configs"][k].get("predicted") or {}, g) for k, g in gain.items()},
    }


def _both(pred: dict[str, Any], gains: dict[str, float | None]) -> dict[str, Any]:
    return {
        "model": _errors(pred.get("read_throughput_gain"), gains),
        "replay": _errors(pred.get("replayed_gain"), gains),
    }


def _errors(pred: float | None, gains: dict[str, float | None]) -> dict[str, float | None]:
    return {s: pred / g - 1 if pred is not None and g else None for s, g in gains.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--window", type=float, default=5.0, help="window width (s)")
    ap.add_argument("--skip", default="10,15,30", help="seconds left out at the start")
    ap.add_argument("-o", type=Path, help="write the JSON here")
    a = ap.parse_args()
    skips = [float(s) for s in a.skip.split(",") if s]
    rounds = [
        r for d in a.dirs for r in (sorted(d.glob("round-*"), key=lambda p: int(p.name[6:])) or [d])
    ]
    out = {"window_s": a.window, "skips": skips,
           "rounds": [one_round(r, a.window, skips) for r in rounds]}  # fmt: skip
    json_out.emit(out, a.o)


if __name__ == "__main__":
    main()
