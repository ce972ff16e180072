"""`--remap compact` end to end (issue 39): a trace with offsets up to 89 GiB replayed
by fio onto a loop device of its footprint + 15 %, recorded by the kernel, and
`replay fidelity` pairing the replay with the original through the plan the replay
names. How close the timing is, is bench/remap_compact.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from compact_helpers import N_EACH, MiB, far_trace, same_offsets_trace
from helpers import iotape

pytestmark = pytest.mark.kernel


def _replayed(trace: Path, jobs: Path, remap: str, target: str | list[str]) -> dict:
    targets = [f"all={target}"] if isinstance(target, str) else target
    iotape("replay", "plan", str(trace), "-o", str(jobs), "--mode", "exact", "--remap", remap,
           *(x for t in targets for x in ("--target", t)), check=True)  # fmt: skip
    rep = jobs.parent / f"{jobs.name}.iot"
    iotape("replay", "run", str(jobs), "--record", str(rep), check=True, timeout=300)
    res = iotape("replay", "fidelity", str(trace), str(rep), "--json", check=True)
    return json.loads(res.stdout)["iotape"]


def test_compact_onto_its_footprint_keeps_locality_and_pairs(loop_factory, tmp_path: Path) -> None:
    t = far_trace(tmp_path / "t.iot")
    dry = iotape("replay", "plan", str(t), "--remap", "compact", "--dry-run", "--json",
                 check=True)  # fmt: skip
    fp = sum(n for d in json.loads(dry.stdout)["mapping"]["devices"] for _s, n in d["extents"])
    loop = loop_factory(-(-int(fp * 1.15) // MiB))
    f = _replayed(t, tmp_path / "compact", "compact", loop.path)
    p, loc = f["pairing"], f["locality"]
    assert p["through"] == "plan mapping (--remap compact)"
    assert p["paired_share"] >= 0.999, p
    assert loc["faithful"] and loc["max_gap_pp"] <= 1.0, loc
    assert loc["footprint_bytes"][0] == loc["footprint_bytes"][1]
    assert f["overall"]["issue_error"]["p50_ms"] is not None
    # scale onto the same device: the offsets all move, the requests still pair.
    s = _replayed(t, tmp_path / "scale", "scale", loop.path)["pairing"]
    assert s["paired_share"] >= 0.99, s


def test_two_devices_onto_two_targets_pair_each_on_its_own(loop_factory, tmp_path: Path) -> None:
    """The same offsets on sda and nvme0n1, each replayed onto a loop device of its
    own: fidelity finds the targets among the devices the kernel recorded and pairs
    each request on its own, every one of them."""
    t = same_offsets_trace(tmp_path / "t.iot")
    a, b = loop_factory(8 * 1024 + 64), loop_factory(64)
    f = _replayed(t, tmp_path / "fit", "fit", [f"sda={a.path}", f"nvme0n1={b.path}"])
    p = f["pairing"]
    assert p["by_target"] and p["paired"] == 2 * N_EACH, p
    # A request paired with its own device's replay is within a few ms of it, where
    # one paired across would be 30 ms away (nvme0n1's copies come 30 ms earlier).
    assert f["overall"]["issue_error"]["p50_ms"] < 5, f["overall"]["issue_error"]
