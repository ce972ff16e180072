"""iotape-lanes' waits at a dependency hop (replayer/src/io.c wait_until, deps.c
wait_done): the last stretch of a think and of a wait for a predecessor in flight
spent awake (IOTAPE_LANES_SPIN_US; 0 sleeps as before), a completion waking the
futex only where a thread sleeps on it. Whatever the setting, no request goes
before its predecessor completed plus its think. No root: the target is a file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_demand_thinks import _lanes as demand_lanes


def _lanes(tmp_path: Path, logs: dict[str, list[str]], spin: str | None) -> dict:
    """iotape-lanes on hand-written dependent logs, the thinks as logged, at `spin`."""
    env = {k: v for k, v in os.environ.items() if k != "IOTAPE_LANES_SPIN_US"}
    env["IOTAPE_LANES_OWN_FLOOR_US"] = "0"
    if spin is not None:
        env["IOTAPE_LANES_SPIN_US"] = spin
    p = demand_lanes(tmp_path, logs, env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("spin", ["0", None, "200000"])
def test_a_hop_to_another_lane_waits_for_the_completion_and_the_think(
    tmp_path: Path, spin: str | None
) -> None:
    """a's read at 50 ms; b's after it, c's 300 us after b's (a think a spinner
    covers whole at 200 ms of spin, part at the default, none at 0): each job's
    first issue is after the previous job's last completion (plus the think), as
    this program's own clock saw them."""
    res = _lanes(tmp_path, {
        "a": ["0 - @50000 read 0 4096\n"],
        "b": ["1 0 0 read 4096 4096\n"],
        "c": ["2 1 300 read 8192 4096\n"],
    }, spin)  # fmt: skip
    jobs = {j["jobname"]: j for j in res["jobs"]}
    assert jobs["b"]["first_ns"] >= jobs["a"]["last_ns"]
    assert jobs["c"]["first_ns"] >= jobs["b"]["last_ns"] + 300_000
    dep = res["dependencies"]
    assert dep["issued_before_predecessor"] == 0
    if spin is not None:
        assert dep["spin_us"] == float(spin)


@pytest.mark.parametrize("spin", ["0", None])
def test_a_long_chain_across_two_lanes_is_issued_in_order(tmp_path: Path, spin: str | None) -> None:
    """2,000 reads taking turns between two lanes, each after the other's last
    (think 0 or 5 us): every one issued, none before its predecessor completed."""
    logs: dict[str, list[str]] = {"a": [], "b": []}
    for i in range(2000):
        way = "- @0" if i == 0 else f"{i - 1} {5 * (i % 2)}"
        logs["ab"[i % 2]].append(f"{i} {way} read {(i % 256) * 4096} 4096\n")
    res = _lanes(tmp_path, logs, spin)
    assert sum(j["read"]["total_ios"] for j in res["jobs"]) == 2000
    assert res["dependencies"]["issued_before_predecessor"] == 0
    assert res["dependencies"]["spin_us"] >= (0 if spin == "0" else 20)


def test_a_spin_that_is_not_microseconds_is_refused_by_name(tmp_path: Path) -> None:
    p = demand_lanes(tmp_path, {"a": ["0 - @0 read 0 4096\n"]},
                     dict(os.environ, IOTAPE_LANES_SPIN_US="-1"))  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.strip() == (
        "iotape-lanes: IOTAPE_LANES_SPIN_US=-1: not microseconds (0 to 1000000; 0: sleep only)"
    )
    assert not p.stdout
