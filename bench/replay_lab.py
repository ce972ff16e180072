"""What the replay benchmarks share: loop devices to record on and replay onto,
recording an original from a fio job, and a note of the machine."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from recorder.capture import record as rec

ROOT = Path(__file__).resolve().parent.parent

# A production-like mix for long traces (--seconds 60 or 600): 8,000 IOPS,
# Poisson arrivals, 60 % reads, 4k/32k/128k.
PRODUCTION = (
    "[m]\nrw=randrw\nrwmixread=60\nbssplit=4k/60:32k/30:128k/10\n"
    "rate_iops=4800,3200\nrate_process=poisson\niodepth=8\n"
)


def loop(size_mb: int) -> tuple[str, str]:
    backing = tempfile.mkstemp(prefix="iotape-bench-", suffix=".img", dir="/dev/shm")[1]
    os.truncate(backing, size_mb << 20)
    dev = subprocess.run(
        ["losetup", "--find", "--show", "--direct-io=off", backing],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(f"/sys/block/{os.path.basename(dev)}/queue/nomerges").write_text("2")
    return dev, backing


@contextlib.contextmanager
def two_loops(size_mb: int = 256) -> Iterator[tuple[str, str]]:
    """(source, destination) loop devices, released on the way out whatever happens."""
    made: list[tuple[str, str]] = []
    try:
        made.append(loop(size_mb))
        made.append(loop(size_mb))
        yield made[0][0], made[1][0]
    finally:
        for dev, backing in made:
            subprocess.run(["losetup", "-d", dev], check=False)
            os.unlink(backing)


def record(job: Path, body: str, seconds: int, src: str, out: Path) -> None:
    """Record fio job `body` run on `src` for `seconds` into trace `out`."""
    job.write_text(
        f"[global]\nfilename={src}\ndirect=1\nioengine=io_uring\ntime_based=1\n"
        f"runtime={seconds}\n{body}"
    )
    rec.record(
        rec.RecordOptions(
            devices=[src], output=out, command=["fio", "--output=/dev/null", str(job)]
        )
    )


def machine() -> dict:
    return {"kernel": platform.release(), "cpus": os.cpu_count()}


def fio_version() -> str:
    return subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()


# Linux keeps ru_maxrss across exec: a command forked from a bench process that
# holds a loaded trace would report that process's pages as its own peak (a
# 10 min trace made every command "890 MiB"). A fresh interpreter forks the
# command instead and writes its exit status and peak (KiB) to RESULT.
_SPAWN = """import json, os, sys
out, result, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
pid = os.fork()
if pid == 0:
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.execvp(cmd[0], cmd)
_, status, ru = os.wait4(pid, 0)
with open(result, "w") as f:
    json.dump([os.waitstatus_to_exitcode(status), ru.ru_maxrss], f)
"""


def peak_rss(cmd: list[str], out: Path | None = None, cwd: Path | None = None) -> tuple[int, float]:
    """Run `cmd` (stdout to `out`): its exit status and its own peak RSS in MiB."""
    import json
    import sys

    with tempfile.NamedTemporaryFile(suffix=".json") as res:
        subprocess.run(
            [sys.executable, "-c", _SPAWN, str(out or os.devnull), res.name, *cmd],
            check=True,
            cwd=cwd,
        )
        code, kib = json.loads(Path(res.name).read_text())
    return code, round(kib / 1024, 1)
