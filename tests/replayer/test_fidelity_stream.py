"""Fidelity streamed in bounded memory (issue 23) against the in-memory reference:
the same answers, whatever the chunks, batches and spills fall."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from trace_helpers import header, make_trace, workload_records

from base.errors import IotapeError
from recorder.tracefile import TraceWriter
from replayer.plan import locality
from replayer.plan.source import OP, load
from replayer.run import fidelity, fidstream, later, localitystream, ordered, quantiles
from replayer.run.pairing import Pairer, first_come, keys


def _orig(n: int, seed: int) -> np.ndarray:
    """A 20 s trace with repeated (op, offset, size) keys, fsyncs (the submitter's and
    the device's), several streams, in completion order as a recording is."""
    rng = np.random.default_rng(seed)
    o = workload_records(n, seed=seed)
    o["ts_queue_ns"] = np.sort(rng.integers(10**9, 21 * 10**9, size=n))
    o["ts_issue_ns"] = o["ts_queue_ns"] + rng.integers(0, 1000, size=n)
    o["ts_complete_ns"] = o["ts_issue_ns"] + rng.integers(1, 20 * 10**6, size=n)
    o["offset"] = rng.integers(0, 64, size=n) * 4096  # keys repeat: the k-th counts
    flush = rng.random(n) < 0.03
    o["op"][flush] = OP["flush"]
    o["bytes"][flush] = 0
    o["pid"][flush] = np.where(rng.random(int(flush.sum())) < 0.5, 0, 1234)
    return o[np.argsort(o["ts_complete_ns"], kind="stable")]


def _replay(o: np.ndarray, seed: int, synthetic: bool = False) -> np.ndarray:
    """o replayed 7 ms late, jittered, slowly drifting, with 2 % lost and 1 % extra."""
    rng = np.random.default_rng(seed + 1)
    r = o[rng.random(len(o)) >= 0.02].copy()
    extra = o[rng.random(len(o)) < 0.01].copy()
    extra["offset"] = rng.integers(1000, 2000, size=len(extra)) * 4096
    both = np.empty(len(r) + len(extra), o.dtype)  # np.concatenate would pack the dtype
    both[: len(r)], both[len(r) :] = r, extra
    r = both
    t = r["ts_issue_ns"].astype(np.int64)
    late = 7_000_000 + rng.integers(-300_000, 2_000_000, size=len(r)) + (t - 10**9) // 1000
    for col in ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns"):
        r[col] = r[col].astype(np.int64) + late
    if synthetic:
        r["offset"] = rng.integers(5000, 9000, size=len(r)) * 4096
    return r[np.argsort(r["ts_complete_ns"], kind="stable")]


def _files(tmp_path: Path, o, r, labelled: bool = False, chunk: int = 97) -> tuple[Path, Path]:
    po = make_trace(tmp_path / "o.iot", o, chunk_records=chunk)
    h = header()
    if labelled:
        h["metadata"] = {"stream_labels": "from the replay plan's jobs (iotape replay run)"}
        h["streams"] = {"0": "other", "1": "db-read", "5": "log-write"}
    pr = tmp_path / "r.iot"
    with TraceWriter(pr, h, chunk_records=chunk + 6) as w:
        w.write(r)
        w.close({"stop_reason": "duration", "lost": {}, "pre_start": 0})
    return po, pr


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> None:
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize(
    ("batch", "keep", "window", "one_stream", "later_mem"),
    [
        (ordered.BATCH, quantiles.KEEP, 5.0, False, later.MEM_BYTES),
        (250, 300, 2.5, False, 40_000),
        (250, 300, 2.5, True, 0),
    ],
)
def test_streamed_answers_are_the_in_memory_ones(
    tmp_path: Path,
    monkeypatch,
    batch: int,
    keep: int,
    window: float,
    one_stream: bool,
    later_mem: int,
) -> None:
    # Small batches and spills: every batch boundary and the on-disk selection show.
    # One stream (a capture of one job): each batch's rows taken without a mask,
    # its gaps kept once with all streams' (Figures.mirror). The calls waiting for
    # the clock offset held in memory, partly on file, or all on file (later.py).
    monkeypatch.setattr(ordered, "BATCH", batch)
    monkeypatch.setattr(quantiles, "KEEP", keep)
    monkeypatch.setattr(later, "MEM_BYTES", later_mem)
    o = _orig(6000, seed=11)
    if one_stream:
        o["stream"] = o["stream"][0]
    po, pr = _files(tmp_path, o, _replay(o, 11))
    ref = fidelity.compare_in_memory(po, pr, window)
    got = fidelity.compare(po, pr, window)
    assert ref["overall"]["match_share"] > 0.9 and len(ref["windows"]) > 3
    _same(got, ref)


def test_a_second_stream_takes_the_gaps_kept_for_the_first(tmp_path: Path, monkeypatch) -> None:
    """Pairs of one stream first (their gaps kept once, as all streams'), then of
    several: the first stream's figures are as where every stream kept its own
    from the start (all pairs settled at once, at the end of one batch)."""
    monkeypatch.setattr(quantiles, "KEEP", 300)
    o = _orig(6000, seed=11)
    late = o["ts_issue_ns"] > np.median(o["ts_issue_ns"])
    assert len(np.unique(o["stream"][late])) > 1
    o["stream"][~late] = o["stream"][0]
    po, pr = _files(tmp_path, o, _replay(o, 11))
    horizon = 10**9  # every pair within 30 ms: pairs settle batch by batch
    ref = fidelity.compare(po, pr, 2.5, horizon)
    unmirrored = []
    real = fidstream.Group.unmirror
    monkeypatch.setattr(
        fidstream.Group, "unmirror", lambda g, of: (unmirrored.append(1), real(g, of))[1]
    )
    # Batches of 250 rows (batches() took BATCH as its default when defined).
    monkeypatch.setattr(ordered.batches, "__defaults__", (250,))
    got = fidelity.compare(po, pr, 2.5, horizon)
    assert unmirrored == [1] and got["overall"]["match_share"] > 0.9
    _same(got, ref)


@pytest.mark.parametrize("later_mem", [later.MEM_BYTES, 0])
def test_streamed_keeps_a_labelled_replays_own_streams(
    tmp_path: Path, monkeypatch, later_mem: int
) -> None:
    monkeypatch.setattr(ordered, "BATCH", 400)
    monkeypatch.setattr(later, "MEM_BYTES", later_mem)
    o = _orig(3000, seed=4)
    r = _replay(o, 4)
    r["stream"] = np.where(r["stream"] == 3, 5, r["stream"])  # the plan's own ids
    po, pr = _files(tmp_path, o, r, labelled=True)
    _same(fidelity.compare(po, pr), fidelity.compare_in_memory(po, pr))


def test_streamed_synthetic_replay_is_aligned_at_first_request(tmp_path: Path) -> None:
    o = _orig(3000, seed=8)
    po, pr = _files(tmp_path, o, _replay(o, 8, synthetic=True))
    got = fidelity.compare(po, pr)
    assert got["alignment"].startswith("first request") and "windows" not in got
    _same(got, fidelity.compare_in_memory(po, pr))


@pytest.mark.parametrize(("chunk", "batch"), [(1, 1), (7, 5), (97, 1000), (500, 3)])
def test_batches_are_loads_order_across_chunk_boundaries(
    tmp_path: Path, chunk: int, batch: int
) -> None:
    o = _orig(1500, seed=2)
    # Ties: many requests at the same time, falling on both sides of chunk boundaries.
    o["ts_issue_ns"][100:400] = o["ts_issue_ns"][100]
    o["ts_queue_ns"][100:400] = o["ts_queue_ns"][100]
    path = make_trace(tmp_path / "t.iot", o, chunk_records=chunk)
    src = load(path)
    s = ordered.scan(path)
    parts = list(ordered.batches(s, batch))
    got = np.concatenate(parts)
    assert len(parts) > 1 or chunk == 500
    assert s.count == len(src.records) and s.duration_ns == src.duration_ns
    assert np.array_equal(got["t"], src.t_ns)
    for col in ("offset", "bytes", "op", "stream", "dev", "tid"):
        assert np.array_equal(got[col], src.records[col]), col


def test_scan_names_the_misaligned_record_as_load_does(tmp_path: Path) -> None:
    o = _orig(500, seed=3)
    i = int(np.flatnonzero(o["op"] != OP["flush"])[200])
    o["offset"][i] += 7
    path = make_trace(tmp_path / "t.iot", o, chunk_records=33)
    with pytest.raises(Exception) as ref:
        load(path)
    with pytest.raises(Exception) as got:
        ordered.scan(path)
    assert str(got.value) == str(ref.value) and "not 512-aligned" in str(got.value)


@pytest.mark.parametrize("app_flush_at", [None, 1400])
def test_scan_takes_the_files_flush_rule_in_one_read(tmp_path: Path, app_flush_at) -> None:
    """Kernel flushes in every chunk, a process's flush only near the end (or none):
    the file's rule (load's) decides which flushes count, for every chunk, and the
    misaligned record is named by its place under that rule."""
    o = _orig(1500, seed=4)
    flush = o["op"] == OP["flush"]
    o["pid"][flush] = 0
    if app_flush_at is not None:
        o["op"][app_flush_at], o["bytes"][app_flush_at], o["pid"][app_flush_at] = OP["flush"], 0, 99
    path = make_trace(tmp_path / "t.iot", o, chunk_records=50)
    s, src = ordered.scan(path), load(path)
    assert s.app_flush == (app_flush_at is not None)
    assert s.count == len(src.records) and s.duration_ns == src.duration_ns
    got = np.concatenate(list(ordered.batches(s, 200)))
    assert np.array_equal(got["op"], src.records["op"])
    late = int(np.flatnonzero(o["op"] != OP["flush"])[-50])
    o["offset"][late] += 7
    bad = make_trace(tmp_path / "bad.iot", o, chunk_records=50)
    with pytest.raises(Exception) as ref:
        load(bad)
    with pytest.raises(Exception) as err:
        ordered.scan(bad)
    assert str(err.value) == str(ref.value) and "not 512-aligned" in str(err.value)


@pytest.mark.parametrize("dist", ["uniform", "ties", "heavy"])
def test_spilled_percentiles_are_numpys(monkeypatch, dist: str) -> None:
    """Ranks narrowed over several reads of the spill (KEEP small), all at once."""
    monkeypatch.setattr(quantiles, "KEEP", 1000)
    monkeypatch.setattr(quantiles, "READ", 777)
    rng = np.random.default_rng(1)
    n = 20_001
    x = {
        "uniform": rng.integers(-(10**12), 10**12, size=n),
        "ties": rng.integers(0, 3, size=n) * 10**9,
        "heavy": (rng.pareto(0.8, size=n) * 1e5).astype(np.int64),
    }[dist]
    s = quantiles.Spill()
    for part in np.array_split(x, 37):
        s.add(part)
    shift = 123_456
    f = lambda v: np.abs(v - shift)  # noqa: E731
    qs = (0, 50, 90, 99, 99.9, 100)
    vals, top = s.percentiles(qs, f)
    ref = f(x).astype(np.float64)
    assert vals == [float(np.percentile(ref, q)) for q in qs] and top == ref.max()
    assert s.median() == float(np.median(x))
    s.add(x[:1])  # an even count: the median of two ranks
    assert s.median() == float(np.median(np.r_[x, x[:1]]))
    s.close()


def test_first_come_is_the_kth_with_the_kth() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 20, size=500).astype(np.uint64)
    b = rng.integers(0, 20, size=450).astype(np.uint64)
    ia, ib = first_come(a, b)
    assert np.array_equal(a[ia], b[ib])
    for k in range(20):
        m = min(int((a == k).sum()), int((b == k).sum()))
        assert np.array_equal(np.sort(ia[a[ia] == k]), np.flatnonzero(a == k)[:m])
        assert np.array_equal(np.sort(ib[b[ib] == k]), np.flatnonzero(b == k)[:m])


def test_a_request_beyond_the_horizon_stays_unpaired() -> None:
    """The original reads X at 1 s and at 100 s, the replay only at 100 s. Holding
    both traces whole paired the 1 s read with the 100 s one (the first with the
    first: 99 s of error, and every later read of X one off); within the horizon
    the 100 s reads pair and the 1 s read is unpaired."""
    o = np.zeros(2, ordered.COMPACT)
    o["t"], o["n"], o["offset"], o["bytes"] = [10**9, 100 * 10**9], [0, 1], 4096, 4096
    r = o[1:].copy()
    r["n"] = 0
    p = Pairer(horizon_ns=60 * 10**9)
    s1 = p.step(o[:1], r[:0], 50 * 10**9)
    s2 = p.step(o[1:], r[:0], 80 * 10**9)
    assert len(s1.orig) == len(s2.orig) == 0 and len(s2.lost_orig) == 1
    s3 = p.step(o[:0], r, None)
    assert s3.orig["t"].tolist() == [100 * 10**9] and p.held == 0
    assert keys(s3.orig).tolist() == keys(s3.rep).tolist()


@pytest.mark.parametrize(
    ("piece", "devices"), [(localitystream.PIECE, 2), (50, 2), (1, 2), (50, 1), (1, 1)]
)
def test_streamed_locality_is_profiles(
    tmp_path: Path, monkeypatch, piece: int, devices: int
) -> None:
    """Skewed reuse over thousands of units, requests across unit boundaries, two
    devices, flushes and discards (not counted): the streamed profile, its LRU
    curve taken a piece at a time, is profile()'s."""
    monkeypatch.setattr(ordered, "BATCH", 300)
    monkeypatch.setattr(localitystream, "PIECE", piece)
    rng = np.random.default_rng(9)
    o = _orig(4000, seed=9)
    o["offset"] = (np.minimum(rng.zipf(1.2, size=len(o)), 3000) * 61440) // 512 * 512
    o["bytes"] = np.where(o["op"] == OP["flush"], 0, rng.choice([4096, 131072], size=len(o)))
    o["op"][rng.random(len(o)) < 0.02] = OP["discard"]
    if devices == 1:  # units numbered through a table, not sorted
        o["dev"] = o["dev"][0]
    # A sequential run of writes, in issue order.
    o = o[np.argsort(o["ts_issue_ns"], kind="stable")]
    w = np.flatnonzero(o["op"] == OP["write"])[300:900]
    o["offset"][w] = (1 << 30) + np.r_[0, np.cumsum(o["bytes"][w][:-1].astype(np.int64))]
    o = o[np.argsort(o["ts_complete_ns"], kind="stable")]
    path = make_trace(tmp_path / "t.iot", o, chunk_records=61)
    src = load(path)
    ref = locality.profile(src.records, src.t_ns)
    got = localitystream.profile(ordered.batches(ordered.scan(path)))
    assert ref["sequential_share"] > 0 and 0 < ref["lru_hit_ratio"][0] < ref["lru_hit_ratio"][-1]
    assert got == ref
    caps = [1, 7, 100, 10**6]
    got = localitystream.profile(ordered.batches(ordered.scan(path)), caps)
    assert got == locality.profile(src.records, src.t_ns, caps)


def test_a_lost_request_no_longer_pairs_its_key_a_minute_on(tmp_path: Path) -> None:
    """The original reads X at 1 s and 100 s; the replay lost the first. Held whole,
    the 1 s read paired with the replay's 100 s one (99 s of error); streamed, within
    the 60 s horizon, the 100 s reads pair and the first is unpaired."""
    o = workload_records(12, seed=1)
    o["ts_issue_ns"] = (np.arange(12) * 10 + 1) * 10**9
    o["ts_queue_ns"], o["ts_complete_ns"] = o["ts_issue_ns"] - 1000, o["ts_issue_ns"] + 10**5
    o["offset"] = np.arange(12) * 4096
    o["offset"][0] = o["offset"][10]
    o["op"][0], o["bytes"][0] = o["op"][10], o["bytes"][10]
    r = o[1:].copy()
    po, pr = make_trace(tmp_path / "o.iot", o), make_trace(tmp_path / "r.iot", r)
    old = fidelity.compare_in_memory(po, pr)["overall"]["issue_error"]
    new = fidelity.compare(po, pr)["overall"]
    assert old["max_ms"] > 50_000
    assert new["issue_error"]["max_ms"] == 0 and new["match_share"] == round(11 / 12, 4)
    # A horizon wider than the gap gives the old pairing back.
    wide = fidelity.compare(po, pr, horizon_ns=200 * 10**9)["overall"]["issue_error"]
    assert wide == old


def test_horizon_must_be_positive(tmp_path: Path) -> None:
    from base.errors import IotapeError
    from iotape.commands.replay.fidelity import fidelity as fidelity_cli

    po = make_trace(tmp_path / "o.iot", workload_records(20, seed=1))
    with pytest.raises(IotapeError, match=r"--horizon 0.0: must be a positive"):
        fidelity_cli(po, po, None, 5.0, 0.0, False)


@pytest.mark.parametrize("split", [None, 60, 75])
def test_pairs_form_as_if_requests_came_one_at_a_time(split: int | None) -> None:
    """Original X at 0 s and 50 s, replay X at 70 s and 200 s, horizon 60 s: when the
    70 s replay comes, the 0 s original is out of reach and the 50 s one pairs with
    it; the 200 s replay is unpaired. In one batch or two, the same pairs."""
    o = np.zeros(2, ordered.COMPACT)
    o["t"], o["n"], o["offset"], o["bytes"] = [0, 50 * 10**9], [0, 1], 4096, 4096
    r = o.copy()
    r["t"] = [70 * 10**9, 200 * 10**9]
    p = Pairer(horizon_ns=60 * 10**9)
    if split is None:
        steps = [p.step(o, r, None)]
    else:
        cut = split * 10**9
        steps = [p.step(o[o["t"] < cut], r[r["t"] < cut], cut)]
        steps.append(p.step(o[o["t"] >= cut], r[r["t"] >= cut], None))
    pairs = [(int(a), int(b)) for s in steps for a, b in zip(s.orig["t"], s.rep["t"], strict=True)]
    assert pairs == [(50 * 10**9, 70 * 10**9)]
    assert sorted(int(x) for s in steps for x in s.lost_orig["t"]) == [0]
    assert sorted(int(x) for s in steps for x in s.lost_rep["t"]) == [200 * 10**9]


def test_unordered_sinks_get_pairs_as_they_form(tmp_path: Path) -> None:
    """A 20 s trace with lost requests, horizon 60 s: a sink that does not need the
    original's order (relabelling, the gaps) gets the pairs batch by batch, not a
    horizon later (what waits is bounded by the batches); an ordered one gets them
    in the original's order. Both get the pairs of one batch holding everything."""
    from replayer.run import fidstream

    o = _orig(6000, seed=5)
    po, pr = _files(tmp_path, o, _replay(o, 5))

    class Log(fidstream.Sink):
        def __init__(self, in_order: bool) -> None:
            self.ordered = in_order
            self.origs = 0
            self.calls: list[tuple[int, np.ndarray, np.ndarray]] = []

        def orig(self, a: np.ndarray) -> None:
            self.origs += 1

        def paired(self, a: np.ndarray, b: np.ndarray) -> None:
            self.calls.append((self.origs, a[["t", "n"]].copy(), b["n"].copy()))

    def run(batch: int, in_order: bool) -> tuple[Log, np.ndarray, np.ndarray]:
        sink = Log(in_order)
        so, sr = ordered.scan(po), ordered.scan(pr)
        fidstream.drive_batches(
            ordered.batches(so, batch), ordered.batches(sr, batch), sink, 60 * 10**9
        )
        a = np.concatenate([a for _, a, _ in sink.calls])
        b = np.concatenate([b for _, _, b in sink.calls])
        return sink, a, b

    _, ref_o, ref_r = run(10**6, True)
    assert np.array_equal(np.lexsort((ref_o["n"], ref_o["t"])), np.arange(len(ref_o)))
    sink, got_o, got_r = run(300, True)
    assert np.array_equal(got_o, ref_o) and np.array_equal(got_r, ref_r)
    sink, got_o, got_r = run(300, False)
    assert sink.origs > 10
    early = sum(len(a) for seen, a, _ in sink.calls if seen <= sink.origs // 2)
    assert early > 0.3 * len(got_o)
    back = np.lexsort((got_o["n"], got_o["t"]))
    assert np.array_equal(got_o[back], ref_o) and np.array_equal(got_r[back], ref_r)


def test_batches_join_until_as_many_as_the_pairing_holds() -> None:
    """A replay slower than its original leaves the pairing holding much of it, which
    it matches again at every step: batches then join up to what it holds."""
    from replayer.run.fidstream import _at_least

    parts = []
    for i in range(10):
        b = np.zeros(10, ordered.COMPACT)
        b["t"] = np.arange(i * 10, i * 10 + 10)
        parts.append(b)
    held = iter([0, 25, 25, 25, 25, 25, 25, 25, 25, 25])
    got = list(_at_least(iter(parts), lambda: next(held)))
    assert [len(g) for g in got] == [10, 30, 30, 30]
    assert np.array_equal(np.concatenate(got)["t"], np.arange(100))


@pytest.mark.parametrize("devices", [1, 2])
def test_streamed_locality_of_requests_within_a_unit_is_profiles(
    tmp_path: Path, monkeypatch, devices: int
) -> None:
    """Every request inside one 64 KiB unit (4 KiB aligned, the full-rate captures'
    shape), which takes the units' short way: still profile()'s figures."""
    monkeypatch.setattr(ordered, "BATCH", 300)
    monkeypatch.setattr(localitystream, "PIECE", 50)
    rng = np.random.default_rng(11)
    o = _orig(4000, seed=11)
    o["offset"] = np.minimum(rng.zipf(1.3, size=len(o)), 40000) * 4096
    o["bytes"] = np.where(o["op"] == OP["flush"], 0, 4096)
    if devices == 1:
        o["dev"] = o["dev"][0]
    o = o[np.argsort(o["ts_complete_ns"], kind="stable")]
    path = make_trace(tmp_path / "t.iot", o, chunk_records=61)
    src = load(path)
    ref = locality.profile(src.records, src.t_ns)
    assert 0 < ref["lru_hit_ratio"][0] < ref["lru_hit_ratio"][-1]
    assert localitystream.profile(ordered.batches(ordered.scan(path))) == ref


def test_the_plan_read_beside_the_scans_fails_after_them(tmp_path: Path) -> None:
    """The plan's mapping is read while both traces are scanned (mapped.early): a
    bad --plan is its one line, and a bad trace's error still comes first."""
    o = _orig(500, seed=3)
    po, pr = _files(tmp_path, o, _replay(o, 3))
    with pytest.raises(IotapeError, match=r"--plan .*nowhere: no plan\.json there"):
        fidelity.compare(po, pr, plan=tmp_path / "nowhere")
    bad = tmp_path / "bad.iot"
    bad.write_bytes(b"not a trace at all")
    with pytest.raises(IotapeError, match=r"bad\.iot") as e:
        fidelity.compare(po, bad, plan=tmp_path / "nowhere")
    assert "no plan.json" not in str(e.value)
