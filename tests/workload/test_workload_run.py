"""The engine on real loop devices: modes, reuse, interruption, raw-device safety."""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from base.errors import IotapeError
from iotape.commands.workload import app
from workload import engine, layout

runner = CliRunner()
pytestmark = pytest.mark.kernel

SMALL = ["--mailboxes", "20", "--mailbox-size-mb", "2", "--iops-per-mailbox", "10"]


def _cli(dev: str, *args: str):
    return runner.invoke(
        app, ["run", "--db-path", dev, "--log-path", dev, "--destroy-data-on", dev, *args]
    )


def _cfg(dev: str, **kw) -> engine.WorkloadConfig:
    base = dict(mailboxes=20, mailbox_size_mb=2, iops_per_mailbox=10, duration=1.5)
    base.update(kw)
    return engine.WorkloadConfig(db_paths=[dev], log_paths=[dev], destroy_data_on=[dev], **base)


def _engine_proc(cfg: engine.WorkloadConfig, result: Path) -> subprocess.Popen:
    argv = engine.engine_argv(cfg, engine.validate(cfg), result, quiet=False)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines_until(proc: subprocess.Popen, kind: str) -> list[dict]:
    seen = []
    for line in proc.stdout or []:
        msg = json.loads(line)
        seen.append(msg)
        if msg["type"] == kind:
            break
    return seen


def test_performance_run_report_and_html(loop, tmp_path: Path) -> None:
    rep_path, page = tmp_path / "r.json", tmp_path / "r.html"
    res = _cli(loop.path, *SMALL, "--duration", "2", "--report", str(rep_path), "--html", str(page))
    assert res.exit_code == 0, res.output
    rep = json.loads(rep_path.read_text())
    db = rep["databases"][0]
    for s in ("db-read", "db-write", "log-write", "bdm-read", "log-replication-read"):
        assert db[s]["count"] > 0, s
    assert rep["target_tx_iops"] == 200
    assert rep["achieved_tx_iops"] > 0
    assert db["log-write"]["bytes"] % 4096 == 0, "log writes are whole 4 KiB sectors"
    assert db["log-write"]["avg_bytes"] >= 4096
    assert rep["verdict"]["result"] in ("pass", "fail")
    assert "transactional IOPS" in res.output
    text = page.read_text()
    assert "<table>" in text and "http" not in text


def test_bdm_off_and_single_copy_have_no_background_reads(loop) -> None:
    res = engine.run(_cfg(loop.path, bdm=False, copies=1))
    streams = res["databases"][0]["streams"]
    assert "bdm-read" not in streams and "log-replication-read" not in streams
    assert streams["db-read"]["count"] > 0


def test_reuse_and_interrupted_creation(loop_factory) -> None:
    loop = loop_factory(1200)
    cfg = _cfg(loop.path, mailbox_size_mb=50)  # 1 GB: creation takes a while
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "r.json"
        proc = _engine_proc(cfg, result)
        seen = _lines_until(proc, "create")
        assert seen[0] == {
            "type": "db", "db": 0, "action": "create", "bytes": cfg.db_bytes(), "found": "new"
        }  # fmt: skip
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        # Half-created: the next run must recreate it, never trust it.
        proc = _engine_proc(cfg, result)
        assert _lines_until(proc, "db")[0] | {"bytes": 0} == {
            "type": "db", "db": 0, "action": "create", "bytes": 0, "found": "incomplete"
        }  # fmt: skip
        assert proc.wait(timeout=60) == 0
        proc = _engine_proc(cfg, result)
        assert _lines_until(proc, "db")[0]["action"] == "reuse"
        assert proc.wait(timeout=60) == 0


def test_sigint_gives_a_partial_result(loop) -> None:
    cfg = _cfg(loop.path, duration=60)
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "r.json"
        proc = _engine_proc(cfg, result)
        _lines_until(proc, "tick")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        res = json.loads(result.read_text())
    assert res["interrupted"] is True
    assert res["elapsed_s"] < 30
    db = res["databases"][0]
    assert db["streams"]["db-read"]["count"] > 0
    assert db["cache"]["dirty_at_end"] == 0, "a clean stop writes the cache back"


def test_backup_then_soft_recovery(loop) -> None:
    """A run that stops without writing its cache back (end=crash) leaves pages
    for recovery to redo, which it writes back before it ends."""
    run = engine.run(_cfg(loop.path, duration=1.5, overrides={"end": "crash"}))
    assert run["databases"][0]["closed_logs"] >= 1
    assert run["databases"][0]["cache"]["dirty_at_end"] > 0
    backup = engine.run(_cfg(loop.path, mode="backup"))
    db = backup["databases"][0]
    assert db["streams"]["backup-read"]["bytes"] == db["pages"] * 32768
    assert "db-read" not in db["streams"]
    recov = engine.run(_cfg(loop.path, mode="soft-recovery"))
    db = recov["databases"][0]
    assert db["streams"]["log-read"]["count"] > 0
    assert db["recovery"]["records"] > 0 and db["recovery"]["pages_redone"] > 0
    assert db["streams"]["db-write"]["count"] > 0
    assert db["cache"]["dirty_at_end"] == 0


def test_throughput_auto_tunes_threads(loop) -> None:
    res = engine.run(
        _cfg(loop.path, mode="throughput", threads="auto", duration=2.5,
             overrides={"auto-step-s": "0.5", "max-threads": "4"})
    )  # fmt: skip
    assert res["auto"], "the tuner logs each step"
    assert res["auto"][0]["threads"] == 1
    assert 1 <= res["threads_final"] <= 4
    assert res["databases"][0]["operations"] > 0


def test_directory_targets_on_a_filesystem(loop, tmp_path: Path) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", loop.path], check=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", loop.path, str(mnt)], check=True)
    try:
        cfg = engine.WorkloadConfig(db_paths=[str(mnt)], log_paths=[str(mnt)], mailboxes=20,
                                    mailbox_size_mb=2, iops_per_mailbox=10, duration=1.5,
                                    databases=2)  # fmt: skip
        lay = engine.validate(cfg)
        assert lay.devices == [loop.path]
        res = engine.run(cfg)
        assert len(res["databases"]) == 2
        assert (mnt / "db0.edb").exists() and (mnt / "db1.edb").exists()
        assert list((mnt / "db0-logs").glob("E00*.log"))
        # The mounted device itself is refused as a raw target.
        with pytest.raises(IotapeError, match="mounted at"):
            layout.check_raw(loop.path, set())
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_raw_device_with_a_filesystem_is_refused(loop) -> None:
    subprocess.run(["mkfs.ext4", "-q", "-F", loop.path], check=True)
    res = runner.invoke(app, ["run", "--db-path", loop.path, "--log-path", loop.path, *SMALL])
    assert isinstance(res.exception, IotapeError)
    assert "ext4 signature" in str(res.exception) and "--destroy-data-on" in str(res.exception)


def test_raw_device_too_small(loop_factory) -> None:
    loop = loop_factory(128)
    res = _cli(loop.path, "--mailboxes", "100", "--mailbox-size-mb", "10")
    assert isinstance(res.exception, IotapeError)
    assert "impossible size" in str(res.exception)


def test_record_option_wraps_the_run_in_the_recorder(loop, tmp_path: Path) -> None:
    from recorder.tracefile import open_trace

    out = tmp_path / "w.iot"
    res = _cli(loop.path, *SMALL, "--duration", "1", "--record", str(out), "--copies", "3")
    assert res.exit_code == 0, res.output
    trace = open_trace(out)
    assert trace.header["metadata"]["copies"] == 3
    assert trace.header["metadata"]["mode"] == "performance"
    assert len(trace.read_all()) > 0
    again = _cli(loop.path, *SMALL, "--duration", "1", "--record", str(out))
    assert isinstance(again.exception, IotapeError), "an existing trace needs --force"


def test_record_wakes_records_the_engines_threads_waking_each_other(loop, tmp_path: Path) -> None:
    from recorder.tracefile import open_trace
    from recorder.tracefile.format import SCHED_VERSION

    res = _cli(loop.path, *SMALL, "--duration", "1", "--record-wakes")
    assert isinstance(res.exception, IotapeError), "--record-wakes needs --record"
    out = tmp_path / "w.iot"
    res = _cli(loop.path, *SMALL, "--duration", "1", "--record", str(out), "--record-wakes")
    assert res.exit_code == 0, res.output
    with open_trace(out) as t:
        assert t.header["version"] == SCHED_VERSION  # wake and sched records
        names = {int(r["tid"]): r["comm"].decode() for r in t.read_all()}
        wakes = [w for part in t.iter_wakes() for w in part]
    # the sessions' commits wake the log writer, its writes wake the sessions
    pairs = {(names.get(int(w["offset"]), ""), names.get(int(w["tid"]), "")) for w in wakes}
    assert any(a.startswith("ese-user") and b.startswith("ese-log") for a, b in pairs), pairs
    assert any(a.startswith("ese-log") and b.startswith("ese-user") for a, b in pairs), pairs


def _log_bytes(db: dict, copies: int) -> tuple[int, int]:
    """(bytes written to the log, bytes the log grew by): replication reads each
    closed file's 4 KiB header and what was written into it, once per extra copy."""
    written = db["streams"]["log-write"]["bytes"]
    read = db["streams"]["log-replication-read"]["bytes"] // (copies - 1)
    return written, read - 4096 * db["closed_logs"]


def test_log_partial_segments(loop) -> None:
    """pad: the log grows by every byte written; rewrite and shadow write the
    partial last segment again as it fills (shadow also writes a copy of it), so
    they write more than the log grows; soft recovery replays each kind of log."""
    overhead = {}
    for how in ("pad", "rewrite", "shadow"):
        cfg = _cfg(loop.path, copies=2, overrides={"log-partial": how, "lazy-flush-ms": "0"})
        db = engine.run(cfg)["databases"][0]
        written, grown = _log_bytes(db, 2)
        assert written % 4096 == 0 and db["closed_logs"] >= 1, how
        overhead[how] = written / grown - 1
        recov = engine.run(_cfg(loop.path, mode="soft-recovery", overrides={"log-partial": how}))
        assert recov["databases"][0]["recovery"]["records"] > 0, how
    assert overhead["pad"] == 0
    assert 0.05 < overhead["rewrite"] < overhead["shadow"]


def test_log_partial_is_checked(loop) -> None:
    with pytest.raises(IotapeError, match="--log-partial sideways: pad, rewrite or shadow"):
        engine.run(_cfg(loop.path, overrides={"log-partial": "sideways"}))


def test_null_backend_needs_no_database_space(small_mount) -> None:
    """`--ioengine null` models a deployment larger than the disk: the database is
    sized, never written, and never reused by a real run."""
    where = small_mount(64 * 1024)
    big = dict(db_paths=[str(where)], log_paths=[str(where)], mailboxes=100,
               mailbox_size_mb=1024, duration=1.0, copies=1, bdm=False)  # fmt: skip
    with pytest.raises(IotapeError, match="impossible size"):
        engine.validate(engine.WorkloadConfig(**big))
    res = engine.run(engine.WorkloadConfig(ioengine="null", **big))
    s = res["databases"][0]["streams"]
    assert s["db-read"]["count"] > 0 and s["db-write"]["count"] > 0
    st = (where / "db0.edb").stat()
    assert st.st_size > 100 * 2**30 and st.st_blocks * 512 < 2**20
    small = dict(big, mailboxes=20, mailbox_size_mb=1)
    engine.run(engine.WorkloadConfig(ioengine="null", **small))
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "r.json"
        for expect in ("create", "reuse"):
            proc = _engine_proc(engine.WorkloadConfig(**small), result)
            assert _lines_until(proc, "db")[0]["action"] == expect
            assert proc.wait(timeout=60) == 0
