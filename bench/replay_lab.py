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
