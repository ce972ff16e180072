"""`iotape replay split`: a trace moved onto devices `fast` and `slow` by the simulated
placement (issue 7), checked against the simulator request by request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import typer
from trace_helpers import DT, NVME, SDA, header
from typer.testing import CliRunner

from analyzer.tiering.events import load_trace
from analyzer.tiering.presets import params_for
from analyzer.tiering.simulate import placement
from base.errors import IotapeError
from iotape.commands import replay as replay_cli
from recorder.tracefile import TraceWriter, open_trace
from replayer.plan import split

app = typer.Typer(pretty_exceptions_enable=False)
app.add_typer(replay_cli.app, name="replay")
runner = CliRunner()
MiB = 1 << 20


def trace(path: Path, n: int = 4000, devs: tuple[int, ...] = (SDA,), seed: int = 1) -> Path:
    """Reads and writes, 90 % of them on a 4 MiB hot spot, plus a few flushes."""
    rng = np.random.default_rng(seed)
    r = np.zeros(n, dtype=DT)
    r["ts_issue_ns"] = np.cumsum(rng.integers(10_000, 200_000, n))
    r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
    r["ts_complete_ns"] = r["ts_issue_ns"] + 50_000
    hot = rng.random(n) < 0.9
    r["offset"] = np.where(hot, rng.integers(0, 4 * MiB, n), rng.integers(0, 1 << 30, n))
    r["offset"] = r["offset"] // 4096 * 4096
    r["bytes"] = 4096
    r["op"] = np.where(rng.random(n) < 0.7, 0, 1)
    r["op"][::500] = 2  # flush
    r["bytes"][::500] = 0
    r["dev"] = rng.choice(devs, n)
    r["pid"] = 42
    with TraceWriter(path, header()) as w:
        w.write(r)
        w.close({"stop_reason": "duration"})
    return path


def read(path: Path) -> tuple[dict, np.ndarray]:
    with open_trace(path) as t:
        return t.header, t.read_all()


def test_requests_go_to_the_tier_the_simulation_placed_them_on(tmp_path: Path) -> None:
    src = trace(tmp_path / "t.iot")
    p = params_for("lru", unit=4096, capacity=2 * MiB)
    info = split.split(src, tmp_path / "s.iot", p)
    h, r = read(tmp_path / "s.iot")
    _, orig = read(src)
    names = {d["dev"]: d["name"] for d in h["devices"]}
    assert sorted(names.values()) == ["fast", "slow"]
    tier = np.array([names[int(d)] for d in r["dev"]])
    # Everything else is untouched and in the same order.
    for col in ("ts_issue_ns", "offset", "bytes", "op"):
        assert np.array_equal(r[col], orig[col])
    ev = load_trace(str(src))
    hit, _ = placement(ev, p)
    data = orig["op"] <= 1
    assert np.array_equal(tier[data] == "fast", hit)  # one device: issue order = trace order
    assert (tier[~data] == "slow").all()
    assert info["fast_requests"] == int(hit.sum()) and info["fast_share_of_reads_writes"] > 0.2
    assert h["metadata"]["tier_split"]["params"]["capacity"] == 2 * MiB
    # Writes bypass a read cache: none is fast.
    assert not (tier[orig["op"] == 1] == "fast").any()


def test_both_sends_every_request_to_each_device(tmp_path: Path) -> None:
    src = trace(tmp_path / "t.iot", n=1000)
    split.split(src, tmp_path / "b.iot", params_for("lru", unit=4096), both=True)
    h, r = read(tmp_path / "b.iot")
    names = {d["dev"]: d["name"] for d in h["devices"]}
    _, orig = read(src)
    for name in ("fast", "slow"):
        mine = r[np.array([names[int(d)] == name for d in r["dev"]])]
        assert np.array_equal(np.sort(mine["offset"]), np.sort(orig["offset"]))


def test_several_source_devices_keep_their_own_names(tmp_path: Path) -> None:
    src = trace(tmp_path / "t.iot", devs=(SDA, NVME))
    split.split(src, tmp_path / "s.iot", params_for("lru", unit=4096, capacity=MiB))
    h, r = read(tmp_path / "s.iot")
    names = sorted(d["name"] for d in h["devices"])
    assert names == ["fast-nvme0n1", "fast-sda", "slow-nvme0n1", "slow-sda"]
    assert len(np.unique(r["dev"])) == 4


def test_cli_writes_the_split_and_refuses_to_overwrite(tmp_path: Path) -> None:
    src = trace(tmp_path / "t.iot")
    out = tmp_path / "s.iot"
    args = ["replay", "split", str(src), "-o", str(out), "--unit", "4K", "--capacity", "1M"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["devices"] == ["fast", "slow"]
    res = runner.invoke(app, args)
    assert res.exit_code != 0 and "--force" in str(res.exception)
    res = runner.invoke(app, [*args, "--force"])
    assert res.exit_code == 0 and "--target fast=DEV --target slow=DEV" in res.output
    with pytest.raises(IotapeError, match="input trace"):
        split.split(src, src, params_for("lru"), force=True)
    res = runner.invoke(app, ["replay", "split", str(src), "-o", str(tmp_path / "x.iot"),
                              "--unit", "3000"])  # fmt: skip
    assert res.exit_code != 0 and "power of two" in str(res.exception)
    assert not (tmp_path / "x.iot").exists()


def test_the_replayer_reaches_neither_the_store_nor_the_server() -> None:
    """The replayer may use the tiering simulator, never analyzer.store or
    analyzer.server: importing what it uses loads neither."""
    code = (
        "import sys, replayer.plan.build, replayer.run.execute, replayer.plan.split, "
        "replayer.plan.locality, replayer.plan.fitloc, replayer.run.tiering_check\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.startswith(('analyzer.store', 'analyzer.server'))))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
