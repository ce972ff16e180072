"""The Jetstress verdict of a run's trace: the latency of its requests labelled
db-read and log-write against the thresholds, overall and per device, with the
workload engine's own per-database report where the run has one. The checks and
thresholds are schemas.jetstress's, as the workload report's are."""

from __future__ import annotations

from typing import cast

import schemas
from analyzer.analyses.filters import devices
from analyzer.analyses.histograms import excluded, hist_rows
from analyzer.store import queries
from analyzer.store.interface import Reader
from analyzer.store.queries import EventFilter
from schemas import jetstress
from schemas.documents.api import DatabaseReport, DeviceVerdict, Verdict


def thresholds(mode: str) -> dict[str, float]:
    return jetstress.thresholds(mode)


def _figures(rows: list[tuple]) -> dict[str, jetstress.Figures]:
    """Per stream the checks name: requests, mean and max device time (ms) of
    (dev, op, stream, bucket, n, sum, min, max) histogram rows."""
    ids = schemas.enum("stream")
    out = {}
    for stream in {c["stream"] for c in schemas.contracts()["jetstress"]["check"]}:
        sel = [r for r in rows if r[2] == ids[stream]]
        n = sum(r[4] for r in sel)
        avg = sum(r[5] for r in sel) / n / 1e6 if n else None
        mx = max(r[7] for r in sel) / 1e6 if n else None
        out[stream] = jetstress.Figures(n, avg, mx)
    return out


def verdict(store: Reader, run_id: str, f: EventFilter, mode: str) -> Verdict:
    """Jetstress-style checks on the db-read and log-write streams, overall and per device."""
    rows = hist_rows(store, run_id, f, "device")
    names = {d["dev"]: d["name"] for d in devices(store, run_id)}
    overall = jetstress.checks(mode, _figures(rows))
    per_dev: list[DeviceVerdict] = []
    for dev in sorted({r[0] for r in rows}):
        cs = jetstress.checks(mode, _figures([r for r in rows if r[0] == dev]))
        if any(c["requests"] for c in cs):
            per_dev.append({"dev": dev, "name": names.get(dev, str(dev)),
                            "result": jetstress.result(cs), "checks": cs})  # fmt: skip
    cols = ["database", "target_iops", "achieved_iops", "db_read_avg_ms", "db_write_avg_ms"]
    cols += ["log_write_avg_ms", "verdict"]
    reported = cast(
        list[DatabaseReport], queries.records(store, "workload_reports", cols, run_id=run_id)
    )
    result = jetstress.result(overall)
    return {
        "mode": mode,
        "thresholds": thresholds(mode),
        "result": result,
        "why": None
        if result != "unknown"
        else "no requests labelled db-read or log-write in this selection",
        "checks": overall,
        "per_device": per_dev,
        "per_database": reported,
        "excluded": excluded(store, run_id, f, set(_checked_streams().values())),
    }


def _checked_streams() -> dict[str, int]:
    ids = schemas.enum("stream")
    return {c["stream"]: ids[c["stream"]] for c in schemas.contracts()["jetstress"]["check"]}
