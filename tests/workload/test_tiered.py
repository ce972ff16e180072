"""--ioengine tiered (workload/src/tier.c): every request served from the device its
unit is on, no page lost across migrations, migrations on the interval boundaries
and within the budget, and bad options refused in one line before any file is made."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import schemas
from recorder.tracefile import open_trace
from workload import engine
from workload.engine import engine_path

BUILD = Path(__file__).resolve().parents[2] / "workload" / "build"
STRESS = BUILD / "iotape-tier-stress"
MIB = 1 << 20
UNIT_KB = 1024
STATS_S, MIGRATE_S, BUDGET_MB = 0.1, 0.2, 3


def _engine(tmp: Path, db: str, fast: str, *extra: str) -> subprocess.CompletedProcess:
    (tmp / "log").mkdir(exist_ok=True)
    argv = [
        str(engine_path()), f"--db={db}", f"--log={tmp / 'log'}", "--mailboxes=20",
        "--mailbox-size-mb=1", "--iops-per-mailbox=50", "--threads=4", "--duration=3",
        "--quiet=1", "--ioengine=tiered", f"--tier-fast={fast}", "--tier-capacity-mb=6",
        f"--tier-unit-kb={UNIT_KB}", f"--tier-stats-s={STATS_S}", f"--tier-migrate-s={MIGRATE_S}",
        f"--tier-budget-mb={BUDGET_MB}", f"--tier-log={tmp / 'tier.jsonl'}",
        f"--result={tmp / 'result.json'}", *extra,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _log(tmp: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp / "tier.jsonl").read_text().splitlines()]


def _sectors(dev: str) -> tuple[int, int]:
    f = Path(f"/sys/block/{Path(dev).name}/stat").read_text().split()
    return int(f[2]) * 512, int(f[6]) * 512


@pytest.mark.kernel
def test_requests_go_to_the_device_of_their_unit(loop_factory, tmp_path: Path) -> None:
    slow, fast = loop_factory(64), loop_factory(16)
    before = _sectors(fast.path)
    r = _engine(tmp_path, f"{slow.path},0,{48 * MIB}", fast.path)
    assert r.returncode == 0, r.stderr
    read, written = (a - b for a, b in zip(_sectors(fast.path), before, strict=True))
    result = json.loads((tmp_path / "result.json").read_text())
    tier = result["tier"]
    log = _log(tmp_path)
    moves = [e for e in log if e["type"] == "migration"]
    promoted = sum(e["promoted_bytes"] for e in moves)
    demoted = sum(e["demoted_bytes"] for e in moves) + tier["drained_bytes"]
    # The fast device saw exactly the requests the placement sent it and the copies.
    assert read == tier["read_bytes_fast"] + demoted
    assert written == tier["write_bytes_fast"] + promoted
    assert tier["reads_fast"] > 0 and tier["reads_slow"] > 0 and promoted > 0
    # The copies are the database's migration stream: each one read and written once.
    assert result["databases"][0]["streams"]["migration"]["bytes"] == 2 * (promoted + demoted)
    assert 0 < tier["read_hit_ratio"] < 1
    end = next(e for e in log if e["type"] == "end")
    assert len(end["fast"]) <= tier["slots"]
    assert tier["drained_bytes"] == sum(min(UNIT_KB << 10, 48 * MIB) for _ in end["fast"])


@pytest.mark.kernel
def test_migrations_keep_interval_and_budget(loop_factory, tmp_path: Path) -> None:
    slow, fast = loop_factory(64), loop_factory(16)
    r = _engine(tmp_path, f"{slow.path},0,{48 * MIB}", fast.path, "--tier-verify=1")
    assert r.returncode == 0, r.stderr
    log = _log(tmp_path)
    start = log[0]
    assert start["type"] == "start" and start["budget_units"] == BUDGET_MB * 1024 // UNIT_KB
    moves = [e for e in log if e["type"] == "migration"]
    per = round(MIGRATE_S / STATS_S)
    assert len(moves) >= 5
    for e in moves:
        assert e["window"] % per == 0
        assert e["t"] == pytest.approx(e["window"] * STATS_S)
        assert e["started"] >= e["t"]  # never before its boundary
        assert len(e["promoted"]) + len(e["demoted"]) <= start["budget_units"]
        assert e["bytes"] <= BUDGET_MB * MIB
    assert any(e["demoted"] for e in moves)
    # The engine's own pages, read back through the placement and after the write-back.
    v = json.loads((tmp_path / "result.json").read_text())["tier"]["verify"]
    assert v["blocks"] > 0 and v["bad_placed"] == 0 and v["bad_after_writeback"] == 0


@pytest.mark.kernel
def test_cache_serves_hits_from_fast_and_writes_through(loop_factory, tmp_path: Path) -> None:
    slow, fast = loop_factory(64), loop_factory(16)
    before = _sectors(fast.path)
    r = _engine(tmp_path, f"{slow.path},0,{48 * MIB}", fast.path, "--tier-policy=cache")
    assert r.returncode == 0, r.stderr
    read, written = (a - b for a, b in zip(_sectors(fast.path), before, strict=True))
    tier = json.loads((tmp_path / "result.json").read_text())["tier"]
    fills = [e for e in _log(tmp_path) if e["type"] == "fill"]
    assert tier["policy"] == "cache" and len(fills) == tier["promoted"] > tier["slots"]
    assert tier["evicted"] == len([e for e in fills if e["evicted"] >= 0]) > 0
    # Only hits are read from the fast device; it is written by the fills and by
    # writes to cached units (written through), nothing is written back at the end.
    assert read == tier["read_bytes_fast"] > 0
    assert written == tier["write_bytes_fast"] + sum(e["bytes"] for e in fills)
    assert tier["drained_bytes"] == 0


@pytest.mark.kernel
def test_recorded_migrations_are_their_own_stream(loop_factory, tmp_path: Path) -> None:
    slow, fast = loop_factory(300), loop_factory(16)
    cfg = engine.WorkloadConfig(
        db_paths=[slow.path], log_paths=[slow.path], destroy_data_on=[slow.path],
        mailboxes=20, mailbox_size_mb=2, iops_per_mailbox=20, duration=3, ioengine="tiered",
        overrides={"tier-fast": fast.path, "tier-capacity-mb": "8", "tier-unit-kb": "1024",
                   "tier-stats-s": "0.2", "tier-migrate-s": "0.2"},
    )  # fmt: skip
    result, _ = engine.run_recorded(cfg, tmp_path / "run.iot", devices=[slow.path, fast.path])
    recs = open_trace(tmp_path / "run.iot").read_all()
    mine = recs[recs["stream"] == schemas.enum("stream")["migration"]]
    copies = result["databases"][0]["streams"]["migration"]
    assert copies["bytes"] > 0
    # Every copy the engine made, recorded under the migration thread's stream.
    assert int(mine["bytes"].sum()) == copies["bytes"]


@pytest.mark.parametrize("policy", ["tier", "cache"])
def test_no_page_lost_under_racing_migrations(tmp_path: Path, policy: str) -> None:
    slow, fast = tmp_path / "slow", tmp_path / "fast"
    slow.write_bytes(b"\0" * (32 * MIB))
    fast.write_bytes(b"\0" * (8 * MIB))
    argv = [str(STRESS), str(slow), str(fast), "1.5", "4", policy]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    t = json.loads(out.stdout)
    # Hundreds of migrations with writes racing them; every block as last written.
    assert t["migrations"] > 100 and t["promoted"] > 50 and t["writes_fast"] > 0
    assert t["verify"]["blocks"] > 1000
    assert t["verify"]["bad_placed"] == 0 and t["verify"]["bad_after_writeback"] == 0


_CAP = "--tier-capacity-mb=8"
BAD = [
    ([], "--ioengine tiered: give the fast device or file with --tier-fast"),
    (["--tier-fast=/nonexistent/fast", _CAP], "--tier-fast /nonexistent/fast: cannot open"),
    (["--tier-fast=FAST", "--tier-capacity-mb=0"], "--tier-capacity-mb 0: holds no 4096 KiB unit"),
    (["--tier-fast=FAST", _CAP, "--tier-unit-kb=3000"], "--tier-unit-kb 3000: not a power of two"),
    (["--tier-fast=FAST", _CAP, "--tier-unit-kb=16"], "--tier-unit-kb 16: smaller than a database"),
    (["--tier-fast=FAST", "--tier-capacity-mb=64"], "FAST: 8388608 bytes, the tier's 16 units"),
    (
        ["--tier-fast=FAST", _CAP, "--tier-stats-s=2", "--tier-migrate-s=1"],
        "--tier-migrate-s 1: shorter than --tier-stats-s 2",
    ),
    (["--tier-fast=FAST", _CAP, "--tier-policy=lfu"], "--tier-policy lfu: tier or cache"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_options_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    fast = tmp_path / "fast"
    fast.write_bytes(b"\0" * (8 * MIB))
    args = [a.replace("FAST", str(fast)) for a in args]
    (tmp_path / "log").mkdir()
    db = tmp_path / "db.edb"
    r = subprocess.run(
        [str(engine_path()), f"--db={db}", f"--log={tmp_path / 'log'}", "--ioengine=tiered",
         f"--result={tmp_path / 'r.json'}", "--quiet=1", *args],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message.replace("FAST", str(fast)) in lines[0]
    assert not db.exists() and not (tmp_path / "r.json").exists()  # nothing half made


def test_cli_passes_tier_options_and_their_errors(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from base.errors import IotapeError
    from iotape.commands.workload import app

    res = CliRunner().invoke(
        app,
        ["run", "--db-path", str(tmp_path), "--log-path", str(tmp_path), "--ioengine", "tiered",
         "--set", "tier-fast=/nonexistent/fast", "--set", "tier-capacity-mb=8", "--duration", "1"],
    )  # fmt: skip
    assert isinstance(res.exception, IotapeError)
    assert str(res.exception).startswith("--tier-fast /nonexistent/fast: cannot open")
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no database, no log file
