"""The post-replay steps' C code (run/native.py) against the numpy it replaced
(what IOTAPE_POSTREPLAY_PURE=1 runs): the pairing's matcher (src/pairmatch.c) with
the same pairs, in the same order, and the same requests dropped, step by step;
a recording's columns (src/compact.c) the same rows; and relabelling and `replay
fidelity` of a replay the same bytes, on a replay made here and on one recorded
from the kernel."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_relabel_stream import _plan_and_recording
from trace_helpers import make_trace, workload_records
from typer.testing import CliRunner

from base.errors import IotapeError
from iotape.commands.replay import app as replay_app
from recorder.tracefile import open_trace
from replayer.plan.build import PlanOptions, plan
from replayer.plan.source import DEVICE_FLUSH, OP
from replayer.run import (
    execute,
    fidsums,
    later,
    native,
    ordered,
    pairing,
    quantiles,
    relabel,
    timewindows,
)
from replayer.run.execute import load_manifest
from replayer.run.pairing import Pairer
from replayer.run.results import Relabel


@pytest.fixture
def pure(monkeypatch):
    """Switch the post-replay steps between numpy (True) and C (False)."""
    real = native.lib
    assert real() is not None, "IOTAPE_POSTREPLAY_PURE is set or the library is missing"

    def use(on: bool) -> None:
        monkeypatch.setattr(native, "lib", (lambda: None) if on else real)

    return use


def _rows(n: int, keys: int, span_ns: int, rng: np.random.Generator, grain: int) -> np.ndarray:
    a = np.zeros(n, ordered.COMPACT)
    a["t"] = np.sort(rng.integers(0, span_ns // grain, size=n)) * grain
    a["n"] = np.arange(n)
    a["op"] = rng.integers(0, 2, size=n)
    a["offset"] = rng.integers(0, keys, size=n) * 4096
    a["bytes"] = 4096
    return a


def _steps(o: np.ndarray, r: np.ndarray, cuts: list[int], horizon: int) -> list:
    """Both traces through one Pairer, a batch before each cut, the rest last."""
    p = Pairer(horizon_ns=horizon)
    edges = [None, *cuts, None]
    out = []
    for lo, hi in itertools.pairwise(edges):
        parts = []
        for x in (o, r):
            m = np.ones(len(x), bool)
            if lo is not None:
                m &= x["t"] >= lo
            if hi is not None:
                m &= x["t"] < hi
            parts.append(x[m])
        out.append(p.step(parts[0], parts[1], hi))
    return out


@pytest.mark.parametrize(("keys", "horizon"), [(50, 10**9), (3, 10**8), (2000, 5 * 10**9)])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("grain", [1, 10**8])
def test_c_steps_are_numpys(pure, keys: int, horizon: int, seed: int, grain: int) -> None:
    """Few keys and a short horizon (chance pairs far apart, many rounds of drops,
    and keys past MAX_ROUNDS), lost requests on both sides, batches cut anywhere,
    times in ns or on a coarse grid (ties between far pairs): every step's pairs,
    lost requests and held requests are the same."""
    rng = np.random.default_rng(seed)
    o = _rows(3000, keys, 20 * 10**9, rng, grain)
    r = o[rng.random(len(o)) > 0.05].copy()
    r["t"] += rng.integers(-2, 3, size=len(r)) * horizon // grain * grain
    extra = _rows(200, keys, 20 * 10**9, rng, grain)
    r = np.concatenate([r, extra])
    r = r[np.argsort(r["t"], kind="stable")]
    r["n"] = np.arange(len(r))
    cuts = sorted(rng.integers(10**9, 19 * 10**9, size=6).tolist())
    pure(True)
    ref = _steps(o, r, cuts, horizon)
    pure(False)
    got = _steps(o, r, cuts, horizon)
    assert sum(len(s.orig) for s in ref) > 100
    assert sum(len(s.lost_orig) for s in ref) > 10
    for a, b in zip(ref, got, strict=True):
        for f in ("orig", "rep", "lost_orig", "lost_rep"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f


def test_past_max_rounds_drops_every_far_pair(pure) -> None:
    """One key, the original at 0..99 s, the replay 100 s later: every pair is
    beyond a 1 s horizon; after MAX_ROUNDS drops the rest are all left out, in C
    as in numpy."""
    o = np.zeros(100, ordered.COMPACT)
    o["t"], o["n"], o["offset"], o["bytes"] = np.arange(100) * 10**9, np.arange(100), 0, 512
    r = o.copy()
    r["t"] += 100 * 10**9
    res = []
    for on in (True, False):
        pure(on)
        res.append(Pairer(horizon_ns=10**9)._match(o, r, pairing.keys(o), pairing.keys(r)))
    (ia, ib, ga, gb), (ja, jb, ha, hb) = res
    assert len(ia) == 0 and ga.sum() > pairing.MAX_ROUNDS
    assert np.array_equal(ia, ja) and np.array_equal(ib, jb)
    assert np.array_equal(ga, ha) and np.array_equal(gb, hb)


def test_empty_sides_pair_nothing(pure) -> None:
    pure(False)
    o = np.zeros(3, ordered.COMPACT)
    ia, ib, ga, gb = Pairer()._match(o, o[:0], pairing.keys(o), pairing.keys(o[:0]))
    assert len(ia) == len(ib) == 0 and ga.tolist() == [False] * 3 and len(gb) == 0


@pytest.mark.parametrize("app_flush", [False, True])
@pytest.mark.parametrize("timed", [True, False])
@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_c_columns_are_numpys(
    tmp_path: Path, pure, app_flush: bool, timed: bool, compression: str
) -> None:
    """Every op (and one no replay issues), data requests of 0 bytes, the device's
    flushes (flagged, or of pid 0) in chunks with and without a flush an
    application asked for, requests timed by issue, queue or completion only,
    in plain chunks and in compressed ones (whose planes C decodes itself,
    compact.c's *_planes; chunks of 131 records leave records past the last 8):
    the batches are numpy's, row for row."""
    rng = np.random.default_rng(4)
    n = 5000
    r = workload_records(n, seed=4)
    ops = [OP[k] for k in ("read", "write", "flush", "discard", "write-zeroes", "other")]
    r["op"] = rng.choice(ops, size=n, p=[0.4, 0.3, 0.15, 0.05, 0.05, 0.05])
    r["bytes"][rng.random(n) < 0.03] = 0
    flush = r["op"] == OP["flush"]
    r["pid"][flush & (rng.random(n) < 0.5)] = 0
    r["flags"][flush & (rng.random(n) < 0.3)] |= DEVICE_FLUSH
    if not app_flush:  # every flush the device's
        r["pid"][flush] = 0
    r["stream"] = rng.integers(0, 4, size=n)
    r["ts_queue_ns"] = np.sort(rng.integers(10**9, 5 * 10**9, size=n))
    r["ts_issue_ns"] = r["ts_queue_ns"] + 500
    r["ts_complete_ns"] = r["ts_issue_ns"] + rng.integers(1, 10**6, size=n)
    r["ts_issue_ns"][rng.random(n) < 0.05] = 0
    r["ts_queue_ns"][(r["ts_issue_ns"] == 0) & (rng.random(n) < 0.5)] = 0
    if not timed:
        for col in ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns"):
            r[col] = 0
    path = make_trace(tmp_path / "t.iot", r, chunk_records=131, compression=compression)
    with open_trace(path) as t:
        assert {c.dtype == np.uint8 for c in t.iter_stored()} == {compression != "none"}
    got, scans = {}, {}
    for on in (True, False):
        pure(on)
        scans[on] = s = ordered.scan(path)
        got[on] = np.concatenate(list(ordered.batches(s, 700)))
    assert s.app_flush == app_flush and len(got[True]) > 0.8 * n
    assert np.array_equal(got[True], got[False])
    a, b = scans[True], scans[False]
    assert (a.app_flush, a.count, a.t0, a.timed, a.t_last, a.stream_ids) == (
        b.app_flush, b.count, b.t0, b.timed, b.t_last, b.stream_ids)  # fmt: skip
    assert np.array_equal(a.tmin, b.tmin)
    # Relabelling's mask of each chunk (ordered._keep), under either flush rule.
    with open_trace(path) as t:
        for c in t.iter_chunks():
            for rule in (False, True):
                masks = []
                for on in (True, False):
                    pure(on)
                    masks.append(ordered._keep(c, rule))
                assert np.array_equal(masks[0], masks[1])
    # A misaligned request (past the first chunk): the same error in C.
    late = int(np.flatnonzero(r["op"] != OP["flush"])[-40])
    r["offset"][late] += 7
    r["offset"][late + 1 :][r["op"][late + 1 :] != OP["flush"]] += 9
    bad = make_trace(tmp_path / "bad.iot", r, chunk_records=131, compression=compression)
    errs = []
    for on in (True, False):
        pure(on)
        with pytest.raises(IotapeError) as e:
            ordered.scan(bad)
        errs.append(str(e.value))
    assert errs[0] == errs[1] and "not 512-aligned" in errs[0]


def _relabel_and_fidelity(pure, src: Path, rec: Path, jobdir: Path, tmp: Path) -> list:
    """(relabelled trace's bytes, `replay fidelity --json`'s text) in numpy and in C."""
    out = []
    for on in (True, False):
        pure(on)
        rep = tmp / "relabelled.iot"  # one path: the report names it
        shutil.copy(rec, rep)
        relabel.relabel(rep, jobdir, load_manifest(jobdir))
        res = CliRunner().invoke(replay_app, ["fidelity", str(src), str(rep), "--json"])
        assert res.exit_code == 0, res.output
        out.append((rep.read_bytes(), res.output))
    return out


def test_relabel_and_fidelity_are_numpys(tmp_path: Path, pure) -> None:
    """A plan's recording made here (test_relabel_stream's: 1 % lost, syncs, the
    device's flushes, a stray request): the same relabelled bytes and report."""
    jobdir, _man, rec = _plan_and_recording(tmp_path)
    (ref, ref_json), (got, got_json) = _relabel_and_fidelity(
        pure, tmp_path / "src.iot", rec, jobdir, tmp_path
    )
    assert ref == got and ref_json == got_json
    assert json.loads(got_json)["iotape"]["overall"]["match_share"] > 0.9


@pytest.mark.kernel
def test_a_recorded_replay_relabels_and_compares_as_numpy_does(
    loop_factory, tmp_path: Path, pure, monkeypatch
) -> None:
    """fio recorded at full speed on a loop device, planned exactly onto another
    and replayed with `replay run --record` (its relabelling held back, as
    bench/relabel_rate.py does): the same relabelled bytes and report."""
    from recorder.capture import record as rec

    src, dst = loop_factory(128), loop_factory(128)
    job = tmp_path / "job.fio"
    job.write_text(
        f"[global]\nfilename={src.path}\ndirect=1\nioengine=io_uring\ntime_based=1\n"
        "runtime=1\n[r]\nrw=randread\nbs=4k\niodepth=16\nnumjobs=2\n"
    )
    orig = tmp_path / "src.iot"
    rec.record(rec.RecordOptions(devices=[src.path], output=orig,
                                 command=["fio", "--output=/dev/null", str(job)]))  # fmt: skip
    jobdir = tmp_path / "jobs"
    plan(PlanOptions(orig, jobdir, mode="exact", targets=[f"all={dst.path}"]))
    kept = tmp_path / "rep.pre.iot"

    def hold_back(trace: Path, _jobdir: Path, _man) -> Relabel:
        shutil.copy(trace, kept)
        return Relabel(relabelled=0, requests=0)

    monkeypatch.setattr(execute, "relabel", hold_back)
    execute.run(jobdir, record_to=tmp_path / "rep.iot", destroy=[dst.path])
    (ref, ref_json), (got, got_json) = _relabel_and_fidelity(pure, orig, kept, jobdir, tmp_path)
    assert ref == got and ref_json == got_json
    assert json.loads(got_json)["iotape"]["overall"]["requests"][0] > 10_000


@pytest.mark.parametrize("run", [1, 5, 40, 700])
def test_c_plan_order_is_lexsorts(pure, run: int) -> None:
    """Runs of entries at one time (a wait line times those after it), repeated
    keys across streams, rows wholly equal (kept in row order): the plan's order
    is np.lexsort's."""
    rng = np.random.default_rng(run)
    n = 6000
    a = np.zeros(n, ordered.COMPACT)
    a["t"] = np.sort(rng.integers(0, n // run + 1, size=n)) * 1000
    a["n"] = rng.permutation(n)  # not a key: tells equal rows apart
    a["op"] = rng.integers(0, 3, size=n)
    a["offset"] = rng.integers(0, 20, size=n) * 4096
    a["bytes"] = rng.choice([4096, 8192], size=n)
    a["stream"] = rng.integers(0, 3, size=n)
    a = a[rng.permutation(n)]
    a = a[np.argsort(a["t"], kind="stable")]
    ref = np.lexsort((a["stream"], a["bytes"], a["offset"], a["op"], a["t"]))
    pure(False)
    assert np.array_equal(relabel._plan_order(a), ref)
    pure(True)
    assert np.array_equal(relabel._plan_order(a), ref)


@pytest.mark.parametrize("dist", ["wide", "ties", "negative"])
def test_c_percentile_passes_are_numpys(pure, monkeypatch, dist: str) -> None:
    """src/select.c's passes over a spill (the count below a range and its
    histogram, the values within it): numpy's, pass by pass and through a spill's
    percentiles narrowed over several reads and levels."""
    rng = np.random.default_rng(7)
    n = 30_011
    x = {
        "wide": rng.integers(-(10**15), 10**15, size=n),
        "ties": rng.integers(0, 4, size=n) * 10**9,
        "negative": -(rng.pareto(0.9, size=n) * 1e6).astype(np.int64),
    }[dist]
    lo, hi = int(x.min()), int(x.max())
    for a, b in [(lo, hi), (lo + (hi - lo) // 3, lo + (hi - lo) // 2), (hi, hi), (hi + 1, hi + 9)]:
        width = -(-(b - a + 1) // quantiles.BINS)
        got = {}
        for on in (True, False):
            pure(on)
            hist = np.zeros(quantiles.BINS, np.int64)
            below = quantiles._count(x, a, b, width, hist)
            got[on] = (below, hist, quantiles._within(x, a, b))
        assert got[True][0] == got[False][0] == int((x < a).sum())
        assert np.array_equal(got[True][1], got[False][1])
        assert got[False][1].sum() == len(got[False][2])
        assert np.array_equal(got[True][2], got[False][2])
    monkeypatch.setattr(quantiles, "KEEP", 500)
    monkeypatch.setattr(quantiles, "READ", 1009)
    f = lambda v: np.abs(v - 4321)  # noqa: E731
    answers = []
    for on in (True, False):
        pure(on)
        s = quantiles.Spill()
        for part in np.array_split(x, 13):
            s.add(part)
        answers.append((s.percentiles((0, 50, 99, 99.9, 100), f), s.median()))
        s.close()
    ref = f(x).astype(np.float64)
    assert answers[0] == answers[1]
    assert answers[1][0][0] == [float(np.percentile(ref, q)) for q in (0, 50, 99, 99.9, 100)]
    assert answers[1][1] == float(np.median(x))


@pytest.mark.parametrize("sizes", ["one", "few", "many"])
def test_c_side_tally_is_numpys(pure, sizes: str) -> None:
    """src/tally.c's tally of a batch (per-second counts and bytes, data requests,
    reads, sizes): numpy's, on field views of COMPACT rows and of
    later.py's packed rows, with and without a mask, times before 0 and past the last
    second, flushes among the requests, and more distinct sizes than C keeps
    (numpy then)."""
    rng = np.random.default_rng(11)
    n = 20_003
    a = np.zeros(n, ordered.COMPACT)
    a["t"] = np.sort(rng.integers(-2 * 10**9, 9 * 10**9, size=n))
    a["t"][:5] = [-1, -(10**9) + 1, 0, 10**9 - 1, 10**9]
    a["op"] = rng.choice([OP["read"], OP["write"], OP["flush"]], size=n, p=[0.6, 0.3, 0.1])
    a["bytes"] = {
        "one": np.full(n, 4096),
        "few": rng.choice([512, 4096, 65536, 131072], size=n),
        "many": rng.integers(1, 4 * fidsums.SIZES_C, size=n) * 512,
    }[sizes]
    packed = later.rep_rows(a)
    mask = rng.random(n) < 0.7
    for rows in (a, packed):
        for t in (rows["t"], rows["t"] - 12345):
            for m in (None, mask):
                got = []
                for on in (True, False):
                    pure(on)
                    got.append(fidsums.Side(7).tally(t, rows, m))
                ref, c = got
                assert c[0] == ref[0] == (n if m is None else int(mask.sum()))
                assert np.array_equal(c[1], ref[1]) and c[1].dtype == ref[1].dtype
                assert c[2].tobytes() == ref[2].tobytes()  # the same sums, bit for bit
                assert c[3:] == ref[3:]
    assert sizes != "many" or fidsums._tally_c(a["t"], a, None, 7) is None


@pytest.mark.parametrize("window_s", [5.0, 2.5, 0.3])
def test_c_window_counts_are_numpys(pure, window_s: float) -> None:
    """src/tally.c's count of requests per window and second (Windows.times):
    numpy's, on a column and on a field view, times before 0 and past the end."""
    rng = np.random.default_rng(12)
    a = np.zeros(30_011, ordered.COMPACT)
    a["t"] = rng.integers(-(10**9), 23 * 10**9, size=len(a))
    got = []
    for on in (True, False):
        pure(on)
        w = timewindows.Windows(20 * 10**9, window_s)
        w.times(0, a["t"])
        w.times(1, np.ascontiguousarray(a["t"][::3]) - 777)
        got.append(w.counts)
    assert np.array_equal(got[0], got[1]) and got[0].sum() > 0.8 * len(a)
