"""The spin rule (replayer/src/io.c, deps.c; docs/replay.md "Waiting awake"): only
a request whose recorded think is under IOTAPE_LANES_SPIN_THINK_US (200 us by
default) waits for its predecessor in flight and for its think's end awake, and
its think is replayed net of the own delay of an awake wait; any other sleeps
through both, as the application slept, net of a slept wait's delay. The report
counts each kind. Structural: counts and sums, no timing. No root: the target
is a file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_demand_thinks import _lanes as demand_lanes

# a relative think a request, in us: under the default line and at or above it
THINKS = [0, 5, 50, 150, 199, 200, 201, 500, 2500]


def _lanes(tmp_path: Path, logs: dict[str, list[str]], **env: str) -> dict:
    """iotape-lanes on hand-written dependent logs in this environment plus `env`
    (IOTAPE_LANES_* unset unless given there)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("IOTAPE_LANES_")}
    p = demand_lanes(tmp_path, logs, {**base, **env})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _chain(thinks: list[int]) -> dict[str, list[str]]:
    """One job: a read at the start, then one a think after the previous."""
    lines = ["0 - @0 read 0 4096\n"]
    lines += [f"{i} {i - 1} {t} read {i % 64 * 4096} 4096\n" for i, t in enumerate(thinks, 1)]
    return {"a": lines}


@pytest.mark.parametrize(
    ("env", "line_us"),
    [
        ({}, 200),
        ({"IOTAPE_LANES_SPIN_THINK_US": "1000"}, 1000),
        ({"IOTAPE_LANES_SPIN_THINK_US": "0"}, 0),
        ({"IOTAPE_LANES_SPIN_US": "0"}, 0),  # nothing spins: nothing awake
    ],
)
def test_each_relative_think_is_awake_below_the_line_and_asleep_from_it(
    tmp_path: Path, env: dict[str, str], line_us: int
) -> None:
    res = _lanes(tmp_path, _chain(THINKS), IOTAPE_LANES_OWN_FLOOR_US="0", **env)
    dep = res["dependencies"]
    awake = sum(t < line_us for t in THINKS)
    # the first request's absolute time is neither: it waits for no completion
    assert (dep["thinks_awake"], dep["thinks_asleep"]) == (awake, len(THINKS) - awake)
    job = dep["think_net"]["jobs"]["a"]
    assert (job["thinks_awake"], job["thinks_asleep"]) == (awake, len(THINKS) - awake)
    assert dep["issued_before_predecessor"] == 0
    if "IOTAPE_LANES_SPIN_US" not in env:
        assert dep["spin_think_us"] == float(line_us)


def test_each_think_is_net_of_the_own_delay_of_its_kind(tmp_path: Path) -> None:
    """Given a slept wait's own delay of 100 us and an awake one's of 10 us, and a
    job floor above both: a think under the line loses 10 us, any other 100."""
    thinks = [t + 120 for t in THINKS]  # floor 120 us
    res = _lanes(tmp_path, _chain(thinks), IOTAPE_LANES_OWN_FLOOR_US="100,10")
    net = res["dependencies"]["think_net"]
    assert (net["own_floor_us"], net["own_awake_us"]) == (100.0, 10.0)
    expect = sum(t - (10 if t < 200 else 100) for t in thinks)
    assert net["jobs"]["a"]["replayed_think_us"] == expect
    assert net["jobs"]["a"]["thinks_awake"] == sum(t < 200 for t in thinks) == 3


def test_a_slept_think_is_net_of_no_more_than_the_jobs_smallest_slept_think(
    tmp_path: Path,
) -> None:
    """A job whose smallest think is 0 (a hop after another thread's completion)
    and whose slept thinks are 250 us and more: given own delays of 100 us asleep
    and 10 awake, its awake thinks lose nothing (their floor, 0), its slept ones
    100 us (their floor, 250 us, is above it). Without a think awake (no spin)
    one floor for all: nothing comes off."""
    thinks = [0, 20, 150, 250, 400, 3000]
    res = _lanes(tmp_path, _chain(thinks), IOTAPE_LANES_OWN_FLOOR_US="100,10")
    job = res["dependencies"]["think_net"]["jobs"]["a"]
    assert (job["floor_us"], job["floor_asleep_us"]) == (0.0, 250.0)
    assert job["replayed_think_us"] == sum(t - (100 if t >= 200 else 0) for t in thinks)
    (tmp_path / "nospin").mkdir()
    res = _lanes(tmp_path / "nospin", _chain(thinks), IOTAPE_LANES_OWN_FLOOR_US="100,10",
                 IOTAPE_LANES_SPIN_US="0")  # fmt: skip
    job = res["dependencies"]["think_net"]["jobs"]["a"]
    assert (job["floor_us"], job["floor_asleep_us"]) == (0.0, 0.0)
    assert job["replayed_think_us"] == sum(thinks)


def test_a_wait_for_another_lanes_request_with_a_long_think_never_spins(tmp_path: Path) -> None:
    """Two lanes taking turns, each request 300 us (above the line) after the
    other's last: every wait for the other lane's request in flight is slept,
    so no time is spent awake on one (spun_ms counts exactly that)."""
    logs: dict[str, list[str]] = {"a": [], "b": []}
    for i in range(200):
        way = "- @0" if i == 0 else f"{i - 1} 300"
        logs["ab"[i % 2]].append(f"{i} {way} read {(i % 64) * 4096} 4096\n")
    res = _lanes(tmp_path, logs, IOTAPE_LANES_OWN_FLOOR_US="0", IOTAPE_LANES_SPIN_US="200")
    dep = res["dependencies"]
    assert (dep["thinks_awake"], dep["thinks_asleep"]) == (0, 199)
    assert dep["spun_ms"] == 0.0 and dep["spin_us"] == 200.0
    assert dep["issued_before_predecessor"] == 0
    assert sum(j["read"]["total_ios"] for j in res["jobs"]) == 200


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("IOTAPE_LANES_OWN_FLOOR_US", "40,x", "0 or more; a slept think's[,an awake one's]"),
        ("IOTAPE_LANES_SPIN_THINK_US", "1ms", "0 to 1000000; 0: no think awake"),
    ],
)
def test_a_setting_that_is_not_microseconds_is_refused_by_name(
    tmp_path: Path, var: str, value: str, says: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOTAPE_LANES_")}
    p = demand_lanes(tmp_path, _chain([5]), dict(env, **{var: value}))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == f"iotape-lanes: {var}={value}: not microseconds ({says})"
