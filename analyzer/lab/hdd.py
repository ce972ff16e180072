"""The HDD-like file: build/iotape-hdd (src/hdd.c) serving one file over FUSE with a
stated per-request service time (seek by distance, rotation, transfer), the file
backed by memory. A loop device over it (devices.py) is a block device whose every
request takes a disk's time, seen by the recorder as the device's own.

The model's defaults are a 10K rpm enterprise SAS disk's published figures: 3 ms
average rotational latency (half a turn at 10,000 rpm), about 3.5-4 ms average
seek for reads (0.5 ms more for writes), 150 MB/s sustained transfer; with the
seek from SETTLE_MS at the shortest distance to FULL_MS across the whole file,
growing with the square root of the distance, a random seek averages
SETTLE + (FULL - SETTLE) x 8/15 (the mean of sqrt(|U1 - U2|)).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SERVER = Path(__file__).with_name("build") / "iotape-hdd"


class HddError(RuntimeError):
    """The HDD-like file cannot be served (no FUSE, server not built, mount refused)."""


@dataclass(frozen=True)
class HddModel:
    """One disk's service time: a set of `spindles` such disks, each request served
    by the next free one."""

    spindles: int = 1
    rpm: float = 10_000
    settle_ms: float = 0.5
    full_ms: float = 7.0
    mb_s: float = 150.0
    write_extra_ms: float = 0.5
    seed: int = 1

    def mean_random_ms(self, nbytes: int = 4096) -> float:
        """The model's mean service time of a random request of `nbytes`."""
        seek = self.settle_ms + (self.full_ms - self.settle_ms) * 8 / 15
        return seek + 30_000 / self.rpm + nbytes / (self.mb_s * 1e3)


class HddFile:
    """A running server and its mount; close() unmounts and ends it."""

    def __init__(self, size: int, model: HddModel) -> None:
        if not SERVER.exists():
            raise HddError(f"{SERVER}: the HDD-like device is not built; run `make setup`")
        if not Path("/dev/fuse").exists():
            raise HddError("/dev/fuse: no FUSE on this machine")
        self.model = model
        fd, name = tempfile.mkstemp(prefix="iotape-lab-hdd-", suffix=".img", dir="/dev/shm")
        os.close(fd)
        self.backing = Path(name)
        os.truncate(self.backing, size)
        self.mount = Path(tempfile.mkdtemp(prefix="iotape-lab-hdd-"))
        self.path = self.mount / "disk"
        self.proc: subprocess.Popen | None = None
        m = model
        nums = (m.spindles, m.rpm, m.settle_ms, m.full_ms, m.mb_s, m.write_extra_ms, m.seed)
        argv = [str(SERVER), str(self.mount), str(self.backing), *map(str, nums)]
        try:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            assert self.proc.stdout is not None
            if self.proc.stdout.readline().strip() != "ready":
                err = (self.proc.stderr.read() if self.proc.stderr else "").strip()
                raise HddError(err or "iotape-hdd: did not start")
        except BaseException:
            self.close()
            raise

    def modelled(self, on: bool) -> None:
        """Serve with the model's times (on) or at memory speed (off: making a database)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR2 if on else signal.SIGUSR1)

    def close(self) -> None:
        """Unmount (the server then ends), end it if it does not, remove its files."""
        subprocess.run(["umount", "-l", str(self.mount)], check=False, capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
            self.proc = None
        with contextlib.suppress(OSError):
            self.mount.rmdir()
        self.backing.unlink(missing_ok=True)
