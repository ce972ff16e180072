"""The ESRP sequence on loop devices: performance -> backup -> soft recovery on the
same databases, what each phase leaves for the next, the redo's I/O shape and
order, the performance target, and interrupted phases."""

from __future__ import annotations

import dataclasses
import itertools
import json
import signal
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from ese_log_helpers import log_records
from typer.testing import CliRunner

from base.errors import IotapeError
from iotape.commands.workload import app
from schemas.documents.workload_report import StreamFigures
from workload import engine, esrp, report

runner = CliRunner()
pytestmark = pytest.mark.kernel

MIB = 1 << 20
PAGE = 32768
# A small checkpoint depth: the performance phase writes back what is older than
# 0.1 MB of log, so (as in a long published run) the crash leaves only the last
# checkpoint depth's pages for recovery to redo.
SMALL = dict(mailboxes=20, mailbox_size_mb=2, iops_per_mailbox=30, duration=3)
DEPTH = {"checkpoint-depth-mb": "0.1"}


def _cfg(db: list[str], log: list[str], destroy: list[str], **kw) -> engine.WorkloadConfig:
    base: dict = dict(SMALL, overrides=dict(DEPTH))
    base.update(kw)
    return engine.WorkloadConfig(db_paths=db, log_paths=log, destroy_data_on=destroy, **base)


def _raw(dev: str, **kw) -> engine.WorkloadConfig:
    return _cfg([dev], [dev], [dev], **kw)


def _header(buf: bytes) -> dict[str, int] | None:
    line = buf[:128].split(b"\n")[0].decode("latin1")
    if not line.startswith("IOTAPE-ESE-LOG 2 "):
        return None
    return {k: int(v) for k, v in (x.split("=") for x in line.split()[2:])}


def _records(buf: bytes) -> list[tuple[int, int]]:
    """The page runs a log file's records name, in log order (session.c's record)."""
    return [
        struct.unpack_from("<qq", buf, pos + 16 + 16 * i)
        for pos, _op, nruns in log_records(buf)
        for i in range(min(nruns, 8))
    ]


def _device_logs(dev: str, region: engine.layout.Target, db: int) -> dict[int, tuple[int, bytes]]:
    """Generation -> (stream, content) of every log file in a device's log region."""
    out = {}
    with open(dev, "rb") as f:
        for slot in range(region.size // MIB):
            f.seek(region.off + slot * MIB)
            buf = f.read(MIB)
            h = _header(buf)
            if h and h["db"] == db:
                out[h["gen"]] = (h["stream"], buf)
    return out


def _dir_logs(logdir: Path, db: int) -> dict[int, tuple[int, bytes]]:
    out = {}
    for p in logdir.glob(f"E{db:02d}*.log"):
        buf = p.read_bytes()
        h = _header(buf)
        if h:
            out[h["gen"]] = (h["stream"], buf)
    return out


def _of_stream(logs: dict[int, tuple[int, bytes]], stream: int) -> list[int]:
    return sorted(g for g, (s, _) in logs.items() if s == stream)


def _pages(stream: StreamFigures | None) -> float:
    assert stream is not None
    return stream.bytes / PAGE


def test_esrp_command_one_database_recorded(loop, tmp_path: Path) -> None:
    from recorder.tracefile import open_trace

    dev = loop.path
    out, page, trace = tmp_path / "esrp.json", tmp_path / "esrp.html", tmp_path / "x.iot"
    res = runner.invoke(app, [
        "esrp", "--db-path", dev, "--log-path", dev, "--destroy-data-on", dev,
        "--mailboxes", "20", "--mailbox-size-mb", "2", "--iops-per-mailbox", "30",
        "--duration", "3", "--set", "checkpoint-depth-mb=1", "--cache-max-mb", "64",
        "--report", str(out), "--html", str(page), "--record", str(trace),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert rep["format"] == "iotape-esrp-report"
    assert [p["phase"] for p in rep["phases"]] == ["performance", "backup", "soft-recovery"]
    assert [p["verdict"]["result"] for p in rep["phases"]][1:] == ["pass", "pass"]
    assert "Log files replayed/s" in res.output and "Database reads avg latency" in res.output
    assert "<h2>soft-recovery</h2>" in page.read_text()
    shown = runner.invoke(app, ["show", str(out)])
    assert shown.exit_code == 0 and "Log files replayed/s" in shown.output
    seq = rep["sequence"]
    reps = {}
    for phase in ("performance", "backup", "soft-recovery"):
        reps[phase] = json.loads(esrp.phase_path(out, phase).read_text())
        assert reps[phase]["format"] == "iotape-workload-report"
        assert reps[phase]["config"]["sequence"] == seq
        head = open_trace(esrp.phase_path(trace, phase)).header["metadata"]
        assert (head["sequence"], head["mode"]) == (seq, phase)

    lay = engine.validate(_raw(dev))
    db_t, log_t = lay.dbs[0], lay.logs[0]
    # Backup: only the database, front to back in 256 KiB reads; nothing written.
    ev = open_trace(esrp.phase_path(trace, "backup")).read_all()
    assert not (ev["op"] == 1).any(), "a backup writes nothing"
    b = ev[ev["comm"] == b"ese-backup-0"]
    b.sort(order="ts_issue_ns")
    assert set(b["bytes"].tolist()) == {256 * 1024}
    offs = b["offset"].astype("int64")
    assert offs[0] == db_t.off + PAGE and (offs[1:] - offs[:-1] == 256 * 1024).all()
    assert len(b) * 256 * 1024 == reps["backup"]["databases"][0]["backup-read"]["bytes"]

    # Recovery replays every log file the performance phase left (checked on the device).
    stream = reps["performance"]["databases"][0]["log_stream"]
    logs = _device_logs(dev, log_t, 0)
    gens = _of_stream(logs, stream)
    rec = reps["soft-recovery"]["databases"][0]
    assert rec["recovery"]["log_stream"] == stream
    assert rec["recovery"]["logs_replayed"] == len(gens) >= 2
    # ...and reads the pages the log names in the log's order.
    first: dict[int, int] = {}
    for g in gens:
        for p, n in _records(logs[g][1]):
            for q in range(p, p + n):
                first.setdefault(q, len(first))
    ev = open_trace(esrp.phase_path(trace, "soft-recovery")).read_all()
    r = ev[(ev["comm"] == b"ese-user-rdo-0") & (ev["op"] == 0)]
    r.sort(order="ts_issue_ns")
    order = [first[(int(o) - db_t.off) // PAGE - 1] for o in r["offset"]]
    assert len(order) > 50
    ahead = sum(b > a for a, b in itertools.pairwise(order))
    assert ahead >= 0.95 * (len(order) - 1), f"{ahead} of {len(order) - 1} reads in log order"


def _snapshot(paths: list[Path]) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns) for d in paths for p in d.glob("*.log")
    }


def test_esrp_sequence_three_databases_on_ext4(loop_factory, tmp_path: Path) -> None:
    loop = loop_factory(512)
    subprocess.run(["mkfs.ext4", "-q", "-F", loop.path], check=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", loop.path, str(mnt)], check=True)
    try:
        cfg = _cfg([str(mnt)], [str(mnt)], [], databases=3, mailboxes=30)
        logdirs = [mnt / f"db{i}-logs" for i in range(3)]
        after: dict[str, dict] = {}

        def phase(c: engine.WorkloadConfig, _trace: Path | None) -> dict:
            res = engine.run(c)
            after[c.mode] = _snapshot(logdirs)
            return res

        seq, reps = esrp.run_sequence(cfg, "performance", phase)
        rep = esrp.build(seq, reps, "performance")
        perf, backup, recov = reps
        assert [r.mode for r in reps] == ["performance", "backup", "soft-recovery"]
        assert after["backup"] == after["performance"], "a backup leaves the logs as they were"
        assert after["soft-recovery"] == after["performance"], "recovery removes no log"
        read = written = 0.0
        for i in range(3):
            b = backup.databases[i].stream("backup-read")
            assert b is not None and b.avg_bytes == 256 * 1024
            assert b.bytes == 10 * 2 * MIB  # every page of the 10-mailbox database
            stream = perf.databases[i].log_stream
            gens = _of_stream(_dir_logs(logdirs[i], i), stream)
            r = recov.databases[i]
            assert r.recovery is not None
            assert r.recovery.logs_replayed == len(gens) >= 1
            assert r.recovery.pages_redone > 0
            read += _pages(r.stream("db-read"))
            written += _pages(r.stream("db-write"))
        assert read > 5 * written > 0, f"recovery read {read:.0f} pages, wrote {written:.0f}"
        assert rep["verdict"]["phases_run"] == ["performance", "backup", "soft-recovery"]
        assert len(rep["phases"][2]["databases"]) == 3

        # The next run starts a new stream and keeps these logs; recovery then
        # replays only the new stream.
        kept = sum(len(list(d.glob("*.log"))) for d in logdirs)
        again = engine.run(dataclasses.replace(cfg, duration=1.0))
        assert sum(d["logs_kept"] for d in again["databases"]) == kept
        assert all(d["log_stream"] > perf.databases[0].log_stream for d in again["databases"])
        recov2 = engine.run(dataclasses.replace(cfg, mode="soft-recovery"))
        for i, d in enumerate(recov2["databases"]):
            gens = _of_stream(_dir_logs(logdirs[i], i), again["databases"][i]["log_stream"])
            assert d["recovery"]["logs_replayed"] == len(gens)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_clean_end_leaves_recovery_only_reads(loop) -> None:
    """After a clean shutdown every page already holds its last record: redo reads
    the pages, applies nothing, writes nothing."""
    engine.run(_raw(loop.path, overrides={}))
    res = engine.run(_raw(loop.path, mode="soft-recovery"))
    db = res["databases"][0]
    assert db["recovery"]["records"] > 0 and db["streams"]["db-read"]["count"] > 0
    assert db["recovery"]["pages_redone"] == 0
    assert "db-write" not in db["streams"]


def test_recovery_without_logs_is_refused(loop) -> None:
    with pytest.raises(IotapeError, match="no log files of database 0 to replay") as e:
        engine.run(_raw(loop.path, mode="soft-recovery"))
    assert "\n" not in str(e.value)


def test_performance_30s_meets_its_target(loop_factory) -> None:
    """The issue's run: 200 mailboxes at 0.3 IOPS on a loop device, 30 s."""
    loop = loop_factory(512)
    cfg = _raw(loop.path, mailboxes=200, iops_per_mailbox=0.3, mailbox_size_mb=1, duration=30,
               overrides={})  # fmt: skip
    rep = report.build(engine.run(cfg))
    assert rep.target_tx_iops == pytest.approx(60.0)
    check = next(c for c in rep.verdict.checks if c.check == "achieved >= target IOPS")
    assert check.passed, report.check_line(check)
    assert rep.achieved_tx_iops >= 60.0
    assert report.check_line(check) == f"achieved {rep.achieved_tx_iops:,.1f} >= target 60.0"


def _start(cfg: engine.WorkloadConfig, result: Path) -> subprocess.Popen:
    argv = engine.engine_argv(cfg, engine.validate(cfg), result, quiet=False)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _interrupt_after(proc: subprocess.Popen, kind: str, sig: int = signal.SIGINT) -> int:
    for line in proc.stdout or []:
        if json.loads(line)["type"] == kind:
            break
    proc.send_signal(sig)
    return proc.wait(timeout=60)


def test_interrupted_phases_leave_what_the_next_needs(loop_factory) -> None:
    loop = loop_factory(1200)
    cfg = _raw(loop.path, mailbox_size_mb=50, duration=30, overrides={**DEPTH, "end": "crash"})
    lay = engine.validate(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "r.json"
        # The performance phase, killed outright after 1 s: the database stays
        # reusable and its logs replayable.
        proc = _start(cfg, result)
        assert _interrupt_after(proc, "tick", signal.SIGKILL) == -signal.SIGKILL
        gens = _of_stream(_device_logs(loop.path, lay.logs[0], 0), 1)
        assert gens, "the killed run's log files are on the device"
        # Backup, interrupted as it starts: it writes nothing, so nothing is lost.
        proc = _start(dataclasses.replace(cfg, mode="backup"), result)
        assert _interrupt_after(proc, "start") in (0, 130)
        # Recovery, interrupted (slowed by an emulated 20 ms read), then run again.
        slow = {**cfg.overrides, "emulate-db-read-ms": "20"}
        recov = dataclasses.replace(cfg, mode="soft-recovery", overrides=slow)
        proc = _start(recov, result)
        assert _interrupt_after(proc, "start") == 130
        assert json.loads(result.read_text())["interrupted"] is True
        done = engine.run(dataclasses.replace(cfg, mode="soft-recovery"))
        db = done["databases"][0]
        assert db["recovery"]["logs_replayed"] == len(gens)
        assert db["recovery"]["pages_redone"] > 0, "the killed run's unwritten pages are redone"
        # The database was reused by every phase, never recreated.
        proc = _start(cfg, result)
        first = json.loads(next(iter(proc.stdout or [])))
        proc.kill()
        proc.wait()
        assert (first["action"], first["found"]) == ("reuse", "ready")


def test_ctrl_c_stops_the_sequence_with_a_partial_report(loop, tmp_path: Path) -> None:
    """Ctrl-C in the performance phase: exit 130, a partial report of that phase,
    and its logs left for the recovery the user runs next."""
    import sys

    dev, out = loop.path, tmp_path / "esrp.json"
    argv = [sys.executable, "-m", "iotape", "workload", "esrp", "--db-path", dev,
            "--log-path", dev, "--destroy-data-on", dev, "--mailboxes", "20",
            "--mailbox-size-mb", "2", "--duration", "60", "--report", str(out)]  # fmt: skip
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stderr or []:
            if "new log stream" in line:
                break
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rep = json.loads(out.read_text())
    assert rep["interrupted"] and [p["phase"] for p in rep["phases"]] == ["performance"]
    assert rep["verdict"]["result"] == "fail"
    recov = engine.run(_raw(dev, mode="soft-recovery"))
    assert recov["databases"][0]["recovery"]["logs_replayed"] >= 1


def test_recovery_redoes_only_what_the_stop_left_behind(loop) -> None:
    """Soft recovery as Jetstress runs it: the test ends with the database behind its
    log by `recovery-behind-pct` of it (4 % by default: ESE's 20 MB checkpoint depth
    of the ~500 logs a published soft-recovery test replays). Recovery reads every
    page the log names and compares; it redoes and writes only the pages behind, a
    small fraction of what it reads. Left 100 % behind (every dirty page dropped, the
    old end=crash) it writes back more of them, from the same log and the same reads."""
    out = {}
    for pct in ("4", "100"):
        # The default checkpoint depth (20 MB): more than the test's log, so only
        # the parameter decides what the stop writes.
        cfg = _raw(loop.path, overrides={"end": "crash", "recovery-behind-pct": pct})
        engine.run(cfg)
        rep = report.build(engine.run(dataclasses.replace(cfg, mode="soft-recovery")))
        (db,) = rep.databases
        rec = db.recovery
        assert rec is not None and rec.pages_named is not None
        assert rec.pages_named == rec.pages_current + rec.pages_redone > 0
        assert rec.logs_replayed >= 2 and rec.logs_per_s and rec.logs_per_s > 0
        log_read = db.stream("log-read")
        assert log_read is not None and log_read.avg_bytes == 256 * 1024  # as before
        assert rec.pages_read == _pages(db.stream("db-read")) > 0
        assert rec.pages_written == (_pages(db.stream("db-write")) if db.stream("db-write") else 0)
        out[pct] = rec
        (row,) = esrp.db_table(rep)
        assert row["pages_redone"] == rec.pages_redone and row["pages_current"] == rec.pages_current
    few, all_ = out["4"], out["100"]
    # The published shape: writes a small fraction of reads, most pages current.
    assert few.pages_written is not None and few.pages_read is not None
    assert 0 < few.pages_written < 0.1 * few.pages_read
    assert few.pages_current > 10 * few.pages_redone
    # The same load, so about the same log, pages named and read (a time-bounded run:
    # a few records more or less); more left behind, more redone.
    assert all_.pages_named == pytest.approx(few.pages_named, rel=0.1)
    assert all_.pages_read == pytest.approx(few.pages_read, rel=0.1)
    assert all_.pages_redone > few.pages_redone
    assert all_.pages_written is not None and all_.pages_written > few.pages_written
