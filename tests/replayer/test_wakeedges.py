"""Cross-thread edges from recorded wakes (replayer/plan/wakeedges.py): a trace with
wake records (format version 3, `iotape record --wakes`) gives a dependent plan
the edges its timing alone cannot show. No root: synthetic traces, a file target."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import DT, SDA, header

import schemas
from recorder.tracefile import open_trace, write_trace
from recorder.tracefile.format import WAKE_OP, WAKE_VERSION
from replayer.plan import deps, wakeedges
from replayer.plan.build import PlanOptions, plan
from replayer.run import runner

OP = schemas.enum("op")
STREAM = schemas.enum("stream")
MIB = 1 << 20
BIG = np.iinfo(np.int64).max
SESSION, FLUSHER = 500, 501


def _req(t0: int, lat: int, tid: int, stream: str, op: str, k: int) -> np.ndarray:
    x = np.zeros(1, DT)
    x["ts_queue_ns"], x["ts_issue_ns"], x["ts_complete_ns"] = t0, t0 + 1_000, t0 + lat
    x["tid"], x["pid"], x["stream"], x["op"] = tid, 400, STREAM[stream], OP[op]
    x["offset"], x["bytes"], x["dev"] = k * 8192, 8192, SDA
    return x


def _wake(t: int, waker: int, wakee: int) -> np.ndarray:
    x = np.zeros(1, DT)
    x["ts_queue_ns"] = x["ts_issue_ns"] = x["ts_complete_ns"] = t
    x["tid"], x["pid"], x["offset"], x["bytes"], x["op"] = wakee, 400, waker, 400, WAKE_OP
    return x


def _woken_flusher(n: int = 40, wakes: bool = True, steady: bool = False) -> np.ndarray:
    """A session (thread 500, db-read, sync: 0.5 ms service, one read every 2 ms)
    and a flusher (501, db-write, 0.3 ms) that the session wakes 0.6 ms after each
    read completed, and that writes 0.4 ms after that: 1 ms after the session's
    completion, too late for the timing evidence (crossedges: 5-100 us) and 1.7 ms
    after its own, too short a think for the long-think rule (2 ms). Every other
    read comes 0.15 ms later, as a session's do (its think varies): a thread on a
    steady clock sets no other's pace (crossedges.clocked): `steady` for one."""
    parts = []
    for k in range(n):
        q = 1_000_000 + k * 2_000_000 + (0 if steady else (k % 2) * 150_000)
        c = q + 500_000
        parts.append(_req(q, 500_000, SESSION, "db-read", "read", 2 * k))
        if wakes:
            parts.append(_wake(c + 600_000, SESSION, FLUSHER))
        parts.append(_req(c + 1_000_000, 300_000, FLUSHER, "db-write", "write", 2 * k + 1))
    r = np.zeros(len(parts), DT)  # not np.concatenate: it packs the dtype
    for i, x in enumerate(parts):
        r[i] = x[0]
    return r[np.argsort(r["ts_complete_ns"], kind="stable")]


def _write(path: Path, r: np.ndarray, compression: str = "zstd") -> Path:
    h = header()
    h["devices"] = h["devices"][:1]
    return write_trace(path, h, r, compression=compression, wakes=(r["op"] == WAKE_OP).any())


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_wake_records_are_read_apart_from_the_requests(tmp_path: Path, compression: str) -> None:
    r = _woken_flusher(10)
    path = _write(tmp_path / "t.iot", r, compression)
    with open_trace(path) as t:
        assert t.header["version"] == WAKE_VERSION and t.has_wakes
        reqs = t.read_all()
        woke = np.concatenate(list(t.iter_wakes()))
        assert t.footer is not None
        assert t.footer["wakes"] == 10 and t.footer["events"] == 30
    assert len(reqs) == 20 and not (reqs["op"] == WAKE_OP).any()
    assert len(woke) == 10 and (woke["offset"] == SESSION).all() and (woke["tid"] == FLUSHER).all()


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_columns_for_ingest_hold_the_requests_only(tmp_path: Path, compression: str) -> None:
    # iter_columns decodes compressed chunks per column (ingest's path); a chunk
    # that also holds wake records must still give the requests alone.
    path = _write(tmp_path / "t.iot", _woken_flusher(10), compression)
    with open_trace(path) as t:
        parts = list(t.iter_columns(7))
        want = t.read_all()
    got = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    assert len(got["op"]) == 20 and not (got["op"] == WAKE_OP).any()
    for name in want.dtype.names or ():
        assert (got[name] == want[name]).all(), name


def test_only_a_version_3_file_sets_wake_records_apart(tmp_path: Path) -> None:
    h = header()
    h["devices"] = h["devices"][:1]
    # Versions 1 and 2 give no op value a meaning of its own: read back as written.
    plain = write_trace(tmp_path / "p.iot", h, _woken_flusher(3))
    with open_trace(plain) as t:
        assert t.header["version"] != WAKE_VERSION and not t.has_wakes
        assert list(t.iter_wakes()) == [] and len(t.read_all()) == 9
        assert t.footer is not None and "wakes" not in t.footer


def _arrays(r: np.ndarray) -> tuple[np.ndarray, ...]:
    """A trace's requests in issue order, their issue, completion, thread and own
    think time (int64 max without a predecessor), and its wakes."""
    woke = r["op"] == WAKE_OP
    reqs = r[~woke]
    reqs = reqs[np.argsort(deps.times(reqs)[0], kind="stable")]
    start, end = deps.times(reqs)
    d = deps.infer(reqs)
    own = np.where(d.pred >= 0, d.think_ns, BIG)
    return reqs, start, end, reqs["tid"].astype(np.int64), own, wakeedges.Wakes.of([r[woke]])


def _edges(r: np.ndarray) -> tuple[wakeedges.WakeEdges, np.ndarray]:
    reqs, start, end, tid, own, wakes = _arrays(r)
    w = wakeedges.wake_edges(start, end, tid, own, wakes)
    return w, reqs


def test_a_woken_thread_waits_for_its_wakers_latest_completion() -> None:
    w, reqs = _edges(_woken_flusher(40))
    assert w.woken == 40 and len(w.i) == 40
    assert (reqs["tid"][w.i] == FLUSHER).all() and (reqs["tid"][w.j] == SESSION).all()
    # the session's read just before the wake, and 1 ms after its completion
    assert (reqs["offset"][w.j] == reqs["offset"][w.i] - 8192).all()
    assert (w.gap_ns == 1_000_000).all()


def test_a_wake_before_the_threads_own_completion_or_from_an_idle_thread_is_no_edge() -> None:
    r = _woken_flusher(5)
    woke = np.flatnonzero(r["op"] == WAKE_OP)
    # the 2nd wake before the flusher's own 1st write completed: it was not waiting
    r["ts_complete_ns"][woke[1]] = 1_000_000 + 500_000 + 1_000_000 + 100_000
    r["ts_queue_ns"][woke[1]] = r["ts_issue_ns"][woke[1]] = r["ts_complete_ns"][woke[1]]
    # the 3rd from a thread with no request: nothing to wait for
    r["offset"][woke[2]] = 999
    w, reqs = _edges(r[np.argsort(r["ts_complete_ns"], kind="stable")])
    got = sorted(reqs["offset"][w.i].tolist())
    assert got == [1 * 8192, 7 * 8192, 9 * 8192]
    assert w.woken == 4  # the idle thread's wake counted as a wake, without an edge


def test_a_request_long_after_its_wake_waited_for_something_else() -> None:
    r = _woken_flusher(3)
    woke = np.flatnonzero(r["op"] == WAKE_OP)
    # the last write 2.5 ms after its wake (a timer slept out after it), its own
    # previous write long done: the wake is not what it waited for last
    last = np.flatnonzero(r["tid"] == FLUSHER)[-1]
    late = int(r["ts_complete_ns"][woke[2]]) + wakeedges.PROMPT_NS + 500_000
    for f, dt in (("ts_queue_ns", 0), ("ts_issue_ns", 1_000), ("ts_complete_ns", 300_000)):
        r[f][last] = late + dt
    w, reqs = _edges(r[np.argsort(r["ts_complete_ns"], kind="stable")])
    assert sorted(reqs["offset"][w.i].tolist()) == [1 * 8192, 3 * 8192]
    assert w.woken == 2


def _plan(tmp_path: Path, r: np.ndarray, timing: str = "dependent") -> tuple[Path, dict]:
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    jobdir = tmp_path / f"jobs-{timing}"
    opts = PlanOptions(trace=_write(tmp_path / "t.iot", r), jobdir=jobdir,
                       targets=[f"all={target}"], timing=timing)  # fmt: skip
    return jobdir, plan(opts)


def test_a_plan_of_a_trace_with_wakes_gives_each_woken_request_its_edge(tmp_path: Path) -> None:
    jobdir, man = _plan(tmp_path, _woken_flusher(40))
    got = {d["stream"]: (d["cross_edges"], d["wake_edges"], d["wakes_recorded"])
           for d in man["dependencies"]}  # fmt: skip
    assert got == {"db0.db-read": (0, 0, True), "db0.db-write": (40, 40, True)}
    lines = (jobdir / "iologs" / "db0.db-write.t501.log").read_text().splitlines()[2:]
    # ids in issue order: session read k is 2k, flusher write k is 2k + 1
    for k, line in enumerate(lines):
        ident, after, think = line.split()[:3]
        assert ident == str(2 * k + 1)
        assert after == (f"{2 * k - 1},{2 * k}" if k else "0")
        assert think == "1000"
    out = subprocess.run(
        [str(runner.LANES), "replay.fio"], cwd=jobdir, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["dependencies"]["issued_before_predecessor"] == 0


def test_without_wakes_the_same_timing_gives_no_cross_thread_edge(tmp_path: Path) -> None:
    _, man = _plan(tmp_path, _woken_flusher(40, wakes=False))
    got = {d["stream"]: (d["cross_edges"], d["wake_edges"], d["wakes_recorded"])
           for d in man["dependencies"]}  # fmt: skip
    assert got == {"db0.db-read": (0, 0, False), "db0.db-write": (0, 0, False)}


def test_a_trace_with_wakes_planned_in_chunks_keeps_its_wake_edges(
    tmp_path: Path, monkeypatch
) -> None:
    """Read in time-ordered chunks (97 records), each chunk's requests take their
    edges from the wakes before them: the whole trace's, but for a request whose
    waker's completion is in an earlier chunk (a seam)."""
    from test_replay_dependent_chunks import _requests

    from replayer.plan import sources, stream

    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * (4 * MIB))
    trace = _write(tmp_path / "t.iot", _woken_flusher(200))
    opts = {"targets": [f"all={target}"], "timing": "dependent"}
    whole = plan(PlanOptions(trace, tmp_path / "w", **opts))
    monkeypatch.setattr(sources, "STREAM_ABOVE", 10)
    real, calls = stream.sorted_chunks, []
    monkeypatch.setattr(stream, "sorted_chunks", lambda s: calls.append(1) or real(s, 97))
    man = plan(PlanOptions(trace, tmp_path / "c", **opts))
    assert calls == [1]
    seams = sum(1 for _ in real(stream.scan(trace), 97)) - 1
    edges = {d["stream"]: d["wake_edges"] for d in man["dependencies"]}
    assert {d["stream"]: d["wake_edges"] for d in whole["dependencies"]}["db0.db-write"] == 200
    assert 200 - seams <= edges["db0.db-write"] <= 200 and edges["db0.db-read"] == 0
    got, want = _requests(tmp_path / "c"), _requests(tmp_path / "w")
    same = [k for k in want if got[k] == want[k]]
    assert len(same) >= len(want) - seams


def test_a_waker_on_its_own_clock_gives_no_wake_edge(tmp_path: Path) -> None:
    """The session reads every 2 ms to the microsecond (the engine's maintenance
    reads): its wakes are in the trace, but a request tied to its completions
    would replay at its clock's pace on any target (crossedges.clocked)."""
    _, man = _plan(tmp_path, _woken_flusher(40, steady=True))
    got = {d["stream"]: d["wake_edges"] for d in man["dependencies"]}
    assert got == {"db0.db-read": 0, "db0.db-write": 0}
    (tmp_path / "j").mkdir()
    _, jittered = _plan(tmp_path / "j", _woken_flusher(40))
    assert {d["stream"]: d["wake_edges"] for d in jittered["dependencies"]}["db0.db-write"] == 40
