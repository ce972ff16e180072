"""A dependent plan of a trace too large to hold, read in time-ordered chunks
(replayer/plan/dependent.py, deps.Chain): the same plan as the whole trace's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
from test_replay_dependent import FUA, MIB, OP, _closed_loop, _write
from trace_helpers import DT, SDA, header

import schemas
from recorder.tracefile import TraceWriter
from replayer.plan.build import PlanOptions, plan
from replayer.run import runner


def _mixed(n: int = 300) -> np.ndarray:
    """Sync threads of two streams, an async submitter with a window of 4 and
    FUA writes, a few completions the kernel never reported; written in
    completion order, as the recorder writes."""
    a = _closed_loop(threads=3, n=n, think_ns=300_000, lat_ns=150_000)
    a["stream"] = np.where(a["op"] == OP["read"], 1, 2)
    b = np.zeros(n, dtype=DT)
    q = 1_000_000 + (np.arange(n) // 4) * 900_000 + (np.arange(n) % 4) * 1_000
    # queued at once, dispatched one by one: a request's queue time comes well
    # before the issue times a trace is ordered (and chunked) by
    b["ts_queue_ns"], b["ts_issue_ns"] = q, q + 3_000 + (np.arange(n) % 4) * 150_000
    b["ts_complete_ns"] = b["ts_issue_ns"] + 200_000
    b["tid"], b["pid"], b["stream"], b["dev"] = 900, 901, 2, SDA
    b["op"], b["bytes"], b["offset"] = OP["write"], 4096, (np.arange(n) % 128) * 4096
    b["flags"][::7] = FUA
    r = np.zeros(len(a) + n, dtype=DT)
    r[: len(a)], r[len(a) :] = a, b
    late = np.flatnonzero(r["tid"] == 501)[[40, 90, 160]]
    r["ts_complete_ns"][late] += 3_000_000
    r["flags"][late] |= 1 << schemas.bits("flag")["complete_unseen"]
    return r[np.argsort(r["ts_complete_ns"], kind="stable")]


def _requests(jobdir: Path) -> dict[tuple[str, int], tuple]:
    """Each request of a dependent plan by (job, position): what it waits for (by
    job and position too: the ids differ with the order a plan numbered them),
    its think time, action, offset and length."""
    logs = {p.stem: p.read_text().splitlines()[2:] for p in (jobdir / "iologs").glob("*.log")}
    where = {ln.split()[0]: (job, i) for job, lines in logs.items() for i, ln in enumerate(lines)}
    out = {}
    for job, lines in logs.items():
        for i, ln in enumerate(lines):
            _id, after, *rest = ln.split()
            waits = () if after == "-" else tuple(sorted(where[x] for x in after.split(",")))
            out[(job, i)] = (waits, *rest)
    return out


def test_a_large_trace_is_planned_in_chunks_as_it_would_be_whole(
    tmp_path: Path, monkeypatch
) -> None:
    """Past STREAM_ABOVE a dependent plan reads the trace in time-ordered chunks
    (97 records here), each slice's inference carried from one to the next: the
    same jobs, depths and requests, each waiting for the same ones, as the plan
    of the whole trace; iotape-lanes runs it with none issued early."""
    from replayer.plan import sources, stream

    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    h = header()
    h["devices"] = h["devices"][:1]
    trace = tmp_path / "t.iot"
    with TraceWriter(trace, h, chunk_records=40) as w:
        w.write(_mixed())
        w.close({})
    opts = {"targets": [f"all={target}"], "timing": "dependent"}
    whole = plan(PlanOptions(trace, tmp_path / "w", **opts))
    monkeypatch.setattr(sources, "STREAM_ABOVE", 10)
    real, calls = stream.sorted_chunks, []
    monkeypatch.setattr(stream, "sorted_chunks", lambda s: calls.append(1) or real(s, 97))
    man = plan(PlanOptions(trace, tmp_path / "c", **opts))
    assert calls == [1] and sum(1 for _ in real(stream.scan(trace), 97)) > 10
    assert sorted(map(str, man["jobs"])) == sorted(map(str, whole["jobs"]))
    got, want = _requests(tmp_path / "c"), _requests(tmp_path / "w")
    assert len(want) == 1200 and sum(1 for v in want.values() if len(v[0]) > 1) > 20
    assert got == want
    depths = [ln for ln in (tmp_path / "w" / "replay.fio").read_text().splitlines()
              if ln.startswith(("[", "iodepth"))]  # fmt: skip
    assert "iodepth=4" in depths
    text = (tmp_path / "c" / "replay.fio").read_text().splitlines()
    assert sorted(ln for ln in text if ln.startswith(("[", "iodepth"))) == sorted(depths)
    key = {d["stream"]: d for d in whole["dependencies"]}
    for d in man["dependencies"]:
        # chance and mirror are reckoned per chunk (its span, a completion after its
        # last issue in the next); all else is the whole trace's
        per_chunk = {"cross_by_chance": 0, "cross_mirror": 0}
        assert {**d, **per_chunk} == {**key[d["stream"]], **per_chunk}
    out = subprocess.run(
        [str(runner.LANES), "replay.fio"], cwd=tmp_path / "c", capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)["dependencies"]
    assert res["requests"] == 1200 and res["issued_before_predecessor"] == 0


def test_a_compressed_trace_is_read_in_chunks_by_its_events_not_its_bytes(
    tmp_path: Path, monkeypatch
) -> None:
    """A compressed trace takes a few bytes a request: whether a plan reads it
    in chunks goes by the footer's event count."""
    from replayer.plan import sources

    trace = _write(tmp_path / "t.iot", _mixed())
    events = 1200
    assert trace.stat().st_size // sources.RECORD_BYTES < events // 2
    opts = PlanOptions(trace, tmp_path / "j", targets=[f"all={tmp_path / 'x'}"])
    monkeypatch.setattr(sources, "STREAM_ABOVE", events - 1)
    assert sources.wants_chunks(opts)
    monkeypatch.setattr(sources, "STREAM_ABOVE", events)
    assert not sources.wants_chunks(opts)
