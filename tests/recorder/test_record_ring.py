"""The flight recorder against the real kernel: `iotape record --ring` keeps the last
window and loses nothing (the kernel's completion count against the capture's
summed footer), snapshots on SIGUSR1, on `record --snapshot` and on a --trigger hold
the window before and after their request, and the systemd unit's command line
runs as a service: SIGHUP starts the next file, SIGTERM ends it cleanly, exit 0."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import IOTAPE, fio_args, iotape

from recorder.capture.flight import control_path, snapshots_dir
from recorder.tracefile import open_trace, segments_of

pytestmark = pytest.mark.kernel

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "packaging" / "systemd" / "iotape-record@.service"
WAIT_S = 60.0  # generous: the machine is shared and stalls


def _completed(name: str) -> int:
    fields = Path(f"/sys/block/{name}/stat").read_text().split()
    return int(fields[0]) + int(fields[4])


def _until(what: str, ok: Callable[[], object]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ok():
        assert time.monotonic() < deadline, f"waited {WAIT_S:g} s for {what}"
        time.sleep(0.05)


def _serving(out: Path, proc: subprocess.Popen) -> bool:
    """Whether the recorder answers on its control socket (it does from its drain
    loop, after its programs are attached), or has exited."""
    if proc.poll() is not None:
        return True
    return (
        control_path(out).exists() and iotape("record", "--status", "-o", str(out)).returncode == 0
    )


def _rate_fio(loop, log: Path, iops: int, seconds: float) -> list[str]:
    fio = fio_args(loop.path, log, ios=10**7, iodepth=2, rw="randread", bssplit="4k/100")
    return [*fio, f"--rate_iops={iops}", "--time_based", f"--runtime={seconds:g}"]


def _start(out: Path, loop, *args: str) -> subprocess.Popen:
    argv = [*IOTAPE, "record", "-o", str(out), "-d", loop.path, "--json", *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _until("the recorder", lambda: _serving(out, proc))
    assert proc.poll() is None, proc.communicate()
    return proc


def _stop(proc: subprocess.Popen) -> tuple[int, str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return proc.returncode, stdout, stderr


def _snapshots(out: Path) -> list[Path]:
    root = snapshots_dir(out)
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def _complete(snap: Path) -> dict | None:
    path = snap / "snapshot.json"
    manifest = json.loads(path.read_text()) if path.exists() else None
    return manifest if manifest and manifest["complete"] else None


def _check_snapshot(snap: Path) -> tuple[dict, dict, np.ndarray]:
    """A complete snapshot: its files valid, one sequence, the window around its
    request inside it. Returns its manifest, its first file's header, its records."""
    manifest = _complete(snap)
    assert manifest is not None, snap
    res = iotape("trace", "check", str(snap))
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in snap.glob("*.iot")) == manifest["files"]
    with open_trace(snap) as t:
        header, recs = t.header, t.read_all()
        last = t.footer
    first = open_trace(snap / manifest["files"][0]).header
    asked = manifest["requested_mono_ns"] - header["mono_start_ns"]
    # The window before: the first file starts at or before it (or at the capture's
    # start, when the capture is younger); the window after: the last file ends after.
    assert first["segment"]["start_ns"] <= max(0, asked - manifest["before_ns"])
    assert last is not None
    assert last["end_mono_ns"] - header["mono_start_ns"] >= asked + manifest["after_ns"]
    return manifest, header, recs


def test_ring_keeps_the_window_and_loses_nothing(loop, tmp_path: Path) -> None:
    out = tmp_path / "ring.iot"
    before = _completed(loop.name)
    fio = _rate_fio(loop, tmp_path / "f.log", 400, 5)
    res = iotape("record", "-o", str(out), "-d", loop.path, "--json", "--ring", "2s", "--", *fio)
    assert res.returncode == 0, res.stderr
    done = json.loads(res.stdout.strip().splitlines()[-1])
    # Every request of the capture counted, in the files deleted by the ring too.
    assert done["events"] == _completed(loop.name) - before > 1000
    assert sum(done["lost"].values()) == 0
    files = segments_of(out)
    for f in files:
        assert iotape("trace", "check", str(f)).returncode == 0, f
    assert done["files"]["deleted"] > 0 and len(files) < done["files"]["last"] + 1
    oldest = open_trace(files[0])
    end = done["duration_ns"]
    # What is left covers the window (a deleted file ended before it) ...
    assert oldest.header["segment"]["start_ns"] <= end - 2e9
    # ... and not much more: the oldest file ended within the window (+1 s of slack
    # for the stop, which waits for requests in flight without pruning).
    assert oldest.footer["end_mono_ns"] - oldest.header["mono_start_ns"] >= end - 3e9
    assert not control_path(out).exists()  # the socket goes with the recorder


def test_snapshots_on_command_and_signal_hold_the_window(loop, tmp_path: Path) -> None:
    out = tmp_path / "fr.iot"
    fio = subprocess.Popen(_rate_fio(loop, tmp_path / "f.log", 300, 600), stdout=subprocess.DEVNULL)
    proc = _start(out, loop, "--ring", "3s", "--snapshot-after", "1s")
    try:
        _until("three files", lambda: len(segments_of(out)) >= 3)
        res = iotape("record", "--snapshot", "-o", str(out), "--json")
        assert res.returncode == 0, res.stderr
        by_command = Path(json.loads(res.stdout)["snapshot"])
        assert by_command.parent == snapshots_dir(out) and by_command.name.endswith("-command")
        _until("the command's snapshot", lambda: _complete(by_command))
        _until("the ring to delete a file", lambda: segments_of(out)[0].name != "fr-000000.iot")
        proc.send_signal(signal.SIGUSR1)
        _until("the signal's snapshot", lambda: len(_snapshots(out)) == 2)
        by_signal = _snapshots(out)[1]
        assert by_signal.name.endswith("-signal")
        _until("the signal's snapshot complete", lambda: _complete(by_signal))
        status = json.loads(iotape("record", "--status", "-o", str(out), "--json").stdout)
        assert status["snapshots"] == 2 and status["cpu_s"] > 0 and status["rss_kb"] > 0
    finally:
        rc, stdout, stderr = _stop(proc)
        fio.terminate()
        fio.wait()
    assert rc == 0, stderr
    done = json.loads(stdout.strip().splitlines()[-1])
    assert done["stop_reason"] == "signal" and done["process"]["max_rss_kb"] > 0
    for snap in (by_command, by_signal):
        manifest, _, recs = _check_snapshot(snap)
        assert manifest["before_ns"] == 3e9 and manifest["after_ns"] == 1e9 and len(recs) > 0
    # The ring deleted files that the snapshots keep, under the same names.
    ring_names = {f.name for f in segments_of(out)}
    kept = {f.name for f in by_command.glob("*.iot")}
    assert kept - ring_names
    assert iotape("record", "--snapshot", "-o", str(out)).returncode != 0  # nobody listens


def test_trigger_snapshot_holds_its_evidence(loop, tmp_path: Path) -> None:
    out = tmp_path / "tr.iot"
    slow, fast = (
        _rate_fio(loop, tmp_path / "a.log", 200, 2),
        _rate_fio(loop, tmp_path / "b.log", 3000, 2),
    )
    script = f"{shlex.join(slow)} >/dev/null && {shlex.join(fast)} >/dev/null && sleep 2"
    args = ("--ring", "4s", "--snapshot-after", "500ms", "--trigger", "iops > 1000 over 500ms")
    res = iotape(
        "record", "-o", str(out), "-d", loop.path, "--json", *args, "--", "sh", "-c", script
    )
    assert res.returncode == 0, res.stderr
    snaps = _snapshots(out)
    assert snaps and all(s.name.endswith("-trigger") for s in snaps), snaps
    manifest, header, recs = _check_snapshot(snaps[0])
    was = float(re.fullmatch(r"iops > 1000 over 500ms \(was (\S+)\)", manifest["detail"])[1])
    assert was > 1000
    # The condition holds on the snapshot's own records: more than 500 completions in
    # the half second before the request (one 10 ms step of the sliding window more).
    asked = manifest["requested_mono_ns"] - header["mono_start_ns"]
    t = recs["ts_complete_ns"]
    assert np.count_nonzero((t > asked - 0.51e9) & (t <= asked)) > 500
    # The slow phase before it is in the snapshot too: the window before is 4 s.
    assert t.min() < asked - 1.5e9
    assert manifest["latency_ns"] > 0


def test_trigger_parse_error_is_one_line(loop, tmp_path: Path) -> None:
    out = tmp_path / "bad.iot"
    res = iotape("record", "-o", str(out), "-d", loop.path, "--ring", "1m", "--trigger", "p99 > 50")
    assert res.returncode != 0
    assert res.stderr.strip() == (
        "iotape: error: --trigger 'p99 > 50': a latency needs a unit: ns, us, ms or s (e.g. 50ms)"
    )
    assert not list(tmp_path.iterdir())


def _unit_command() -> tuple[str, dict[str, str]]:
    """The unit's ExecStart shell script and its Environment= defaults, as systemd
    would hand them to /bin/sh ($$ is a literal $, %I the instance)."""
    text = UNIT.read_text()
    start = re.search(r"^ExecStart=/bin/sh -c '(.*)'$", text, re.MULTILINE)
    assert start, "ExecStart"
    env = dict(re.findall(r'^Environment="?([A-Z_]+)=(.*?)"?$', text, re.MULTILINE))
    return start[1].replace("$$", "$"), env


def _service(script: str, env: dict[str, str]) -> subprocess.Popen:
    """The unit's main process, as systemd starts it: /bin/sh -c ExecStart."""
    pipe = subprocess.PIPE
    return subprocess.Popen(["/bin/sh", "-c", script], env=env, stdout=pipe, stderr=pipe, text=True)


def test_systemd_unit_runs_as_a_service(loop, tmp_path: Path) -> None:
    script, env = _unit_command()
    assert re.search(r"^ExecReload=/bin/kill -HUP \$MAINPID$", UNIT.read_text(), re.MULTILINE)
    wrapper = tmp_path / "iotape"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.join(IOTAPE)} "$@"\n')
    wrapper.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    env |= {"IOTAPE": str(wrapper), "STATE_DIRECTORY": str(state), "IOTAPE_RING": "1h"}
    env |= {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(sys.path)}
    out = state / "ring.iot"
    fio = subprocess.Popen(_rate_fio(loop, tmp_path / "f.log", 200, 600), stdout=subprocess.DEVNULL)
    main = _service(script.replace("%I", loop.name), env)
    try:
        _until("the recorder", lambda: _serving(out, main))
        assert main.poll() is None, main.communicate()
        subprocess.run(["/bin/kill", "-HUP", str(main.pid)], check=True)  # ExecReload
        _until("the next file", lambda: len(segments_of(out)) == 2)
    finally:
        rc, _, stderr = _stop(main)  # KillSignal=SIGTERM, KillMode=mixed: main only
        fio.terminate()
        fio.wait()
    assert rc == 0, stderr
    files = segments_of(out)
    assert len(files) == 2
    for f in files:
        assert iotape("trace", "check", str(f)).returncode == 0
    footers = [open_trace(f).footer for f in files]
    assert [f["stop_reason"] for f in footers if f] == ["rotate", "signal"]
    assert all(f and sum(f["lost"].values()) == 0 for f in footers)
    # Started again (a restart): the earlier capture's files are kept as a snapshot.
    again = _service(script.replace("%I", loop.name), env)
    try:
        _until("the restarted capture", lambda: _serving(out, again))
    finally:
        rc, _, stderr = _stop(again)
    assert rc == 0, stderr
    previous = [s for s in _snapshots(out) if s.name.endswith("-previous")]
    assert len(previous) == 1 and sorted(p.name for p in previous[0].glob("*.iot")) == [
        f.name for f in files
    ]
