"""Per-request latency with a synchronous backend (--ioengine psync): each request is
charged its own time, not its batch's.

psync serves a batch's requests one after another inside submit; a caller that
stamped the batch once charged every request the time of those served before it
(the checkpoint writer's batches of ~6 writes reported ~3 ms where the device took
0.5 ms, issue 38). On the HDD-like disk (analyzer/lab/hdd.py: every request takes
at least its modelled seek) the checkpoint writer is kept busy, so the difference
is large. Both checks are bounds a loaded machine cannot break: a stall only
lengthens what the engine measures, never the time it has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import need

from analyzer.lab.devices import HybridLab, LabError
from analyzer.lab.hdd import HddModel
from recorder.tracefile import open_trace
from workload import engine

pytestmark = pytest.mark.kernel


def _sum_ms(stat: dict) -> float:
    return float(stat["count"] * stat["lat_avg_ms"])


def test_psync_charges_each_write_its_own_time(kernel: None, tmp_path: Path) -> None:
    model = HddModel(settle_ms=2.0, full_ms=4.0, mb_s=100.0)
    try:
        lab = HybridLab(size_mb=128, memory_disk=True, hdd=model).__enter__()
    except LabError as e:
        need(False, f"an HDD-like lab: {e}")
    try:
        cfg = engine.WorkloadConfig(
            db_paths=[lab.slow], log_paths=[lab.fast], destroy_data_on=[lab.slow, lab.fast],
            mailboxes=20, mailbox_size_mb=2, iops_per_mailbox=40, threads=2, duration=4,
            ioengine="psync",
        )  # fmt: skip
        out = tmp_path / "w.iot"
        res, _ = engine.run_recorded(cfg, out, devices=[lab.slow])
    finally:
        lab.close()
    db = res["databases"][0]
    write, read = db["streams"]["db-write"], db["streams"]["db-read"]
    assert write["count"] > 50, write
    # One checkpoint thread per database, its writes one after another: the
    # writes' own latencies cannot add up to more than the run's time. A batch
    # stamp charged each write the writes before it too (~k/2 times as much).
    elapsed_ms = res["elapsed_s"] * 1e3
    assert _sum_ms(write) <= elapsed_ms, (_sum_ms(write), elapsed_ms)
    # Session reads: each thread's own reads do not overlap either.
    assert _sum_ms(read) <= res["threads_final"] * elapsed_ms, (_sum_ms(read), elapsed_ms)
    # And never less than the device took: the recorder's queue-to-completion of
    # the checkpoint thread's writes (the engine's interval holds the device's).
    recs = open_trace(out).read_all()
    ckpt = recs[(recs["op"] == 1) & np.char.startswith(recs["comm"], b"ese-ckpt")]
    assert len(ckpt) > 50
    dev_ms = float(np.mean(ckpt["ts_complete_ns"] - ckpt["ts_queue_ns"])) / 1e6
    assert dev_ms >= model.settle_ms * 0.99
    assert write["lat_avg_ms"] >= dev_ms * 0.95, (write["lat_avg_ms"], dev_ms)
