"""Records flagged complete_unseen carry an upper bound of their completion, not a
measurement: every latency figure and the verdict leave them out and say how many."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from store_helpers import store_url
from trace_helpers import make_trace, workload_records

import schemas
from analyzer.analyses import histograms
from analyzer.analyses.latency import latency
from analyzer.analyses.verdict import verdict
from analyzer.store import event_histograms, queries
from analyzer.store.ingest import ingest
from analyzer.store.opener import open_store
from analyzer.store.queries import EventFilter

FLAG = {k: 1 << v for k, v in schemas.bits("flag").items()}
STREAM = schemas.enum("stream")
OP = schemas.enum("op")
MS = 1_000_000


@pytest.fixture
def unseen_trace(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """Log writes of 1-2 ms and db reads of 3-5 ms, and three log writes whose
    completion the kernel never reported (kept with 324 ms, an upper bound)."""
    r = workload_records(3000, seed=3)
    r["op"] = np.where(np.arange(len(r)) % 2, OP["write"], OP["read"])
    r["stream"] = np.where(r["op"] == OP["write"], STREAM["log-write"], STREAM["db-read"])
    rng = np.random.default_rng(5)
    lat = np.where(r["op"] == OP["write"], rng.integers(MS, 2 * MS, len(r)),
                   rng.integers(3 * MS, 5 * MS, len(r)))  # fmt: skip
    r["ts_complete_ns"] = r["ts_issue_ns"] + lat
    unseen = np.flatnonzero(r["op"] == OP["write"])[[10, 500, 1000]]
    r["ts_complete_ns"][unseen] = r["ts_issue_ns"][unseen] + 324 * MS
    r["flags"][unseen] |= FLAG["complete_unseen"]
    return make_trace(tmp_path / "u.iot", r, chunk_records=512), r


def test_latency_and_verdict_leave_out_complete_unseen(store, unseen_trace) -> None:
    path, r = unseen_trace
    run_id = ingest(store, path).run_id
    histograms.clear_cache()
    seen = (r["flags"] & FLAG["complete_unseen"]) == 0
    lw = (r["stream"] == STREAM["log-write"]) & seen
    want_max = int((r["ts_complete_ns"] - r["ts_issue_ns"])[lw].max())

    for exact in (False, True):
        lat = latency(store, run_id, EventFilter(), exact=exact)
        assert lat["device"]["all"]["count"] == int(seen.sum()) == len(r) - 3
        dev = r["ts_complete_ns"] - r["ts_issue_ns"]
        assert lat["device"]["all"]["max_ns"] == int(dev[seen].max()) < 5 * MS
        (g,) = [g for g in lat["device"]["groups"] if g["stream_name"] == "log-write"]
        assert g["count"] == int(lw.sum()) and g["max_ns"] == want_max < 2 * MS
        assert g["percentiles"]["max"] == want_max
        # Queue time is measured for them all: nothing of it is left out.
        assert lat["queue"]["all"]["count"] == len(r)
        ex = lat["excluded"]
        assert ex["complete_unseen"] == 3 and "upper bound" in ex["why"]
        assert [(g["op_name"], g["stream_name"], g["count"]) for g in ex["groups"]] == [
            ("write", "log-write", 3)
        ]

    v = verdict(store, run_id, EventFilter(), "performance")
    checks = {c["check"]: c for c in v["checks"]}
    # With them, log-write max would be 324 ms and the run would fail.
    assert v["result"] == "pass"
    assert checks["log-write max ms"]["value"] == pytest.approx(want_max / MS)
    assert checks["log-write max ms"]["requests"] == int(lw.sum())
    assert v["excluded"]["complete_unseen"] == 3

    by_op = {x["op_name"]: x for x in queries.op_latency(store, run_id)}
    assert by_op["write"]["ios"] == int((r["op"] == OP["write"]).sum()) - 3
    assert by_op["write"]["max_ns"] == want_max

    # A db-read selection has none left out.
    f = EventFilter(stream=STREAM["db-read"])
    assert latency(store, run_id, f)["excluded"]["complete_unseen"] == 0


def test_stored_histograms_are_versioned(tmp_path: Path, unseen_trace) -> None:
    """Histograms stored at ingest before the exclusion (marker "built") are not
    read back: the run is scanned by the query that leaves the records out."""
    path, r = unseen_trace
    s = open_store(store_url("duckdb", tmp_path))
    try:
        run_id = ingest(s, path).run_id
        rows = event_histograms.stored(s, run_id, "device")
        assert rows is not None and sum(x[4] for x in rows) == len(r) - 3
        s.execute('UPDATE "run_histograms" SET "metric" = \'built\' WHERE "metric" = $m',
                  {"m": event_histograms.BUILT})  # fmt: skip
        assert event_histograms.stored(s, run_id, "device") is None
    finally:
        s.close()


@pytest.mark.parametrize(
    "f",
    [
        EventFilter(),
        EventFilter(op=OP["write"]),
        EventFilter(stream=STREAM["db-read"]),
        EventFilter(min_bytes=8192),
    ],
)
def test_exact_latency_counts_unseen_in_its_own_read(store, unseen_trace, monkeypatch, f) -> None:
    """With exact percentiles the events are read anyway (exact_select's read of the
    values in the target buckets): it counts the complete_unseen records in that
    read, and the answer is unseen_count's (no second read), on both engines."""
    path, _ = unseen_trace
    run_id = ingest(store, path).run_id
    want = histograms.excluded(store, run_id, f)
    asked: list[str] = []
    real = queries.run

    def run(s, name, **p):
        asked.append(name)
        return real(s, name, **p)

    monkeypatch.setattr(queries, "run", run)
    histograms.clear_cache()
    assert latency(store, run_id, f, exact=True)["excluded"] == want
    assert "unseen_count" not in asked
