"""Closed-loop replay end to end (issue 34): a closed-loop fio job recorded on the
HDD-like device, replayed `--timing dependent` onto the SSD-like one and back
(bench/replay_dependent.py, which measures it against the job run there). Speed is
the bench's: this checks what the trace shows and that every dependency held."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
from conftest import need

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
from hybrid_lab import LabError
from replay_dependent import measure

pytestmark = pytest.mark.kernel


def test_a_recorded_closed_loop_job_replays_with_every_dependency_held(
    kernel: None, tmp_path: Path
) -> None:
    args = argparse.Namespace(
        threads=3, ios=60, think_us=1000, spindles=2, size_mb=64, engine="psync", iodepth=1,
        rounds=1, timer_floor=True, condition="awake", variants=False, slack_peer=True,
    )  # fmt: skip
    try:
        result = measure(args)
    except LabError as e:
        need(False, f"an HDD-like lab: {e}")
    assert list(result["jobs"]) == ["main"]
    main = result["jobs"]["main"]
    assert [s["rounds"] for s in main["summary"]] == [1, 1]
    for run in main["runs"]:
        dep = run["dependent_replay"]
        # Its own delay timed on a cycle of the target (both are loop devices); the
        # "before" replay was given the sleeps' estimate of the same run.
        assert dep["think_net"]["own_floor_from"] == "cycle", dep["think_net"].get("reason")
        before = run["dependent_replay_timer_floor"]["think_net"]
        assert before["own_floor_from"] == "given"
        assert before["own_floor_us"] == dep["think_net"]["timer_us"]
        assert dep["ios"] == run["peer_fio_on_target"]["ios"] == 180
        # The truth as a user runs it (no recorder) and recorded (the fidelity's trace)
        assert run["peer_fio_on_target_recorded"]["ios"] == 180
        # and once more alone, the truth's own repeat in the round
        assert run["peer_fio_on_target_again"]["ios"] == 180
        assert run["ratios"]["peer_again_iops_over_peer"] > 0
        assert dep["issued_before_predecessor"] == 0
        # Its slept thinks with the application's 50 us of timer slack; `--slack-peer`'s
        # replay of the same trace at 1 ns (IOTAPE_LANES_THINK_SLACK_US=0) beside it
        slack1 = run["dependent_replay_slack_1ns"]
        assert (dep["think_slack_us"], slack1["think_slack_us"]) == (50.0, 0.0)
        assert (slack1["ios"], slack1["issued_before_predecessor"]) == (180, 0)
        # The peer and the replay in the same CPU condition, which held: no vCPU
        # halted while /dev/cpu_dma_latency was 0 (bench/cpu_condition.py).
        for timed in (run["peer_fio_on_target"], run["peer_fio_on_target_recorded"], dep):
            assert timed["cpu"]["condition"] == "awake"
            assert timed["cpu"]["halts_per_request"] == 0, timed["cpu"]["idle"]
        # `replay fidelity JOBDIR --truth`: the speed-up over the original and the
        # error against the job's own run on B, both there (their sizes: the bench's).
        fid = dep["fidelity"]
        assert fid["speed_up"] > 0 and fid["iops_error_pct"] is not None
        assert fid["p50_error_pct"] is not None
        # One synchronous submitter per fio process: depth 1, a predecessor for all
        # but its first request, think times at least fio's thinktime (the trace's
        # completion comes before fio sees it).
        streams = dep["dependencies"]
        assert len(streams) == 3
        for s in streams:
            assert (s["depth"], s["with_predecessor"], s["requests"]) == (1, 59, 60)
            assert s["think_us"]["p10"] >= 900
