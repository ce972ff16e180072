"""The queue time (ts_queue_ns) against the real kernel, on both of its paths.

Where the kernel is about to stamp a request with a fresh clock read
(rq->start_time_ns: no plug, or one whose time is not cached yet), the recorder
takes that stamp instead of reading the clock itself; where the submitter's plug
has cached a time for a batch, it reads its own (recorder/bpf/iotape.bpf.c,
kernel_stamps_queue). Either way every request's queue time must be its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import fio_args, iotape, trace_records

pytestmark = pytest.mark.kernel


def _capture(loop, tmp_path: Path, extra: list[str], ios: int) -> np.ndarray:
    out = tmp_path / "t.iot"
    fio = fio_args(loop.path, tmp_path / "fio.log", ios=ios, rw="randread", bssplit="4k/100")
    res = iotape("record", "-o", str(out), "-d", loop.path, "--", *fio, *extra, timeout=300)
    assert res.returncode == 0, res.stderr
    recs = trace_records(out)
    assert len(recs) == ios
    assert (recs["ts_queue_ns"] > 0).all()
    assert (recs["ts_queue_ns"] <= recs["ts_issue_ns"]).all()
    return recs


def test_one_at_a_time_queue_time_is_fresh(loop, tmp_path: Path) -> None:
    # psync at depth 1: each read is submitted after the one before completed, with
    # no plug of the submitter's (the kernel's stamp path). A stale stamp would put
    # a request's queue time before the previous request's completion.
    recs = _capture(loop, tmp_path, ["--ioengine=psync", "--iodepth=1"], ios=1000)
    recs = recs[np.argsort(recs["ts_complete_ns"], kind="stable")]
    assert (recs["ts_queue_ns"][1:] >= recs["ts_complete_ns"][:-1]).all()


def test_batched_submits_get_their_own_queue_times(loop, tmp_path: Path) -> None:
    # io_uring submitting 16 at once plugs the batch, and the kernel stamps all of
    # a batch with the plug's one cached time: the recorder must read its own
    # clock for those, so no two requests share a queue time.
    batch = ["--iodepth=32", "--iodepth_batch_submit=16", "--iodepth_batch_complete_min=16"]
    recs = _capture(loop, tmp_path, batch, ios=4000)
    shared = len(recs) - len(np.unique(recs["ts_queue_ns"]))
    assert shared == 0, f"{shared} requests share a queue time"
