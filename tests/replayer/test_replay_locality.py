"""Synthetic replay keeps a zipf trace's locality, on loop devices: record fio's
zipf workload, plan a synthetic replay, run it recorded, compare the LRU curves."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from iotape.commands.replay import app
from recorder.capture import record as rec
from replayer.plan import locality
from replayer.plan.build import PlanOptions, plan
from replayer.run import fidelity

# Every test here needs root and loop devices (conftest `kernel`).
pytestmark = pytest.mark.kernel

SECONDS = 8


def _record_zipf(dev: str, out: Path) -> Path:
    job = out.with_suffix(".fio")
    job.write_text(
        f"[global]\nfilename={dev}\ndirect=1\nioengine=io_uring\ntime_based=1\n"
        f"runtime={SECONDS}\n[z]\nrw=randrw\nrwmixread=70\nbs=8k\nrate_iops=1050,450\n"
        "rate_process=poisson\niodepth=4\nrandom_distribution=zipf:1.1\n"
    )
    rec.record(
        rec.RecordOptions(
            devices=[dev], output=out, command=["fio", "--output=/dev/null", str(job)]
        )
    )
    return out


def test_synthetic_replay_keeps_the_lru_curve(loop_factory, tmp_path: Path) -> None:
    src, dst = loop_factory(64), loop_factory(64)
    orig = _record_zipf(src.path, tmp_path / "orig.iot")
    jobs = tmp_path / "jobs"
    man = plan(PlanOptions(orig, jobs, mode="synthetic", targets=[f"all={dst.path}"]))
    # The fit recognised fio's own distribution (its simulation says so in the header).
    assert "random_distribution=zipf:" in man["jobfile_text"]
    res = CliRunner().invoke(app, ["run", str(jobs), "--record", str(tmp_path / "rep.iot")])
    assert res.exit_code == 0, res.output
    c = fidelity.compare(orig, tmp_path / "rep.iot")
    loc = c["locality"]
    print(f"locality: {loc}")
    # The goal, at every cache size from 1 % to 50 % of the footprint.
    for f, o, r in zip(loc["lru_fractions"], *loc["lru_hit_ratio"], strict=True):
        if f >= locality.GOAL_FROM:
            assert abs(r - o) <= locality.tolerance(o), (f, o, r)
    assert loc["footprint_error_pct"] <= 5
    assert loc["faithful"], loc["why_not"]
    # A zipf trace is skewed, and the replay is as skewed.
    assert loc["hot10_share"][0] > 0.5
    assert abs(loc["hot10_share"][1] - loc["hot10_share"][0]) < 0.05
    assert c["overall"]["iops_mape_pct"] <= 10.0  # the rate still holds (bench: <= 1 %)
    # The summary says it in words.
    out = CliRunner().invoke(app, ["fidelity", str(orig), str(tmp_path / "rep.iot")])
    assert out.exit_code == 0, out.output
    assert "locality (iotape): faithful" in out.output
    assert "LRU hit @ 10 %" in out.output and "footprint_bytes" in out.output
