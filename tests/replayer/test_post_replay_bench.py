"""bench/post_replay.py's choice of steps and its run of the fidelity step from
another checkout (--steps, --vs): each run's wall time, peak RSS and the SHA-256
of what the command printed."""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_fidelity_stream import _files, _orig, _replay

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import post_replay  # noqa: E402


def test_fidelity_step_reports_the_sha256_of_its_output(tmp_path: Path) -> None:
    o = _orig(3000, seed=21)
    src, rep = _files(tmp_path, o, _replay(o, 21))
    got = post_replay.fidelity(src, rep)
    again = post_replay.fidelity(src, rep, ROOT)  # (--vs: a checkout named by path)
    printed = subprocess.run(
        [sys.executable, "-m", "iotape", "replay", "fidelity", str(src), str(rep), "--json"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert got["sha256"] == again["sha256"] == hashlib.sha256(printed).hexdigest()
    assert b'"match_share"' in printed
    assert got["seconds"] > 0 and got["peak_rss_mib"] > 10


def test_a_failing_step_stops_the_bench_with_its_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no such|not found|No such|does not exist"):
        post_replay.fidelity(tmp_path / "none.iot", tmp_path / "none2.iot")


def test_steps_and_checkouts_are_checked(tmp_path: Path) -> None:
    assert post_replay.steps_of("fidelity, relabel") == ["fidelity", "relabel"]
    for bad in ("fidelity,bogus", ",", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="steps are some of"):
            post_replay.steps_of(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="not a built iotape checkout"):
        post_replay.checkout(str(tmp_path))
    if (ROOT / "replayer" / "build").is_dir():
        assert post_replay.checkout(str(ROOT)) == ROOT
