"""Sessions that find every cached page dirty: they wait for the scavenger, which
writes for them, and the end of the run or a signal ends the wait.

The hang (a hybrid lab's tier run, 6 databases, one session each): the default
cache of 64 pages per database scavenges from 2 clean pages (start) to 4 (stop).
A session whose accesses miss more pages than are clean took the clean ones,
found no more, gave them back and retried every 5 ms. The pages it gave back are
free, so with more of them than the stop threshold the scavenger was not due;
the checkpoint had nothing old enough, since the log stands still while its only
writer waits. Nothing was written again, and the session left the loop only once
the checkpoint writer had stopped, which main() does after joining the sessions:
neither the end of the run nor SIGINT/SIGTERM ended it.

Here the same shape on a file: the smallest cache (64 pages), one session, runs
of up to 16 pages (preread-cont 0.95), every operation a replace (all accesses
dirty) and a checkpoint depth no run reaches. Each run is a subprocess with a
timeout, so a hang fails the test instead of the suite; the timeouts are minutes
for a few seconds of load, which no stall of a loaded machine comes near."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from workload import engine

HANG_S = 120  # a run that is not over by then hangs

STARVED = {
    "preread-cont": "0.95",
    "preread-max": "16",
    "insert": "0",
    "delete": "0",
    "replace": "100",
    "read": "0",
    "checkpoint-depth-mb": "100000",
}


def _cfg(
    tmp: Path, duration: float = 2, emulate: dict[str, float] | None = None
) -> engine.WorkloadConfig:
    for d in ("db", "log"):
        (tmp / d).mkdir(exist_ok=True)
    return engine.WorkloadConfig(
        db_paths=[str(tmp / "db")], log_paths=[str(tmp / "log")], mode="throughput",
        mailboxes=20, mailbox_size_mb=2, threads=1, duration=duration, cache_min_mb=0.1,
        cache_max_mb=0.1, ioengine="psync", bdm=False, overrides=dict(STARVED),
        emulate_latency_ms=emulate,
    )  # fmt: skip


def _start(cfg: engine.WorkloadConfig, result: Path) -> subprocess.Popen:
    argv = engine.engine_argv(cfg, engine.validate(cfg), result, quiet=False)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, what: str) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"the engine hung: {what}, not over after {HANG_S} s")
    return proc.returncode, err


def _until_tick(proc: subprocess.Popen) -> None:
    """Read progress until the first second of load has been reported."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if json.loads(line)["type"] == "tick":
            return
    pytest.fail("the engine ended before its first tick")


def test_sessions_short_of_clean_pages_get_them_and_the_run_ends(tmp_path: Path) -> None:
    result = tmp_path / "r.json"
    rc, err = _finish(_start(_cfg(tmp_path), result), "a 2 s run on an all-dirty cache")
    assert rc == 0, err
    res = json.loads(result.read_text())
    db = res["databases"][0]
    # The scenario happened: the session did find every page dirty (and waited).
    assert db["cache"]["pages"] == 64
    assert db["cache"]["clean_waits"] > 0, db["cache"]
    # ...and the scavenger wrote for it: pages were written and the load went on
    # (a livelocked session is stuck in its first operations).
    assert db["streams"]["db-write"]["count"] > 0
    assert db["operations"] > 100, db["operations"]
    assert db["cache"]["dirty_at_end"] == 0, "a clean stop writes the cache back"
    assert res["interrupted"] is False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_engine_while_sessions_wait_for_clean_pages(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # Writes held to 200 ms (an emulation: the device is a file) keep the
    # session waiting for the scavenger nearly all the time.
    cfg = _cfg(tmp_path, duration=600, emulate={"db_write": 200.0})
    result = tmp_path / "r.json"
    proc = _start(cfg, result)
    _until_tick(proc)
    proc.send_signal(sig)
    rc, err = _finish(proc, f"{sig.name} one second into a 600 s run")
    assert rc == 130, err
    res = json.loads(result.read_text())
    assert res["interrupted"] is True
    db = res["databases"][0]
    assert db["cache"]["clean_waits"] > 0, db["cache"]
    assert res["elapsed_s"] < cfg.duration  # ended by the signal, not by the clock
