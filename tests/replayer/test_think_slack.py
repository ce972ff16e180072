"""A slept think's timer slack (replayer/src/io.c; docs/replay.md "Timer slack"):
iotape-lanes sleeps a think the application slept (one at or above the spin
rule's line) with the kernel's default slack of 50 us, as an application that
never sets its own (fio) slept it, IOTAPE_LANES_THINK_SLACK_US moves it (0: 1 ns,
the replay before), and the report says which. Structural: the thread's own
timer slack as the kernel shows it (/proc/PID/task/TID/timerslack_ns) while it
sleeps a long think; no timing. No root: the target is a file."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import need

from replayer.run import runner

MIB = 1 << 20
THINK_US = 3_000_000  # long enough to be seen asleep on a loaded machine


def _start(tmp_path: Path, think_us: int = THINK_US, **env: str) -> subprocess.Popen:
    """iotape-lanes on one job: a read, then another `think_us` after it completed."""
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    (tmp_path / "iologs").mkdir()
    log = f"iotape dependent log 1\nopen {target}\n0 - @0 read 0 4096\n"
    log += f"1 0 {think_us} read 4096 4096\n"
    (tmp_path / "iologs" / "a.log").write_text(log)
    (tmp_path / "replay.fio").write_text(
        "[global]\nioengine=psync\n[a]\nread_iolog=iologs/a.log\niodepth=1\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("IOTAPE_LANES_")}
    return subprocess.Popen(
        [str(runner.LANES), "replay.fio"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**base, "IOTAPE_LANES_OWN_FLOOR_US": "0", **env},
    )  # fmt: skip


def _workers_slack(pid: int) -> set[int]:
    """The timer slack (ns) of each of the process's threads but its first (that one
    starts at the default, 50 us; a lane's thread at 1 ns): /proc/TID/timerslack_ns
    (the task directories have none; another task's needs CAP_SYS_NICE)."""
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        if task.name != str(pid):
            with contextlib.suppress(OSError, ValueError):  # the thread ended meanwhile
                out.add(int(Path(f"/proc/{task.name}/timerslack_ns").read_text()))
    return out


@pytest.mark.parametrize(
    ("env", "slack_ns"),
    [({}, 50_000), ({"IOTAPE_LANES_THINK_SLACK_US": "200"}, 200_000)],
)  # fmt: skip
def test_a_slept_think_sleeps_with_the_applications_slack(
    tmp_path: Path, env: dict[str, str], slack_ns: int
) -> None:
    need(os.geteuid() == 0, "root (another task's timer slack: CAP_SYS_NICE)")
    p = _start(tmp_path, **env)
    seen: set[int] = set()
    try:
        # until the worker is in its think (after its first read) or the run ends
        while p.poll() is None and slack_ns not in seen:
            seen |= _workers_slack(p.pid)
            time.sleep(0.02)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert slack_ns in seen, seen
    dep = json.loads(out)["dependencies"]
    assert dep["think_slack_us"] == slack_ns / 1000
    assert (dep["thinks_asleep"], dep["issued_before_predecessor"]) == (1, 0)


def test_zero_is_the_replay_before(tmp_path: Path) -> None:
    """0: a slept think at 1 ns, as every wait was before (the report says 0)."""
    p = _start(tmp_path, think_us=1000, IOTAPE_LANES_THINK_SLACK_US="0")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    dep = json.loads(out)["dependencies"]
    assert (dep["think_slack_us"], dep["thinks_asleep"]) == (0.0, 1)


@pytest.mark.parametrize("bad", ["-1", "fifty", "2000000"])
def test_a_bad_slack_is_one_line_naming_it(tmp_path: Path, bad: str) -> None:
    p = _start(tmp_path, IOTAPE_LANES_THINK_SLACK_US=bad)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2
    assert f"IOTAPE_LANES_THINK_SLACK_US={bad}" in err and len(err.strip().splitlines()) == 1
    assert out == ""
