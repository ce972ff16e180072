"""Two ingested runs for the API and dashboard tests: a base and a candidate whose
firmware made log writes slower."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
from trace_helpers import header, workload_records

from analyzer.store.ingest import ingest
from analyzer.store.opener import open_store
from recorder.tracefile import TraceWriter

N = 4000


def records(seed: int, write_factor: float = 1.0) -> np.ndarray:
    r = workload_records(N, seed=seed)
    rng = np.random.default_rng(seed + 100)
    # Log-normal device times around 200 µs; queue times around 20 µs.
    lat = rng.lognormal(np.log(200_000), 0.5, size=N)
    lat = np.where(r["op"] == 1, lat * write_factor, lat).astype(np.uint64)
    r["ts_queue_ns"] = np.sort(rng.integers(1, 2 * 10**9, size=N)).astype(np.uint64)
    r["ts_issue_ns"] = r["ts_queue_ns"] + rng.lognormal(np.log(20_000), 0.3, size=N).astype(
        np.uint64
    )
    r["ts_complete_ns"] = r["ts_issue_ns"] + lat
    order = np.argsort(r["ts_complete_ns"], kind="stable")
    return r[order]


def write(path: Path, recs: np.ndarray, firmware: str) -> Path:
    h = header()
    h["devices"] = copy.deepcopy(h["devices"])
    for d in h["devices"]:
        d["firmware"] = firmware
    with TraceWriter(path, h, chunk_records=1000) as w:
        w.write(recs)
        w.close({"stop_reason": "duration", "lost": {}, "pre_start": 0})
    return path


def build_store(tmp: Path, url: str | None = None) -> tuple[str, dict[str, np.ndarray]]:
    """A store with runs `base` (firmware A1), `cand` (B2, writes 1.6x slower) and `slow`."""
    url = url or f"duckdb://{tmp}/api.duckdb"
    base, cand = records(1), records(2, write_factor=1.6)
    # Every request 100x slower: log writes far over Jetstress's 10 ms average.
    slow = records(3, write_factor=1.0)
    slow["ts_complete_ns"] = (
        slow["ts_issue_ns"] + (slow["ts_complete_ns"] - slow["ts_issue_ns"]) * 100
    )
    slow = slow[np.argsort(slow["ts_complete_ns"], kind="stable")]
    s = open_store(url)
    try:
        ingest(s, write(tmp / "base.iot", base, "A1"), name="base")
        ingest(s, write(tmp / "cand.iot", cand, "B2"), name="cand")
        ingest(s, write(tmp / "slow.iot", slow, "A1"), name="slow")
    finally:
        s.close()
    return url, {"base": base, "cand": cand, "slow": slow}
