"""Several source devices under one plan (issue 39): on one target range each gets a
region of its own whatever the remap (steps._regions), and `replay fidelity` pairs
a request only on the target its original was replayed on (mapping.Mapper's
by_target), so that two devices' requests at the same offsets are told apart.

The replays are what a perfect fio makes of the plan's iologs: every entry at its
time plus a jitter, on the device of the target its log names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from compact_helpers import N_EACH, GiB, MiB, same_offsets_trace, sparse
from trace_helpers import DT, NVME, SDA, header

import schemas
from recorder.tracefile import write_trace
from replayer.plan import iolog
from replayer.plan.build import PlanOptions, plan
from replayer.run import fidelity, predict
from replayer.run.mapped import mapper
from replayer.run.ordered import batches, scan
from replayer.run.pairing import Pairer

OP = schemas.enum("op")
STREAM = schemas.enum("stream")
N = N_EACH  # requests on each device (nvme0n1's each EARLIER_NS before sda's)


def _entries(jobdir: Path) -> list[tuple[int, str, str, int, int]]:
    """(time us, file, op, offset, bytes) of every read/write of the plan's iologs."""
    out = []
    for log in sorted((jobdir / "iologs").glob("*.log")):
        with open(log) as f:
            next(f, None)
            for t, e in iolog.iter_entry_times_us(f):
                if e[2] in ("read", "write"):
                    out.append((t, e[1], e[2], int(e[3]), int(e[4])))
    return out


def _replay(
    jobdir: Path,
    out: Path,
    devs: dict[str, int],
    only: str | None = None,
    recorded_as: dict[str, str] | None = None,
) -> Path:
    """A recorded replay of the plan: each entry at its time plus up to 0.2 ms, on
    the device of its target (`devs`: target path -> device number); `only`: that
    target's requests alone (the other's replay lost); `recorded_as`: the path the
    recording names each target's device by (its own path if not given)."""
    e = [x for x in _entries(jobdir) if only is None or x[1] == only]
    rng = np.random.default_rng(5)
    r = np.zeros(len(e), dtype=DT)
    r["ts_issue_ns"] = np.array([x[0] for x in e]) * 1000 + rng.integers(0, 200_000, len(e))
    r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
    r["ts_complete_ns"] = r["ts_issue_ns"] + 100_000
    r["dev"] = [devs[x[1]] for x in e]
    r["op"] = [OP[x[2]] for x in e]
    r["offset"] = [x[3] for x in e]
    r["bytes"] = [x[4] for x in e]
    r["stream"] = STREAM["other"]
    r["pid"] = r["tid"] = 4242
    h = header()
    named = recorded_as or {}
    h["devices"] = [
        {"name": f"loop{d & 0xFF}", "path": named.get(p, p), "dev": d, "major": 7,
         "minor": d & 0xFF, "logical_block_size": 512, "partition": None}
        for p, d in devs.items()
    ]  # fmt: skip
    h["streams"] = {str(v): k for k, v in STREAM.items()}
    return write_trace(out, h, r[np.argsort(r["ts_issue_ns"], kind="stable")])


def _plan(t: Path, jd: Path, remap: str, targets: list[str]) -> dict:
    return plan(PlanOptions(t, jd, mode="exact", remap=remap, targets=targets), predict.predict)


@pytest.mark.parametrize("remap", ["fit", "wrap", "scale"])
def test_devices_on_one_target_get_regions_of_their_own(tmp_path: Path, remap) -> None:
    t = same_offsets_trace(tmp_path / "t.iot")
    size = 10 * GiB if remap == "fit" else 64 * MiB
    tgt = sparse(tmp_path / "tgt.img", size)
    jd = tmp_path / "j"
    man = _plan(t, jd, remap, [f"all={tgt}"])
    region = {p["device"]: p["region"] for p in man["mapping"]["placements"]}
    (sda_at, sda_size), (nv_at, nv_size) = region[SDA], region[NVME]
    assert sda_at == 0 and nv_at == sda_at + sda_size and nv_at + nv_size == size
    if remap != "scale":
        assert nv_at % MiB == 0  # a request keeps its place in every cache unit
    reach = {d["device"]: d["end_bytes"] for d in man["mapping"]["devices"]}
    if remap == "fit":  # each device as recorded, in a region of its reach
        assert sda_size == -(-reach[SDA] // MiB) * MiB
    elif remap == "scale":  # one ratio for both devices
        assert abs((sda_size / nv_size) / (reach[SDA] / reach[NVME]) - 1) < 0.01
    seen = {}
    for _t, _f, _op, off, b in _entries(jd):
        seen.setdefault(off < nv_at, []).append((off, off + b))
    sda_w, nv_w = np.array(seen[True]), np.array(seen[False])
    assert len(sda_w) == N and len(nv_w) == N
    assert sda_w[:, 1].max() <= nv_at and nv_w[:, 1].max() <= size
    rep = _replay(jd, tmp_path / "r.iot", {tgt: (7 << 20) | 3})
    f = fidelity.compare(t, rep, plan=jd)
    assert f["pairing"]["paired"] == 2 * N and not f["pairing"]["by_target"]
    assert f["overall"]["issue_error"]["p99_ms"] < 0.3  # each with its own, not 30 ms away


def test_fit_refuses_a_target_that_holds_the_devices_only_over_each_other(
    tmp_path: Path,
) -> None:
    t = same_offsets_trace(tmp_path / "t.iot")
    tgt = sparse(tmp_path / "tgt.img", 8 * GiB + 20 * MiB)  # more than either reach, not both
    with pytest.raises(Exception, match=r"--remap fit: --target .* takes 2 source devices"):
        _plan(t, tmp_path / "j", "fit", [f"all={tgt}"])
    assert not (tmp_path / "j" / "plan.json").exists()


def test_pairing_tells_two_targets_apart_by_device(tmp_path: Path) -> None:
    """sda onto one target, nvme0n1 onto another, both `fit`: the same offsets on
    both. With nvme0n1's replay lost, its originals (30 ms earlier than sda's) must
    not pair with sda's replayed requests."""
    t = same_offsets_trace(tmp_path / "t.iot")
    a, b = sparse(tmp_path / "a.img", 9 * GiB), sparse(tmp_path / "b.img", 64 * MiB)
    jd = tmp_path / "j"
    _plan(t, jd, "fit", [f"sda={a}", f"nvme0n1={b}"])
    devs = {a: (7 << 20) | 3, b: (7 << 20) | 4}
    whole = fidelity.compare(t, _replay(jd, tmp_path / "r.iot", devs), plan=jd)
    assert whole["pairing"]["by_target"] and whole["pairing"]["paired"] == 2 * N
    assert whole["overall"]["issue_error"]["p99_ms"] < 0.3
    # Each pair on the devices its original's target is: sda's with a's.
    rep = _replay(jd, tmp_path / "r.iot", devs)
    so, sr = scan(t), scan(rep)
    m = mapper(jd / "plan.json", so, sr)
    assert m is not None
    step = Pairer(orig_keys=m.keys, rep_keys=m.replay_keys).step(
        np.concatenate(list(batches(so))), np.concatenate(list(batches(sr))), None
    )
    want = np.where(step.orig["dev"] == SDA, devs[a], devs[b])
    assert len(step.orig) == 2 * N and (step.rep["dev"] == want).all()
    # sda's replay alone: nvme0n1's originals are not found, not paired with sda's.
    lost = fidelity.compare(t, _replay(jd, tmp_path / "a.iot", devs, only=a), plan=jd)
    p = lost["pairing"]
    assert p["paired"] == N and p["original_unpaired"]["not_found"] == N, p
    assert lost["overall"]["issue_error"]["p99_ms"] < 0.3, lost["overall"]["issue_error"]


def test_a_replay_on_devices_that_are_not_the_targets_pairs_by_offset(tmp_path: Path) -> None:
    """A file target is replayed on the filesystem's device, which is none of the
    plan's targets: the replay then pairs by offset alone, as before."""
    t = same_offsets_trace(tmp_path / "t.iot")
    a, b = sparse(tmp_path / "a.img", 9 * GiB), sparse(tmp_path / "b.img", 64 * MiB)
    jd = tmp_path / "j"
    _plan(t, jd, "fit", [f"sda={a}", f"nvme0n1={b}"])
    devs = {a: (7 << 20) | 3, b: (7 << 20) | 4}
    rep = _replay(jd, tmp_path / "r.iot", devs, recorded_as={a: "/dev/vdz", b: "/dev/vdy"})
    f = fidelity.compare(t, rep, plan=jd)
    assert not f["pairing"]["by_target"] and f["pairing"]["paired"] == 2 * N


def test_a_dry_run_sizes_its_placeholder_for_the_devices_side_by_side(tmp_path: Path) -> None:
    """`--dry-run --json` tells what target fit needs: sda's reach to a whole MiB,
    then nvme0n1's region as far as it reaches."""
    t = same_offsets_trace(tmp_path / "t.iot")
    man = plan(PlanOptions(t, None, mode="exact", remap="fit", dry_run=True))
    reach = {d["device"]: d["end_bytes"] for d in man["mapping"]["devices"]}
    want = -(-reach[SDA] // MiB) * MiB + reach[NVME]
    assert man["targets"][0]["reach_bytes"] == want, man["targets"][0]


@pytest.mark.parametrize("remap", ["fit", "wrap", "scale"])
def test_a_batch_of_one_device_is_mapped_as_in_a_mixed_batch(tmp_path: Path, remap) -> None:
    """Mapper maps a batch of one device's stream whole (no masks): each row keyed
    and placed as where the batch mixes devices (each device's rows masked)."""
    t = same_offsets_trace(tmp_path / "t.iot")
    size = 10 * GiB if remap == "fit" else 64 * MiB
    tgt = sparse(tmp_path / "tgt.img", size)
    jd = tmp_path / "j"
    _plan(t, jd, remap, [f"all={tgt}"])
    so = scan(t)
    m = mapper(jd / "plan.json", so)
    assert m is not None
    rows = np.concatenate(list(batches(so)))
    assert len(np.unique(rows["dev"])) == 2
    mixed_keys, mixed = m.keys(rows), m.apply_on(rows)
    for d in (SDA, NVME):
        sel = rows["dev"] == d
        one = m.apply_on(rows[sel])
        assert all(np.array_equal(a[sel], b) for a, b in zip(mixed, one, strict=True))
        assert np.array_equal(mixed_keys[sel], m.keys(rows[sel]))
