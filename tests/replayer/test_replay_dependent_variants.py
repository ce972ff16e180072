"""The closed-loop bench's jobs (bench/replay_dependent.py, issue 34): `--variants`
runs each variant with its own figures over the command line's, and fio 3.33 takes
every job text it writes (timing is the bench's, not a test's)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import need

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
from replay_dependent import VARIANTS, job_text, jobs


def _args(variants: bool) -> argparse.Namespace:
    return argparse.Namespace(
        threads=4, ios=1500, think_us=1000, spindles=2, size_mb=256, engine="psync", iodepth=1,
        rounds=1, timer_floor=False, condition="awake", variants=variants,
    )  # fmt: skip


def test_the_issue_job_alone_by_default_and_each_variant_with_its_own_figures() -> None:
    (main,) = jobs(_args(False))
    assert (main.job, main.threads, main.engine, main.think_us) == ("main", 4, "psync", 1000)
    got = jobs(_args(True))
    assert [j.job for j in got] == list(VARIANTS)
    for j in got:
        for key, value in VARIANTS[j.job].items():
            assert getattr(j, key) == value, (j.job, key)
        # what a variant does not set is the command line's
        assert (j.size_mb, j.condition, j.rounds) == (256, "awake", 1)
    # asynchronous ones, a short think under the spin rule's 200 us and none at all
    assert {j.engine for j in got} >= {"libaio", "io_uring", "psync"}
    assert {j.think_us for j in got} >= {0, 100, 1000}


def test_fio_takes_every_job_text(tmp_path: Path) -> None:
    need(shutil.which("fio") is not None, "fio")
    for j in jobs(_args(False)) + jobs(_args(True)):
        path = tmp_path / f"{j.job}.fio"
        text = job_text("/dev/null", j.threads, j.ios, j.think_us, j.size_mb, j.engine, j.iodepth)
        path.write_text(text)
        p = subprocess.run(["fio", "--parse-only", str(path)], capture_output=True, text=True)
        assert p.returncode == 0, (j.job, p.stderr)
        if j.engine != "psync":  # built in; --parse-only does not look an engine up
            e = subprocess.run(["fio", f"--enghelp={j.engine}"], capture_output=True, text=True)
            assert e.returncode == 0, (j.job, j.engine, e.stderr)
        assert f"ioengine={j.engine}" in text and f"numjobs={j.threads}" in text
