"""`replay run --record`'s relabelling, streamed (issue 23), against the version that
held the plan and the recording whole."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from test_replay_plan import _targets, _trace
from trace_helpers import DT, make_trace

from recorder.tracefile import open_trace
from replayer.plan.build import PlanOptions, plan
from replayer.plan.model import Manifest
from replayer.plan.source import OP
from replayer.run import ordered, relabel
from replayer.run.execute import load_manifest


def _recorded(planned: np.ndarray, seed: int) -> np.ndarray:
    """What the recorder would see of the plan: fio's threads (one per stream), all
    labelled `other`, 5 ms after the plan's times, 1 % lost, with each thread's
    syncs, the kernel's device flushes and a stray request of another process."""
    rng = np.random.default_rng(seed)
    p = planned[rng.random(len(planned)) >= 0.01]
    n = len(p) + 40
    r = np.zeros(n, DT)
    t = p["t"] + 5_000_000 + rng.integers(0, 300_000, size=len(p))
    r["ts_issue_ns"][: len(p)] = 10**9 + t
    for col in ("op", "offset", "bytes"):
        r[col][: len(p)] = p[col]
    r["tid"][: len(p)] = 900 + p["stream"].astype(np.uint32)
    sync = slice(len(p), n - 1)
    r["ts_issue_ns"][sync] = 10**9 + np.sort(rng.integers(0, int(t.max()), size=39))
    r["op"][sync] = OP["flush"]
    r["tid"][sync] = 900 + rng.integers(0, 3, size=39)
    r["tid"][sync][::2] = 0  # the kernel's device flushes
    r["ts_issue_ns"][-1], r["op"][-1], r["offset"][-1], r["bytes"][-1] = 10**9, 0, 512, 4096
    r["tid"][-1] = 77
    r["pid"] = np.where(r["tid"] == 0, 0, 4000)
    r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
    r["ts_complete_ns"] = r["ts_issue_ns"] + rng.integers(1000, 3_000_000, size=n)
    return r[np.argsort(r["ts_complete_ns"], kind="stable")]


def _plan_and_recording(tmp_path: Path) -> tuple[Path, Manifest, Path]:
    src = _trace(tmp_path / "src.iot", seconds=3, rate=300)
    jobdir = tmp_path / "jobs"
    plan(PlanOptions(src, jobdir, mode="exact", targets=_targets(tmp_path, 1)))
    man = load_manifest(jobdir)
    planned = relabel_planned(jobdir, man)
    rec = make_trace(tmp_path / "rep.iot", _recorded(planned, 3), chunk_records=53)
    return jobdir, man, rec


def relabel_planned(jobdir: Path, man: Manifest) -> np.ndarray:
    logs, _ = relabel._logs(jobdir, man)
    return np.concatenate(list(relabel.planned_batches(logs)))


def _read(path: Path) -> tuple[dict, dict | None, np.ndarray]:
    with open_trace(path) as t:
        return dict(t.header), t.footer, t.read_all()


@pytest.mark.parametrize("batch", [ordered.BATCH, 97])
def test_streamed_relabel_writes_the_in_memory_trace(
    tmp_path: Path, monkeypatch, batch: int
) -> None:
    monkeypatch.setattr(ordered, "BATCH", batch)
    jobdir, man, rec = _plan_and_recording(tmp_path)
    ref = tmp_path / "ref.iot"
    shutil.copy(rec, ref)
    got_n = relabel.relabel(rec, jobdir, man)
    ref_n = relabel.relabel_in_memory(ref, jobdir, man)
    assert got_n == ref_n and got_n.relabelled > 0.9 * got_n.requests
    (hg, fg, rg), (hr, fr, rr) = _read(rec), _read(ref)
    assert hg == hr and fg == fr
    assert np.array_equal(rg, rr)
    assert hg["metadata"]["stream_labels"] and len(set(rg["stream"].tolist())) >= 4
    assert not rec.with_name("rep.iot.relabel").exists()


def test_planned_batches_are_the_plans_order(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ordered, "BATCH", 50)
    jobdir, man, _ = _plan_and_recording(tmp_path)
    ref, names = relabel._plan_requests(jobdir, man)
    logs, names2 = relabel._logs(jobdir, man)
    parts = list(relabel.planned_batches(logs))
    got = np.concatenate(parts)
    assert len(parts) > 3 and names == names2
    for col in ("op", "offset", "bytes", "stream"):
        assert np.array_equal(got[col], ref[col]), col
    assert np.array_equal(got["n"], np.arange(len(got)))


@pytest.mark.parametrize("block", [16, 97])  # shorter than a line; a few lines
def test_lanes_plan_streams_in_blocks(tmp_path: Path, monkeypatch, block: int) -> None:
    """A plan of lanes (version-2 logs that each span the trace) merged a few lines
    of each log at a time gives the whole-plan order, and relabels as in memory."""
    monkeypatch.setattr(ordered, "BATCH", 64)
    monkeypatch.setattr(relabel._LogReader, "BYTES", block)  # blocks end on waits too
    monkeypatch.setattr(relabel._LogReader, "ALL_BYTES", block)
    src = _trace(tmp_path / "src.iot", seconds=3, rate=300)
    jobdir = tmp_path / "jobs"
    opts = PlanOptions(src, jobdir, mode="exact", targets=_targets(tmp_path, 1), layout="lanes")
    plan(opts)
    man = load_manifest(jobdir)
    assert man.exact_layout == "lanes"
    ref, _ = relabel._plan_requests(jobdir, man)
    logs, _ = relabel._logs(jobdir, man)
    assert len(logs) > 1
    got = np.concatenate(list(relabel.planned_batches(logs)))
    assert len(got) == len(ref) > 500
    for col in ("op", "offset", "bytes", "stream"):
        assert np.array_equal(got[col], ref[col]), col
    rec = make_trace(tmp_path / "rep.iot", _recorded(got, 5), chunk_records=53)
    ref_rec = tmp_path / "ref.iot"
    shutil.copy(rec, ref_rec)
    got_n = relabel.relabel(rec, jobdir, man)
    assert got_n == relabel.relabel_in_memory(ref_rec, jobdir, man)
    assert got_n.relabelled > 0.9 * got_n.requests
    assert np.array_equal(_read(rec)[2], _read(ref_rec)[2])


def test_a_threads_stream_is_its_earliest_plan_entrys_whatever_order_pairs_come() -> None:
    """Pairs reach the labels as they form, not in the plan's order: a thread still
    takes the stream of its pair whose plan entry comes first (time, then place)."""
    sid = np.array([10, 20, 30])

    def pairs(t: list[int], n: list[int], stream: list[int], rn: list[int], tid: int):
        o = np.zeros(len(t), ordered.COMPACT)
        o["t"], o["n"], o["stream"] = t, n, stream
        r = np.zeros(len(t), ordered.COMPACT)
        r["n"], r["tid"] = rn, tid
        return o, r

    lab = relabel._Labels(9, sid)
    lab.paired(*pairs([500, 400], [5, 4], [0, 0], [0, 1], tid=1))
    lab.paired(*pairs([300, 300], [7, 6], [1, 2], [2, 3], tid=1))  # later, yet earlier
    lab.paired(*pairs([100, 200], [1, 0], [0, 1], [4, 5], tid=2))
    assert lab.tid == {1: 30, 2: 10}
    assert lab.label[:6].tolist() == [10, 10, 20, 30, 10, 20]
