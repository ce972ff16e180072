"""`--remap compact` (issue 39): the touched extents packed in offset order onto a
target of the footprint, per device, whole or streamed; the plan's mapping, through
which `replay fidelity` pairs for every remap; the plan's locality prediction.

The replays here are what a perfect fio makes of the plan: every iolog entry issued
at its time plus a jitter (compact_helpers.replay_of_plan), so pairing is tested
against the plan's own iologs, not against the mapping it pairs through. The kernel
replay onto a loop device is test_replay_compact_kernel.py's."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from compact_helpers import GiB, MiB, far_trace, replay_of_plan, sparse
from helpers import iotape
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_helpers import DT, NVME, SDA, header

import schemas
from recorder.tracefile import open_trace, write_trace
from replayer.plan import compact, sources
from replayer.plan.build import PlanOptions, plan
from replayer.plan.mapping import Mapper
from replayer.run import fidelity, predict
from schemas.documents.plan import ReplayPlan

OP = schemas.enum("op")
STREAM = schemas.enum("stream")


def _plan(opts: PlanOptions) -> dict:
    """A plan as `replay plan` makes it: with its locality prediction."""
    return plan(opts, predict.predict)


def _footprint(man: dict) -> int:
    """The bytes of touched granules the plan's mapping records, all devices."""
    return sum(n for d in man["mapping"]["devices"] for _s, n in d["extents"] or [])


def _log_requests(jobdir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, sizes) of every read/write entry of the plan's iologs."""
    off, b = [], []
    for log in (jobdir / "iologs").glob("*.log"):
        for line in log.read_text().splitlines()[1:]:
            f = line.split()
            # v3 (pieces): time file op offset size; v2 (lanes): file op offset size
            f = f[1:] if len(f) == 5 else f
            if len(f) == 4 and f[1] in ("read", "write"):
                off.append(int(f[2]))
                b.append(int(f[3]))
    return np.array(off, np.int64), np.array(b, np.int64)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1 << 28), st.integers(1, 1 << 11)), min_size=1, max_size=60),
    st.sampled_from([512, 4096]),
)
def test_pack_keeps_order_distinctness_and_runs(reqs, block) -> None:
    off = np.array([r[0] for r in reqs], np.int64) * block
    b = np.array([r[1] for r in reqs], np.int64) * block
    g = compact.granules(off, b)
    new, nb = compact.pack(off, b, g, 0, block)
    assert (nb == b).all()
    assert (new >= 0).all() and (new + nb <= compact.footprint(g)).all()
    order = np.argsort(off, kind="stable")
    # Regions keep their order, distinct offsets stay distinct, and how far apart
    # two requests are shrinks only by whole untouched granules.
    assert (np.diff(new[order]) >= 0).all()
    assert len(np.unique(new)) == len(np.unique(off))
    assert ((off - new) % compact.GRANULE == 0).all()
    # A request that started where another ended still does.
    ends = dict(zip((off + b).tolist(), (new + nb).tolist(), strict=False))
    for o, n in zip(off.tolist(), new.tolist(), strict=True):
        if o in ends:
            assert ends[o] == n


def test_compact_packs_a_far_trace_onto_its_footprint(tmp_path: Path) -> None:
    t = far_trace(tmp_path / "t.iot")
    dry = _plan(PlanOptions(t, None, mode="exact", remap="compact", dry_run=True))
    fp = _footprint(dry)
    assert fp < 64 * MiB  # four regions of a few MiB, 89 GiB apart
    tgt = sparse(tmp_path / "tgt.img", int(fp * 1.15) // 4096 * 4096)
    man = _plan(
        PlanOptions(t, tmp_path / "j", mode="exact", remap="compact", targets=[f"all={tgt}"])
    )
    off, b = _log_requests(tmp_path / "j")
    assert len(off) == 4000
    assert off.min() >= 0 and (off + b).max() <= fp
    with open_trace(t) as tr:
        r = tr.read_all()
    # What was distinct stays distinct.
    assert len(np.unique(off)) == len(np.unique(r["offset"]))
    pr = man["prediction"]
    assert pr["faithful"], pr["why_not"]
    assert pr["max_gap_pp"] <= 1.0 and pr["footprint_bytes"][0] == pr["footprint_bytes"][1]
    assert pr["sequential_share"][0] == pr["sequential_share"][1] > 0.1


def test_a_target_smaller_than_the_footprint_is_refused_in_one_line(tmp_path: Path) -> None:
    t = far_trace(tmp_path / "t.iot")
    fp = _footprint(_plan(PlanOptions(t, None, mode="exact", remap="compact", dry_run=True)))
    tgt = sparse(tmp_path / "small.img", fp - MiB)
    jobs = tmp_path / "jobs"
    res = iotape("replay", "plan", str(t), "-o", str(jobs), "--remap", "compact",
                 "--target", f"all={tgt}")  # fmt: skip
    assert res.returncode != 0
    msg = res.stderr.strip()
    assert len(msg.splitlines()) == 1, msg
    assert re.search(rf"footprint .* is {fp} bytes", msg) and "small.img" in msg, msg
    assert not jobs.exists()


def test_scale_onto_a_small_target_predicts_a_more_cacheable_workload(tmp_path: Path) -> None:
    t = far_trace(tmp_path / "t.iot")
    tgt = sparse(tmp_path / "tgt.img", 8 * MiB)
    man = _plan(PlanOptions(t, tmp_path / "j", mode="exact", remap="scale", targets=[f"all={tgt}"]))
    pr = man["prediction"]
    assert not pr["faithful"]
    assert pr["footprint_bytes"][1] < pr["footprint_bytes"][0] / 2
    o, r = pr["lru_hit_ratio"]
    assert r[3] > o[3] + 0.2  # at 1 % of the footprint
    assert ReplayPlan.read(tmp_path / "j" / "plan.json").prediction == pr


def _two_device_trace(path: Path) -> Path:
    """db-write on sda far out, log-write on nvme0n1 near its start."""
    rng = np.random.default_rng(7)
    n = 1000
    r = np.zeros(n, dtype=DT)
    r["ts_issue_ns"] = np.sort(rng.integers(1_000_000, 1_000_000_000, n))
    r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
    r["ts_complete_ns"] = r["ts_issue_ns"] + 100_000
    nv = np.arange(n) % 3 == 0
    r["dev"] = np.where(nv, NVME, SDA)
    r["offset"] = np.where(
        nv, (np.arange(n) // 3) * 4096, 40 * GiB + rng.integers(0, 512, n) * 8192
    )
    r["bytes"] = 4096
    r["op"] = OP["write"]
    r["stream"] = np.where(nv, STREAM["log-write"], STREAM["db-write"])
    r["pid"] = r["tid"] = 100
    h = header()
    h["streams"] = {str(v): k for k, v in STREAM.items()}
    return write_trace(path, h, r)


def test_devices_on_one_target_are_packed_one_after_the_other(tmp_path: Path) -> None:
    t = _two_device_trace(tmp_path / "t.iot")
    tgt = sparse(tmp_path / "tgt.img", 16 * MiB)
    man = _plan(
        PlanOptions(t, tmp_path / "j", mode="exact", remap="compact", targets=[f"all={tgt}"])
    )
    at = {p["device"]: p["packed_at"] for p in man["mapping"]["placements"]}
    ext = {d["device"]: d["extents"] for d in man["mapping"]["devices"]}
    assert at[SDA] == 0 and at[NVME] == sum(n for _s, n in ext[SDA])
    logs = tmp_path / "j" / "iologs"
    sda = _log_requests_of(logs, "db-write")
    nvme = _log_requests_of(logs, "log-write")
    assert sda.max() < at[NVME] <= nvme.min()
    rep = replay_of_plan(tmp_path / "j", tmp_path / "r.iot")
    f = fidelity.compare(t, rep, plan=tmp_path / "j")
    assert f["pairing"]["paired"] == 1000


def _log_requests_of(logs: Path, stream: str) -> np.ndarray:
    out = []
    for log in logs.glob(f"*{stream}*.log"):
        out += [int(x.split()[-2]) for x in log.read_text().splitlines()[1:] if " write " in x]
    return np.array(out)


@pytest.mark.parametrize(
    ("remap", "size", "least"),
    [("compact", None, 0.999), ("wrap", 48 * MiB, 0.99), ("scale", 48 * MiB, 0.99),
     ("fit", 90 * GiB, 0.999)],
)  # fmt: skip
def test_fidelity_pairs_through_every_remap(tmp_path: Path, remap, size, least) -> None:
    t = far_trace(tmp_path / "t.iot")
    if size is None:
        size = int(_footprint(_plan(PlanOptions(t, None, remap=remap, dry_run=True))) * 1.15)
    tgt = sparse(tmp_path / "tgt.img", size // 4096 * 4096)
    jd = tmp_path / "j"
    _plan(PlanOptions(t, jd, mode="exact", remap=remap, targets=[f"all={tgt}"]))
    rep = replay_of_plan(jd, tmp_path / "r.iot")
    f = fidelity.compare(t, rep, plan=jd)
    p = f["pairing"]
    assert p["through"] == f"plan mapping (--remap {remap})"
    assert p["paired_share"] >= least, p
    assert f["overall"]["issue_error"]["p99_ms"] < 0.3  # the jitter: pairs are the right ones
    if remap in ("compact", "scale"):
        bare = fidelity.compare(t, rep)["pairing"]
        assert bare["through"] == "recorded offsets" and bare["paired_share"] < 0.5


def test_fidelity_finds_the_plan_the_replay_names(tmp_path: Path) -> None:
    t = far_trace(tmp_path / "t.iot")
    tgt = sparse(tmp_path / "tgt.img", 32 * MiB)
    jd = tmp_path / "j"
    _plan(PlanOptions(t, jd, mode="exact", remap="scale", targets=[f"all={tgt}"]))
    rep = replay_of_plan(jd, tmp_path / "r.iot")
    with open_trace(rep) as tr:
        h, r = dict(tr.header), tr.read_all()
    h["metadata"] = {"replay_of": {"trace": str(t), "plan": str(jd / "plan.json")}}
    named = write_trace(tmp_path / "named.iot", h, r)
    res = iotape("replay", "fidelity", str(t), str(named), "--json", check=True)
    p = json.loads(res.stdout)["iotape"]["pairing"]
    assert p["plan"] == str(jd / "plan.json") and p["paired"] == 4000
    res = iotape("replay", "fidelity", str(t), str(named))
    assert "4000 paired (100.00 % of the original) through plan mapping (--remap scale)" in (
        res.stdout
    ), res.stdout


def test_scaled_databases_pair_with_the_first_and_count_the_others(tmp_path: Path) -> None:
    t = far_trace(tmp_path / "t.iot", meta={"mailboxes": 100, "databases": 1})
    fp = _footprint(_plan(PlanOptions(t, None, remap="compact", dry_run=True)))
    tgt = sparse(tmp_path / "tgt.img", int(2 * fp * 1.15) // 4096 * 4096)
    jd = tmp_path / "j"
    man = _plan(
        PlanOptions(t, jd, mode="exact", remap="compact", databases=2, targets=[f"all={tgt}"])
    )
    assert {j["db"] for j in man["jobs"]} == {0, 1}
    rep = replay_of_plan(jd, tmp_path / "r.iot")
    p = fidelity.compare(t, rep, plan=jd)["pairing"]
    # Each database replays a seeded half (--databases 2 keeps the mailboxes): an
    # original pairs with whichever replayed it (database 0 alone replays ~2000);
    # about a quarter is replayed by neither, a quarter by both.
    o, r = p["original_unpaired"], p["replay_unpaired"]
    with open_trace(rep) as tr:
        replayed = tr.read_all()
    assert p["paired"] + sum(o.values()) == 4000
    assert p["paired"] + sum(r.values()) == len(replayed)
    assert o["replayed_nowhere"] == 0 and p["paired"] >= 2800, p
    assert r["other"] == 0 and r["extra_copies_expected"] >= 800, p  # ~1000 expected


def test_a_streamed_plan_maps_as_the_whole_one(tmp_path: Path, monkeypatch) -> None:
    t = far_trace(tmp_path / "t.iot", n=6000)
    tgt = sparse(tmp_path / "tgt.img", 64 * MiB)
    whole = _plan(PlanOptions(t, tmp_path / "w", remap="compact", targets=[f"all={tgt}"]))
    monkeypatch.setattr(sources, "STREAM_ABOVE", 100)
    from replayer.plan import stream

    monkeypatch.setattr(stream, "CHUNK", 1000)
    streamed = _plan(PlanOptions(t, tmp_path / "s", remap="compact", targets=[f"all={tgt}"]))
    assert streamed.get("exact_layout") == "lanes" and whole.get("exact_layout") is None
    assert streamed["mapping"] == whole["mapping"]
    assert streamed["prediction"] == whole["prediction"]
    a, b = _log_requests(tmp_path / "w"), _log_requests(tmp_path / "s")
    assert sorted(zip(*a, strict=True)) == sorted(zip(*b, strict=True))
    rep = replay_of_plan(tmp_path / "s", tmp_path / "r.iot")
    assert fidelity.compare(t, rep, plan=tmp_path / "s")["pairing"]["paired_share"] >= 0.999


def test_the_prediction_is_what_fidelity_then_measures(tmp_path: Path) -> None:
    """The plan's prediction of the remapped trace's locality is the locality fidelity
    measures of a replay that issued every planned request."""
    t = far_trace(tmp_path / "t.iot")
    tgt = sparse(tmp_path / "tgt.img", 12 * MiB)
    jd = tmp_path / "j"
    man = _plan(PlanOptions(t, jd, mode="exact", remap="wrap", targets=[f"all={tgt}"]))
    rep = replay_of_plan(jd, tmp_path / "r.iot", jitter_ns=1)
    loc = fidelity.compare(t, rep, plan=jd)["locality"]
    pr = man["prediction"]
    for k in ("footprint_bytes", "lru_hit_ratio", "max_gap_pp", "faithful"):
        assert pr[k] == loc[k], k
    m = ReplayPlan.read(jd / "plan.json").mapping
    assert m is not None
    assert predict.predict(t, m) == pr
    with pytest.raises(Exception, match=r"mapping\.version"):
        Mapper(m.model_copy(update={"version": 99}), {})


def test_old_plans_without_a_mapping_pair_by_offsets(tmp_path: Path) -> None:
    t = far_trace(tmp_path / "t.iot")
    tgt = sparse(tmp_path / "tgt.img", 90 * GiB)
    jd = tmp_path / "j"
    _plan(PlanOptions(t, jd, mode="exact", targets=[f"all={tgt}"]))
    doc = json.loads((jd / "plan.json").read_text())
    del doc["mapping"]
    (jd / "plan.json").write_text(json.dumps(doc))
    rep = replay_of_plan(jd, tmp_path / "r.iot")
    p = fidelity.compare(t, rep, plan=jd)["pairing"]
    assert p["through"] == "recorded offsets" and p["paired"] == 4000
    shutil.rmtree(jd)


def test_a_smaller_unit_packs_tighter_and_is_recorded(tmp_path: Path) -> None:
    t = far_trace(tmp_path / "t.iot")
    big = _plan(PlanOptions(t, None, remap="compact", dry_run=True))
    small = _plan(PlanOptions(t, None, remap="compact", dry_run=True, remap_unit=64 << 10))
    assert small["mapping"]["granule_bytes"] == 64 << 10
    assert _footprint(small) < _footprint(big)
    assert small["prediction"]["faithful"] and small["prediction"]["max_gap_pp"] <= 1.0
    res = iotape("replay", "plan", str(t), "--remap", "compact", "--remap-unit", "3K",
                 "--dry-run")  # fmt: skip
    assert res.returncode != 0 and "--remap-unit 3072: must be a power of two" in res.stderr


def test_device_names_with_a_colon_make_iolog_names_fio_can_open(tmp_path: Path) -> None:
    """An imported trace's devices are named like disksim:0; fio splits read_iolog
    at ':' and could not open the log."""
    t = _two_device_trace(tmp_path / "t.iot")
    with open_trace(t) as tr:
        h, r = dict(tr.header), tr.read_all()
    h["devices"] = [{**d, "name": f"disksim:{k}"} for k, d in enumerate(h["devices"])]
    t = write_trace(tmp_path / "colon.iot", h, r)
    tgt = sparse(tmp_path / "tgt.img", 16 * MiB)
    man = _plan(
        PlanOptions(t, tmp_path / "j", mode="exact", remap="compact", targets=[f"all={tgt}"])
    )
    names = {".".join(j["name"].split(".")[:3]) for j in man["jobs"]}  # pieces of two streams
    assert names == {"db0.db-write.disksim_0", "db0.log-write.disksim_1"}, names
    assert "disksim_0" in man["jobfile_text"]
    for line in man["jobfile_text"].splitlines():
        if line.startswith("read_iolog="):
            assert ":" not in line and (tmp_path / "j" / line.split("=", 1)[1]).is_file()
