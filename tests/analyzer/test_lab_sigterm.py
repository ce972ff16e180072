"""A killed lab releases what it made (analyzer/lab/devices.py, HybridLab): a
SIGTERM to a process inside `with HybridLab(...)` unwinds it, so its loop devices
and their images go (a killed bench left them behind, with the HDD-like model's
FUSE server, until its SIGTERM became an exit). Root and loop devices."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need

pytestmark = pytest.mark.kernel

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys, time
from analyzer.lab.devices import HybridLab, LabError
try:
    with HybridLab(size_mb=16, memory_disk=True) as lab:
        print(lab.fast, lab.slow, flush=True)
        time.sleep(120)
except LabError as e:
    print("lab:", e, flush=True)
"""


def _backing(dev: str) -> str:
    out = subprocess.run(["losetup", "-n", "-O", "BACK-FILE", dev], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def test_a_sigterm_releases_the_labs_loop_devices_and_images(kernel: None) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        need(not line.startswith("lab:") and bool(line), f"a hybrid lab ({line})")
        devs = line.split()
        files = [_backing(d) for d in devs]
        assert all(files), files
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    for f in files:
        held = subprocess.run(["losetup", "-j", f], capture_output=True, text=True)
        assert not held.stdout.strip(), held.stdout
        if not f.startswith("/dev/loop"):  # a loop over a loop: the node stays
            assert not Path(f).exists()
