"""A fixed think in a dependent replay (issue 34, replayer/src/fixedthink.c): a job
whose slept thinks are one sleep (95 % within 100 us of their median) replays them at
the median, its few longer ones (the recording host's stalls) too, counted apart;
a job whose thinks spread, a think well under the median and an awake one stay as
recorded. What iotape-lanes reports of each job; no timing thresholds. No root: the
target is a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_evloop import _plan, _run

SLEPT = [1000 + (7 * k) % 41 for k in range(60)]  # one sleep and its jitter
STALLS = [3900, 2200]  # the recording host's
UNDER = [600]  # another wait, further under the median than the band
AWAKE = [150]  # under the spin line: waited awake, not a sleep


def _chain(first_id: int, thinks: list[int]) -> list[str]:
    """Reads, each after the job's previous one and its think."""
    lines = [f"{first_id} - @0 read 0 4096\n"]
    for k, t in enumerate(thinks, 1):
        lines.append(f"{first_id + k} {first_id + k - 1} {t} read {(k % 200) * 4096} 4096\n")
    return lines


def _jobs() -> dict[str, tuple[int, list[str]]]:
    fixed = SLEPT[:20] + STALLS[:1] + UNDER + SLEPT[20:] + AWAKE + STALLS[1:]
    broad = [300 + 40 * k for k in range(60)]  # slept, but over 2.4 ms
    return {"fixed": (1, _chain(0, fixed)), "broad": (1, _chain(1000, broad))}


def _doc(tmp_path: Path, **env: str) -> dict:
    _plan(tmp_path, _jobs())
    p = _run(tmp_path, **env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["dependencies"]


def test_a_fixed_sleepers_thinks_go_at_their_median(tmp_path: Path) -> None:
    deps = _doc(tmp_path)
    assert (deps["fixed_think"], deps["fixed_think_jobs"]) == (True, 1)
    fixed, broad = (deps["think_net"]["jobs"][k] for k in ("fixed", "broad"))
    slept = sorted(SLEPT + STALLS + UNDER)
    mid = slept[len(slept) // 2]
    assert fixed["fixed_think_us"] == mid
    # every slept think from 100 us under the median up, stalls included; not the
    # one further under it, not the awake one
    assert fixed["thinks_fixed"] == len(SLEPT) + len(STALLS)
    assert fixed["stalls_fixed"] == len(STALLS)
    assert fixed["stall_ms"] == pytest.approx(sum(t - mid for t in STALLS) / 1e3)
    assert (fixed["thinks_asleep"], fixed["thinks_awake"]) == (len(slept), len(AWAKE))
    assert (broad["fixed_think_us"], broad["thinks_fixed"]) == (None, 0)
    assert deps["issued_before_predecessor"] == 0


def test_the_switch_keeps_every_think_as_recorded(tmp_path: Path) -> None:
    deps = _doc(tmp_path, IOTAPE_LANES_FIXED_THINK="0")
    assert (deps["fixed_think"], deps["fixed_think_jobs"]) == (False, 0)
    fixed = deps["think_net"]["jobs"]["fixed"]
    assert (fixed["fixed_think_us"], fixed["thinks_fixed"], fixed["stalls_fixed"]) == (None, 0, 0)


def test_a_bad_switch_is_named(tmp_path: Path) -> None:
    _plan(tmp_path, _jobs())
    p = _run(tmp_path, IOTAPE_LANES_FIXED_THINK="yes")
    assert p.returncode == 2
    assert (
        "iotape-lanes: IOTAPE_LANES_FIXED_THINK=yes: 1 (a fixed sleeper's slept thinks at their "
        "median) or 0 (every think as recorded)" in p.stderr
    )
