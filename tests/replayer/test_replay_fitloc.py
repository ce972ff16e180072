"""Synthetic mode's locality fit (no root): fio's zoned_abs limits, and which of
zipf and zoned_abs the fit picks for traces whose shape is known."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import DT, header
from typer.testing import CliRunner

import schemas
from iotape.commands.replay import app
from recorder.tracefile import write_trace
from replayer.plan import fitloc, synthetic

OP = schemas.enum("op")
SIZE = 256 << 20
BS = 8192
N = 30_000
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")


def _stream(offsets: np.ndarray) -> tuple:
    """(is_write, window, offset, bytes) of 8 KiB requests, 70 % reads, 10 windows."""
    rng = np.random.default_rng(2)
    n = len(offsets)
    return (
        (rng.random(n) < 0.3).astype(np.int64),
        np.arange(n) * 10 // n,
        offsets,
        np.full(n, BS, np.int64),
    )


def test_zones_respect_fio_limits_and_keep_untouched_space_empty() -> None:
    rng = np.random.default_rng(1)
    # Two busy regions with 148 MiB between them that nothing touches.
    off = np.r_[rng.integers(0, 1024, 1500), rng.integers(20000, 21000, 1500)] * BS
    zs = fitloc.zones(off, np.full(len(off), BS), BS, SIZE)
    assert len(zs) <= fitloc.ZONES_MAX
    assert sum(p for p, _ in zs) == 100
    assert sum(z for _, z in zs) <= SIZE
    assert all(z > 0 and z % BS == 0 for _, z in zs)
    # The untouched stretch is one 0 % zone: the replay never goes there.
    assert any(p == 0 and z >= 147 << 20 for p, z in zs)
    assert len(synthetic.zoned_abs(zs)) < 4000  # fio reads 4 KiB per option line


@needs_fio
def test_zoned_abs_of_many_zones_parses_with_fio(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    off = rng.integers(0, SIZE // BS, 5000) * BS
    zs = fitloc.zones(off, np.full(len(off), BS), BS, SIZE)
    job = tmp_path / "z.fio"
    job.write_text(
        f"[z]\nfilename={tmp_path / 'f'}\nsize={SIZE}\nrw=randread\nbs=8k\n"
        f"random_distribution={synthetic.zoned_abs(zs)}\n"
    )
    p = subprocess.run(["fio", "--parse-only", str(job)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_fit_picks_zipf_for_fio_zipf_and_finds_its_theta() -> None:
    rng = np.random.default_rng(4)
    off = fitloc.zipf_blocks(rng, N, 1.1, SIZE // BS) * BS
    m = fitloc.choose(*_stream(off), SIZE, seed=1)
    assert m.kind == "zipf"
    assert abs(m.theta - 1.1) <= 0.06
    assert m.gap_pp["zipf"] <= 3 < m.gap_pp["zoned"]


def test_fit_picks_zoned_for_a_hot_region() -> None:
    """80 % of the I/O uniform in the first 16 MiB, the rest over the device: a
    step no zipf curve follows."""
    rng = np.random.default_rng(5)
    hot = rng.random(N) < 0.8
    off = np.where(hot, rng.integers(0, (16 << 20) // BS, N), rng.integers(0, SIZE // BS, N)) * BS
    m = fitloc.choose(*_stream(off), SIZE, seed=1)
    assert m.kind == "zoned"
    assert m.gap_pp["zoned"] <= 3 < m.gap_pp["zipf"]


def test_runs_follow_percentage_random() -> None:
    rng = np.random.default_rng(6)
    off = rng.integers(0, SIZE // BS, N) * BS
    b = np.full(N, BS)
    runs = fitloc.with_runs(rng, off, b, np.full(N, 0.6))
    assert abs(fitloc.seq_share(runs, b) - 0.6) < 0.02


def test_auto_says_why_it_chose_synthetic(tmp_path: Path) -> None:
    r = np.zeros(2000, dtype=DT)
    r["ts_issue_ns"] = np.arange(2000) * 1_000_000 + 1
    r["ts_complete_ns"] = r["ts_issue_ns"] + 100_000
    r["offset"] = np.random.default_rng(7).integers(0, 4096, 2000) * BS
    r["bytes"], r["op"] = BS, OP["read"]
    trace = write_trace(tmp_path / "t.iot", header(), r)
    res = CliRunner().invoke(
        app,
        ["plan", str(trace), "--dry-run", "--exact-limit", "1000", "--target", "all=/dev/TARGET"],
    )
    assert res.exit_code == 0, res.output
    assert "auto chose synthetic mode: 2000 requests > --exact-limit 1000" in res.stderr
    assert "not reproduced:" in res.stderr
    assert "random_distribution=" in res.stdout
    res = CliRunner().invoke(app, ["plan", str(trace), "--dry-run", "--target", "all=/dev/TARGET"])
    assert "exact mode" in res.stdout and "auto chose" not in res.stderr
