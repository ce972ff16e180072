"""Synthetic runs for the regression-tracking tests (issue 17): log-normal device times,
a write slowdown, firmware versions with a step."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
from trace_helpers import header, workload_records

from analyzer.store.ingest import ingest
from analyzer.store.opener import open_store
from recorder.tracefile import TraceWriter

N = 20_000


def records(seed: int, factor: float = 1.0, write_factor: float = 1.0, n: int = N) -> np.ndarray:
    """Requests over 10 s; device time log-normal around 200 µs (x factor; writes also
    x write_factor)."""
    r = workload_records(n, seed=seed)
    rng = np.random.default_rng(seed + 100)
    lat = rng.lognormal(np.log(200_000), 0.4, size=n) * factor
    lat = np.where(r["op"] == 1, lat * write_factor, lat).astype(np.uint64)
    r["ts_queue_ns"] = np.sort(rng.integers(1, 10 * 10**9, size=n)).astype(np.uint64)
    r["ts_issue_ns"] = r["ts_queue_ns"] + 10_000
    r["ts_complete_ns"] = r["ts_issue_ns"] + lat
    return r[np.argsort(r["ts_complete_ns"], kind="stable")]


def write(path: Path, recs: np.ndarray, firmware: str, metadata: dict | None = None) -> Path:
    h = header()
    h["devices"] = copy.deepcopy(h["devices"])
    for d in h["devices"]:
        d["firmware"] = firmware
    if metadata:
        h["metadata"] = metadata
    with TraceWriter(path, h, chunk_records=4096) as w:
        w.write(recs)
        w.close({"stop_reason": "duration", "lost": {}, "pre_start": 0})
    return path


def firmware_store(tmp: Path) -> str:
    """Six firmware versions, two runs each; from version 4 on every request is 1.5x slower."""
    url = f"duckdb://{tmp}/fw.duckdb"
    s = open_store(url)
    try:
        for v in range(1, 7):
            for rep in range(2):
                recs = records(10 * v + rep, factor=1.5 if v >= 4 else 1.0, n=8000)
                path = write(tmp / f"v{v}-{rep}.iot", recs, f"FW{v}.0")
                ingest(s, path, name=f"v{v}-{rep}", tags={"firmware": f"{v}.0"})
    finally:
        s.close()
    return url
