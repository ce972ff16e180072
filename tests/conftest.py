"""Shared fixtures: real loop devices, real mounts, always released."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_helpers import store_url

from analyzer.store.opener import open_store
from base.errors import IotapeError
from recorder.capture import record as rec

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, why: str) -> None:
    """Skip a kernel test when the machine can't run it, but fail under CI."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true and this test needs {why}")
    pytest.skip(f"needs {why}")


def wait_block_nodes(paths: list[str], timeout_s: float = 10.0) -> None:
    """Wait for device nodes (a partition's node may lag its scan). A regular file
    at such a path is no node that will appear: devtmpfs does not replace it. One
    was found at /dev/loop2p1 (32 KiB), written by some earlier command while the
    node was missing, and it failed every partition test that drew loop2 after."""
    deadline = time.monotonic() + timeout_s
    while True:
        waiting = []
        for path in paths:
            try:
                mode = os.stat(path).st_mode
            except FileNotFoundError:
                waiting.append(path)
                continue
            assert stat.S_ISBLK(mode), f"{path} is not a device node but a stale file: remove it"
        if not waiting:
            return
        assert time.monotonic() < deadline, f"{', '.join(waiting)}: the device node did not appear"
        time.sleep(0.05)


def _kernel_ready() -> None:
    need(os.geteuid() == 0, "root")
    need(Path("/sys/kernel/btf/vmlinux").exists(), "a kernel with BTF")
    need(shutil.which("losetup") is not None, "losetup")
    need(shutil.which("fio") is not None, "fio")
    need(rec.LOADER.exists(), f"the loader built at {rec.LOADER} (make native)")


# Skips that name an external service CI cannot have: the variable that opts in.
# Under CI=true every other skip fails (see pytest_runtest_makereport).
OPT_IN_SKIPS = ("IOTAPE_TEST_CLICKHOUSE_URL",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that reaches the `kernel` fixture must say so with the `kernel` marker,
    so that `-m "not kernel"` is a subset that runs without root, BPF or loop devices."""
    unmarked = [
        item.nodeid
        for item in items
        if "kernel" in getattr(item, "fixturenames", ())
        and item.get_closest_marker("kernel") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests use the kernel fixture without @pytest.mark.kernel: " + ", ".join(unmarked)
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Under CI=true a skipped test fails: a missing tool or device must not pass
    unnoticed. The exception: a skip that names one of OPT_IN_SKIPS (the ClickHouse
    server test runs only where IOTAPE_TEST_CLICKHOUSE_URL points at a server)."""
    report = yield
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        if not any(name in reason for name in OPT_IN_SKIPS):
            report.outcome = "failed"
            report.longrepr = f"CI=true and this test was skipped: {reason}"
    return report


@pytest.fixture(autouse=True)
def no_traceback_in_errors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every bad-input case of the suite: the error a user would see (`iotape: error:`
    and the message) never carries a Python traceback, e.g. one an engine wrapped."""
    seen: list[str] = []
    init = IotapeError.__init__

    def observed(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        if "Traceback (most recent call last)" in str(self):
            seen.append(str(self))

    monkeypatch.setattr(IotapeError, "__init__", observed)
    yield
    assert not seen, f"an error message carries a traceback: {seen[0]}"


@pytest.fixture
def kernel() -> None:
    _kernel_ready()


class Loop:
    """A loop device over a file in /dev/shm, detached by its own name at teardown."""

    def __init__(self, size_mb: int) -> None:
        self.backing = Path(
            tempfile.mkstemp(prefix="iotape-test-", suffix=".img", dir="/dev/shm")[1]
        )
        os.truncate(self.backing, size_mb << 20)
        out = subprocess.run(
            ["losetup", "--find", "--show", "--direct-io=off", str(self.backing)],
            check=True,
            capture_output=True,
            text=True,
        )
        self.path = out.stdout.strip()
        self.name = os.path.basename(self.path)
        # One request per I/O: the kernel must not merge the test's requests, so
        # the recorded requests are exactly what fio submitted.
        Path(f"/sys/block/{self.name}/queue/nomerges").write_text("2")

    def release(self) -> None:
        subprocess.run(["losetup", "-d", self.path], check=False, capture_output=True)
        self.backing.unlink(missing_ok=True)


@pytest.fixture
def loop_factory(kernel: None) -> Iterator:
    made: list[Loop] = []

    def make(size_mb: int = 256) -> Loop:
        loop = Loop(size_mb)
        made.append(loop)
        return loop

    try:
        yield make
    finally:
        for loop in made:
            loop.release()


@pytest.fixture
def loop(loop_factory) -> Loop:
    return loop_factory()


@pytest.fixture
def small_mount(kernel: None) -> Iterator:
    """Mount a tmpfs of a given size and options; unmounted at teardown."""
    mounts: list[Path] = []

    def make(size_kb: int, options: str = "") -> Path:
        where = Path(tempfile.mkdtemp(prefix="iotape-mnt-"))
        opts = f"size={size_kb}k" + (f",{options}" if options else "")
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], check=True)
        mounts.append(where)
        return where

    try:
        yield make
    finally:
        for where in mounts:
            subprocess.run(["umount", "-l", str(where)], check=False)
            where.rmdir()


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(params=["duckdb", "chdb"])
def store(request, tmp_path: Path):
    """An empty store on each embedded backend, closed at teardown."""
    s = open_store(store_url(request.param, tmp_path))
    try:
        yield s
    finally:
        s.close()
