"""`iotape workload`: options, bad input and reports, without a device."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from base.errors import IotapeError
from iotape.commands.workload import app
from workload import engine, html, profiles, report

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, ["run", *args])


def test_help_has_an_example() -> None:
    res = runner.invoke(app, ["run", "--help"])
    assert res.exit_code == 0
    assert "Example: iotape workload run" in res.output
    assert "Example: iotape workload show" in runner.invoke(app, ["show", "--help"]).output


def test_missing_path_is_a_one_line_error(tmp_path: Path) -> None:
    res = _run("--db-path", str(tmp_path / "nope"), "--log-path", str(tmp_path))
    assert isinstance(res.exception, IotapeError)
    assert "no such file, directory or device" in str(res.exception)


def test_impossible_size_in_a_directory(tmp_path: Path) -> None:
    res = _run(
        "--db-path", str(tmp_path), "--log-path", str(tmp_path),
        "--mailboxes", "1000000", "--mailbox-size-mb", "1000000",
    )  # fmt: skip
    assert isinstance(res.exception, IotapeError)
    assert "impossible size" in str(res.exception)
    assert not list(tmp_path.glob("*.edb")), "nothing is created when the sizes cannot fit"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threads", "auto"], "only in --mode throughput"),
        (["--threads", "many"], "a number or 'auto'"),
        (["--mode", "fast"], "--mode fast"),
        (["--profile", "exchange2003"], "--profile exchange2003"),
        (["--set", "nonsense"], "expected NAME=VALUE"),
        (["--set", "result=/x"], "set by the command itself"),
        (["--mailboxes", "1", "--databases", "2"], "fewer than --databases"),
        (["--emulate-latency", "1,2"], "DB_READ_MS,DB_WRITE_MS,LOG_WRITE_MS"),
        (["--emulate-latency", "no-such-run"], "no such published profile"),
        (["--transactions", "5", "--mode", "backup"], "--transactions 5: only in --mode"),
        (
            ["--transactions", "5", "--mode", "throughput", "--threads", "auto"],
            "--transactions 5: not with --threads auto",
        ),
    ],
)
def test_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    res = _run("--db-path", str(tmp_path), "--log-path", str(tmp_path), *args)
    assert isinstance(res.exception, IotapeError), res.output
    assert message in str(res.exception)


def test_one_path_per_database_or_one_for_all(tmp_path: Path) -> None:
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    res = _run(
        "--db-path", str(a), "--db-path", str(b), "--db-path", str(c),
        "--log-path", str(a), "--databases", "2",
    )  # fmt: skip
    assert isinstance(res.exception, IotapeError)
    assert "one per database (2), not 3" in str(res.exception)


def test_engine_options_come_from_its_table() -> None:
    exe = str(engine.engine_path())
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
    for opt in ("--preread-cont", "--flush-start-pct", "--checkpoint-depth-mb", "--bdm-rate"):
        assert opt in out
    bad = subprocess.run([exe, "--threads=999"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "--threads 999: out of range" in bad.stderr
    mix = subprocess.run([exe, "--read=50"], capture_output=True, text=True)
    assert mix.returncode == 2 and "add up to 115" in mix.stderr


def test_published_latency_of_the_throughput_runs() -> None:
    """The 2010 run published no latencies; the 2013 run on the same hardware does."""
    ms = {"db_read": 11.47, "db_write": 3.32, "log_write": 0.50}
    assert profiles.published_latency("exchange2013-throughput") == ms
    assert profiles.published_latency("exchange2010-throughput") == ms
    cfg = engine.WorkloadConfig(db_paths=["/d"], log_paths=["/l"], emulate_latency_ms=ms)
    argv = engine.engine_argv(cfg, engine.layout.Layout([], [], []), Path("/r"), quiet=True)
    assert "--emulate-log-write-ms=0.5" in argv and "--emulate-db-read-ms=11.47" in argv


def test_published_shape_of_the_esrp_run() -> None:
    s = profiles.published_shape("exchange2010-esrp-mailbox-profile")
    assert s["db_read_write_ratio"] == pytest.approx(28.62 / 19.56)
    assert s["log_writes_per_tx_io"] == pytest.approx(17.73 / (28.62 + 19.56))
    # one extra copy; closed logs = log bytes / 1 MiB
    assert s["repl_reads_per_log_per_copy"] == pytest.approx(0.347 / (17.73 * 4836 / 2**20))


def _result(interrupted: bool = False) -> dict:
    def st(count: int, avg: int, lat: float) -> dict:
        return {"count": count, "bytes": count * avg, "per_s": count / 10, "avg_bytes": avg,
                "lat_avg_ms": lat, "lat_max_ms": lat * 4, "hist_log2_ns": [count]}  # fmt: skip

    streams = {
        "db-read": st(1463, 38000, 5.0),
        "db-write": st(1000, 37000, 3.0),
        "log-write": st(900, 4836, 12.0),  # over the 10 ms log write limit
        "bdm-read": st(236, 262144, 8.0),
    }
    return {
        "format": "iotape-ese-result", "version": 1, "mode": "performance",
        "interrupted": interrupted, "elapsed_s": 10.0, "copies": 2, "log_file_bytes": 2**20,
        "threads_final": 3, "auto": [],
        "databases": [{"db": 0, "mailboxes": 100, "operations": 1500, "closed_logs": 4,
                       "cache": {"pages": 100, "hits": 1, "misses": 2, "dirty_at_end": 0},
                       "streams": streams}],
        "config": {"mailboxes": 100, "iops_per_mailbox": 2.0, "profile": "exchange2010"},
    }  # fmt: skip


def test_report_verdict_names_the_failed_threshold(tmp_path: Path) -> None:
    rep = report.build(_result())
    assert rep.achieved_tx_iops == pytest.approx(246.3)
    assert rep.target_tx_iops == pytest.approx(200)
    assert rep.verdict.result == "fail"
    failed = [c.check for c in rep.verdict.checks if not c.passed]
    assert failed == ["log-write avg ms"]
    rows = {r.figure: r for r in rep.shape.rows}
    assert rows["db_read_write_ratio"].engine == pytest.approx(1.463)
    assert abs(rows["db_read_write_ratio"].deviation or 0) < 0.01
    page = html.render(rep)
    assert "FAIL" in page and "log-write avg ms" in page
    assert "http" not in page and "<script" not in page, "self-contained"
    out = tmp_path / "rep.json"
    out.write_text(json.dumps(rep.data()))
    res = runner.invoke(app, ["show", str(out), "--html", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    assert "FAIL" in res.output and (tmp_path / "r.html").exists()


def test_show_rejects_other_json(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"format": "something-else"}')
    res = runner.invoke(app, ["show", str(p)])
    assert isinstance(res.exception, IotapeError)
    assert "not a workload report" in str(res.exception)


def test_transactions_out_of_range_is_refused(tmp_path: Path) -> None:
    res = _run("--db-path", str(tmp_path), "--log-path", str(tmp_path), "--transactions", "-1")
    assert res.exit_code == 2, res.output
    assert not list(tmp_path.glob("*.edb")), "nothing is created for a bad option"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--transactions=many"], "--transactions many: not a number"),
        (["--transactions=-3"], "--transactions -3: out of range"),
        (["--transactions=5", "--mode=backup"], "--transactions 5: only in performance"),
        (["--transactions=5", "--auto-threads=1"], "--transactions 5: not with --auto-threads"),
    ],
)
def test_engine_refuses_bad_transactions_in_one_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """The engine itself (as `--set transactions=...` reaches it): one line, no result."""
    exe = str(engine.engine_path())
    result = tmp_path / "r.json"
    argv = [exe, f"--db={tmp_path / 'db0.edb'}", f"--log={tmp_path}", f"--result={result}", *args]
    out = subprocess.run(argv, capture_output=True, text=True)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert not result.exists() and not (tmp_path / "db0.edb").exists()
