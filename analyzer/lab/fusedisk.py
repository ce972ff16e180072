"""A lab disk served over FUSE (build/iotape-hdd, build/iotape-array): the server
started on a memory-backed file and a fresh mount, its "disk" file the block
device's backing (a loop device over it), released by close() on every way out."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any


class DiskError(RuntimeError):
    """A lab disk cannot be served (no FUSE, server not built, mount refused)."""


class FuseDisk:
    """A running server and its mount; close() unmounts and ends it."""

    def __init__(
        self,
        server: Path,
        size: int,
        args: list[str],
        prefix: str,
        log: Path | None = None,
        backing: Path | None = None,
    ) -> None:
        """log: the server's messages go to this file and it runs in a session of its
        own, so that it outlives the process that started it (`iotape lab device up`).
        backing: serve this file (the caller's: kept at close, so that another server
        can serve the same data), else a new one in /dev/shm, removed at close."""
        if not server.exists():
            raise DiskError(f"{server}: the lab's disk is not built; run `make setup`")
        if not Path("/dev/fuse").exists():
            raise DiskError("/dev/fuse: no FUSE on this machine")
        self.own_backing = backing is None
        if backing is None:
            fd, name = tempfile.mkstemp(prefix=prefix, suffix=".img", dir="/dev/shm")
            os.close(fd)
            backing = Path(name)
        self.backing = backing
        self.proc: subprocess.Popen | None = None
        self.mount = Path(tempfile.mkdtemp(prefix=prefix))
        self.path = self.mount / "disk"
        try:
            if self.own_backing:
                os.truncate(self.backing, size)
            errors = log.open("ab") if log is not None else None
            try:
                self.proc = subprocess.Popen(
                    [str(server), str(self.mount), str(self.backing), *args],
                    stdout=subprocess.PIPE,
                    stderr=errors or subprocess.PIPE,
                    start_new_session=log is not None,
                )
            finally:
                if errors is not None:
                    errors.close()
            assert self.proc.stdout is not None
            if self.proc.stdout.readline().decode().strip() != "ready":
                self.proc.wait(timeout=5)
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                err = err or (log.read_text() if log is not None else "")
                lines = err.strip().splitlines()
                raise DiskError(lines[-1] if lines else f"{server.name}: did not start")
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def modelled(self, on: bool) -> None:
        """Serve with the model's times (on) or at memory speed (off: making a database)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR2 if on else signal.SIGUSR1)

    def detach(self) -> None:
        """Let the server run on after this process ends (its pipe closed: it writes
        nothing more to it); a later `release` ends it by pid."""
        if self.proc is not None:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
            self.proc = None

    def stats(self) -> dict[str, Any]:
        """The server's own counters (MOUNT/stats; the array's model has them)."""
        return json.loads((self.mount / "stats").read_text())

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
        if self.own_backing:
            self.backing.unlink(missing_ok=True)


HddError = DiskError  # the name devices.py and its callers know
