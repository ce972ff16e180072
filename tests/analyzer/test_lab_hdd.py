"""The HDD-like device (analyzer/lab/hdd.py, src/hdd.c under a loop device): every
request takes at least its modelled service time (lower bounds only: a stall of the
shared machine makes a request slower, never faster), data reads back as written,
and everything it made is gone after the lab closes."""

from __future__ import annotations

import mmap
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import need

from analyzer.lab.devices import HybridLab, LabError
from analyzer.lab.hdd import HddModel

pytestmark = pytest.mark.kernel
MIB = 1 << 20


def _timed_reads(dev: str, offsets: list[int], size: int) -> list[float]:
    buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    out = []
    try:
        for off in offsets:
            t = time.perf_counter()
            assert os.preadv(fd, [buf], off) == size
            out.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    return out


def test_requests_take_their_modelled_time(kernel: None) -> None:
    model = HddModel(settle_ms=2.0, full_ms=4.0, mb_s=100.0)
    try:
        lab = HybridLab(size_mb=64, memory_disk=True, hdd=model).__enter__()
    except LabError as e:
        need(False, f"an HDD-like lab: {e}")
    try:
        assert lab.hdd is not None
        made = lab.files()
        fd = os.open(lab.slow, os.O_WRONLY | os.O_DIRECT)
        data = mmap.mmap(-1, MIB)
        data.write(os.urandom(MIB))
        os.pwritev(fd, [data], 8 * MIB)
        os.close(fd)
        # Random 4 KiB reads: a seek of at least the settle time each (they are
        # never where the last request ended).
        rand = _timed_reads(lab.slow, [(i * 7919 % 60) * MIB for i in range(1, 21)], 4096)
        assert min(rand) >= model.settle_ms / 1e3
        # Sequential 1 MiB reads: no seek, the transfer at 100 MB/s (10.5 ms).
        seq = _timed_reads(lab.slow, [i * MIB for i in range(20, 28)], MIB)
        assert min(seq[1:]) >= MIB / (model.mb_s * 1e6)
        got = mmap.mmap(-1, MIB)
        fd = os.open(lab.slow, os.O_RDONLY | os.O_DIRECT)
        os.preadv(fd, [got], 8 * MIB)
        os.close(fd)
        assert got[:] == data[:]
    finally:
        lab.close()
    mounts = Path("/proc/mounts").read_text()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert not [f for f in made if Path(f).exists() or f in mounts or f in loops]
