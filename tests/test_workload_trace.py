"""A recorded run: the trace's shape agrees with the engine's own report (within 5 %)
and with the published Exchange 2010 run (within 15 %)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from iotape import schemas
from iotape.recorder.tracefile import open_trace
from iotape.workload import engine, profiles, report

pytestmark = pytest.mark.kernel

STREAMS = {v: k for k, v in schemas.enum("stream").items()}
OPS = schemas.enum("op")


def _trace_counts(path: Path) -> dict[str, tuple[int, int]]:
    recs = open_trace(path).read_all()
    recs = recs[np.isin(recs["op"], [OPS["read"], OPS["write"]])]
    out = {}
    for code in np.unique(recs["stream"]):
        sel = recs[recs["stream"] == code]
        out[STREAMS[int(code)]] = (len(sel), int(sel["bytes"].sum()))
    return out


def test_recorded_shape_matches_engine_and_published(loop_factory, tmp_path: Path) -> None:
    loop = loop_factory(1100)
    # The published run scaled down: its per-mailbox hot set cached, random pages
    # a cache miss (the cache is under 1 % of the database), more load per mailbox
    # so that a few seconds give thousands of I/Os.
    cfg = engine.WorkloadConfig(
        db_paths=[loop.path], log_paths=[loop.path], destroy_data_on=[loop.path],
        mailboxes=50, mailbox_size_mb=20, iops_per_mailbox=8, duration=4, copies=2,
    )  # fmt: skip
    out = tmp_path / "run.iot"
    result, summary = engine.run_recorded(cfg, out)
    assert summary["events"] > 2000

    meta = open_trace(out).header["metadata"]
    assert meta["workload"] == "iotape-ese"
    assert (meta["mailboxes"], meta["databases"], meta["copies"]) == (50, 1, 2)
    assert meta["page_bytes"] == 32768 and meta["profile"] == "exchange2010"

    engine_counts = {
        k: (v["count"], v["bytes"]) for k, v in result["databases"][0]["streams"].items()
    }
    traced = _trace_counts(out)
    for s in ("db-read", "db-write", "log-write", "bdm-read", "log-replication-read"):
        assert traced[s][0] > 0, s
    mine = profiles.shape_from_counts(engine_counts, cfg.copies)
    seen = profiles.shape_from_counts(traced, cfg.copies)
    published = profiles.published_shape("exchange2010-esrp-mailbox-profile")
    rep = report.build(result)
    for key in profiles.SHAPE_KEYS:
        assert seen[key] == pytest.approx(mine[key], rel=0.05), key
        assert seen[key] == pytest.approx(published[key], rel=0.15), key
    assert {r["figure"]: r["engine"] for r in rep["shape"]["rows"]} == pytest.approx(mine)
