"""The closed-loop bench's jobs (bench/replay_dependent.py, issue 34): `--variants`
runs each variant with its own figures over the command line's, and fio 3.33 takes
every job text it writes (timing is the bench's, not a test's)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import need

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
from replay_dependent import VARIANTS, _fio_figures, job_text, jobs


def _args(variants: bool) -> argparse.Namespace:
    return argparse.Namespace(
        threads=4, ios=1500, think_us=1000, spindles=2, size_mb=256, engine="psync", iodepth=1,
        rounds=1, timer_floor=False, condition="awake", variants=variants, slack_peer=False,
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


def test_fio_p50_spans_the_call_as_iotape_lanes_does(tmp_path: Path) -> None:
    """psync: fio's clat (no slat); an asynchronous engine: its total latency, the
    submission included, with the clat beside (a real fio run, buffered, on a file)."""
    need(shutil.which("fio") is not None, "fio")
    for engine in ("psync", "libaio"):
        text = job_text(str(tmp_path / "f.img"), 2, 40, 0, 4, engine, 4 if engine != "psync" else 1)
        (tmp_path / "j.fio").write_text(text.replace("direct=1", "direct=0"))
        out = tmp_path / f"{engine}.json"
        cmd = ["fio", "--output-format=json", f"--output={out}", str(tmp_path / "j.fio")]
        subprocess.run(cmd, check=True, capture_output=True)
        res = json.loads(out.read_text())
        job = res["jobs"][0]["read"]
        fig = _fio_figures(res)
        clat = job["clat_ns"]["percentile"]["50.000000"] / 1e6
        lat = job["lat_ns"]["percentile"]["50.000000"] / 1e6
        if engine == "psync":
            assert job["slat_ns"]["N"] == 0
            assert fig["read_p50_ms"] == round(clat, 4) and "read_clat_p50_ms" not in fig
        else:
            assert job["slat_ns"]["N"] > 0
            assert fig["read_p50_ms"] == round(lat, 4)
            assert fig["read_clat_p50_ms"] == round(clat, 4)
