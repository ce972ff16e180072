"""Hosts for multi-host replay tests: network namespaces, each with a `fio --server`.

A controller namespace is joined to each host namespace by a veth pair; every
address lives inside a namespace the test made (10.213.K.1 on the controller's
end, 10.213.K.2 on host K's), so nothing outside the test can see or clash with
them. `Lab.release` stops the servers and deletes the namespaces (which deletes
their veths); it runs also when the set-up itself fails halfway.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

PORT = 8765


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Lab:
    def __init__(self, hosts: int, workdir: Path) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ctl = f"iot{tag}c"
        self.names = [f"iot{tag}{k}" for k in range(1, hosts + 1)]
        self.addresses = [f"10.213.{k}.2" for k in range(1, hosts + 1)]
        self.made: list[str] = []
        self.servers: list[subprocess.Popen] = []
        self.workdir = workdir
        try:
            self._build(tag)
        except BaseException:
            self.release()
            raise

    def _build(self, tag: str) -> None:
        _ip("netns", "add", self.ctl)
        self.made.append(self.ctl)
        _ip("-n", self.ctl, "link", "set", "lo", "up")
        for k, (ns, addr) in enumerate(zip(self.names, self.addresses, strict=True), start=1):
            _ip("netns", "add", ns)
            self.made.append(ns)
            a, b = f"iv{tag}c{k}", f"iv{tag}h{k}"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            # Moved into the namespaces at once: deleting a namespace deletes them.
            _ip("link", "set", a, "netns", self.ctl)
            _ip("link", "set", b, "netns", ns)
            _ip("-n", self.ctl, "addr", "add", f"10.213.{k}.1/24", "dev", a)
            _ip("-n", self.ctl, "link", "set", a, "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", b)
            _ip("-n", ns, "link", "set", b, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            cwd = self.workdir / ns
            cwd.mkdir(parents=True, exist_ok=True)
            log = (cwd / "server.log").open("w")
            self.servers.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, "fio", f"--server=ip:{addr},{PORT}"],
                    cwd=cwd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        for ns, srv in zip(self.names, self.servers, strict=True):
            self._wait_listening(ns, srv)

    def _wait_listening(self, ns: str, srv: subprocess.Popen) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if srv.poll() is not None:
                raise RuntimeError(f"fio --server in {ns} exited with {srv.returncode}")
            out = subprocess.run(
                ["ip", "netns", "exec", ns, "ss", "-ltnH"], capture_output=True, text=True
            ).stdout
            if f":{PORT} " in out:
                return
            time.sleep(0.1)
        raise RuntimeError(f"fio --server in {ns} is not listening after 20 s")

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        """`iotape ARGS` in the controller's namespace."""
        return subprocess.run(
            ["ip", "netns", "exec", self.ctl, sys.executable, "-m", "iotape", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def python(self, code: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ip", "netns", "exec", self.ctl, sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
        )

    def release(self) -> None:
        for srv in self.servers:
            if srv.poll() is None:
                srv.terminate()
                try:
                    srv.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    srv.kill()
                    srv.wait()
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "delete", ns], check=False, capture_output=True)
        self.made.clear()
