"""A fast and a slow block device on one machine, for checking tiering projections.

- fast: a loop device over a file in /dev/shm (memory copies, microseconds);
- slow: a loop device with direct I/O over a file on the machine's real disk, the
  disk throttled by a cgroup v1 blkio IOPS limit for the processes run through
  `HybridLab.command` (loop workers charge their I/O to the submitter's cgroup, so
  the throttle's waits are part of the loop device's own request time);
- or, with `memory_disk=True`, the same over a memory-backed loop device instead of
  the disk (a loop over a loop over /dev/shm): the throttle works the same way, and
  the device's own time no longer drifts with whatever else uses the shared disk
  (tests/analyzer/test_regress_devices.py compares repeated runs of it).

With `nonrot=True` (memory_disk only) the throttled disk is marked non-rotational
before its first limit: kernels that pick blk-throttle's time slice (the step of its
waits) by the queue's kind give a non-rotational one 20 ms instead of 100 ms. On the
6.18 kernel here it changes nothing (bench/slow_device_latency.py measures both;
docs/hybrid.md).

With `hdd=HddModel(...)` the slow device is instead a direct-I/O loop device over
hdd.py's HDD-like file (FUSE, a stated per-request service time): no throttle
needed, though the cgroup's limits still apply to that loop device if set. With
`array=ArrayModel(...)` it is the same over array.py's emulated array (a write-back
cache in front of a RAID 6 set of such disks); with `controllers=2` as well, two such
arrays, one per controller of an MSA-like array, each its own server, backing file and
loop device (`slows`, `arrays`; `slow` and `hdd` name controller A's).

Everything made is released by name on exit, also after a failure. Used by
`iotape lab hybrid` (analyzer/lab/hybrid.py), bench/tiering_check.py,
tests/replayer/test_tiering_check.py and scripts/demo_devices.py (`make demo`'s
HDD-like and SSD-like devices), the last three through bench/hybrid_lab.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from analyzer.lab.array import ArrayFile, ArrayModel
from analyzer.lab.fusedisk import FuseDisk
from analyzer.lab.hdd import HddError, HddFile, HddModel

BLKIO = Path("/sys/fs/cgroup/blkio")


class LabError(RuntimeError):
    """The machine cannot host the lab (no blkio cgroup, no disk-backed directory)."""


def backing_disk(directory: str) -> tuple[int, int]:
    """(major, minor) of the whole disk holding `directory`'s filesystem."""
    st = os.stat(directory)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sys_dev = Path(f"/sys/dev/block/{major}:{minor}")
    if major == 0 or not sys_dev.exists():
        raise LabError(f"{directory}: not on a block device (major {major}); need a disk")
    if (sys_dev / "partition").exists():
        major, minor = map(int, (sys_dev.resolve().parent / "dev").read_text().split(":"))
    return major, minor


def _losetup(backing: Path, direct: bool) -> str:
    out = subprocess.run(
        ["losetup", "--find", "--show", f"--direct-io={'on' if direct else 'off'}", str(backing)],
        check=True,
        capture_output=True,
        text=True,
    )
    dev = out.stdout.strip()
    # One request per I/O, as the replay issues them.
    Path(f"/sys/block/{os.path.basename(dev)}/queue/nomerges").write_text("2")
    return dev


class HybridLab:
    """A fast and a throttled slow block device; see the module's docstring."""

    def __init__(
        self,
        size_mb: int = 256,
        slow_iops: int | None = None,
        disk_dir: str = "/var/tmp",
        memory_disk: bool = False,
        nonrot: bool = False,
        hdd: HddModel | None = None,
        array: ArrayModel | None = None,
        controllers: int = 1,
    ):
        if controllers not in (1, 2) or (controllers == 2 and array is None):
            raise LabError(f"controllers={controllers}: 1, or 2 with an array")
        self.hdd_model = hdd
        self.array_model = array
        self.controllers = controllers
        self.hdd: FuseDisk | None = None  # the HDD-like disk or the array (controller A)
        self.arrays: list[FuseDisk] = []  # the array's controllers, A first
        self.slows: list[str] = []  # their loop devices, in the same order
        self.memory_disk = memory_disk
        self.nonrot = nonrot and memory_disk
        self.size = size_mb << 20
        self.slow_iops = slow_iops
        self.disk_dir = disk_dir
        self.fast = self.slow = ""
        self._files: list[Path] = []
        self._loops: list[str] = []
        self.cgroup: Path | None = None
        self._disk = (0, 0)
        self._sigterm: object = None  # the SIGTERM handler it replaced (_on_sigterm)

    def _on_sigterm(self) -> None:
        """A SIGTERM (a killed bench) unwinds through the context manager, which
        releases the loop devices, the FUSE servers and the images; by default it
        would end the process where it stands and leave them all behind. Only
        where nothing else handles it, from the main thread."""
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        with contextlib.suppress(ValueError):  # not the main thread
            self._sigterm = signal.signal(signal.SIGTERM, _raise_exit)

    def __enter__(self) -> HybridLab:
        if not BLKIO.is_dir():
            raise LabError(f"{BLKIO}: no cgroup v1 blkio hierarchy")
        if not self.memory_disk and self.hdd_model is None and self.array_model is None:
            self._disk = backing_disk(self.disk_dir)
        self._on_sigterm()
        try:
            self.fast = self._loop("/dev/shm", direct=False)
            if self.hdd_model is not None or self.array_model is not None:
                if self.array_model is not None:
                    for c in "ab"[: self.controllers]:
                        # The lab's own backing: restart_array serves the same data anew.
                        fd, name = tempfile.mkstemp(prefix=f"iotape-lab-array-{c}-", dir="/dev/shm")
                        os.close(fd)
                        self._files.append(Path(name))
                        os.truncate(name, self.size)
                        self._serve(ArrayFile(self.size, self.array_model, backing=Path(name)))
                else:
                    assert self.hdd_model is not None
                    self._serve(HddFile(self.size, self.hdd_model))
            elif self.memory_disk:
                disk = self._loop("/dev/shm", direct=False)
                st = os.stat(disk)
                self._disk = (os.major(st.st_rdev), os.minor(st.st_rdev))
                if self.nonrot:
                    rot = Path(f"/sys/block/{os.path.basename(disk)}/queue/rotational")
                    rot.write_text("0")
                self.slow = _losetup(Path(disk), direct=True)
                self._loops.append(self.slow)
            else:
                self.slow = self._loop(self.disk_dir, direct=True)
            self.slows = self.slows or [self.slow]
            self.cgroup = Path(tempfile.mkdtemp(prefix="iotape-lab-", dir=BLKIO))
            self.set_slow_iops(self.slow_iops)
        except HddError as e:
            self.__exit__()
            raise LabError(str(e)) from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def _loop(self, directory: str, direct: bool) -> str:
        fd, name = tempfile.mkstemp(prefix="iotape-lab-", suffix=".img", dir=directory)
        path = Path(name)
        self._files.append(path)
        # Written, not sparse: reading a hole never reaches the disk.
        block = b"\xa5" * (1 << 20)
        with os.fdopen(fd, "wb") as f:
            for _ in range(self.size >> 20):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        dev = _losetup(path, direct)
        self._loops.append(dev)
        return dev

    def _serve(self, disk: FuseDisk) -> None:
        """A direct-I/O loop device over a served disk: the next of `slows`."""
        self.arrays.append(disk)
        dev = _losetup(disk.path, direct=True)
        self._loops.append(dev)
        self.slows.append(dev)
        self.hdd, self.slow = self.arrays[0], self.slows[0]
        st = os.stat(self.slow)
        self._disk = (os.major(st.st_rdev), os.minor(st.st_rdev))

    def restart_array(self, model: ArrayModel) -> str:
        """Serve the array's data with another model (its tier on or off, say), every
        controller with the same: the loop devices and the servers are replaced, the
        data kept. The new slow device (controller A's; all of them in `slows`)."""
        assert self.hdd is not None and self.array_model is not None
        backings = [d.backing for d in self.arrays]
        for dev, disk in zip(self.slows, self.arrays, strict=True):
            subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)
            self._loops.remove(dev)
            disk.close()
        self.arrays, self.slows, self.hdd = [], [], None
        self.array_model = model
        for backing in backings:
            self._serve(ArrayFile(self.size, model, backing=backing))
        if self.cgroup is not None:
            self.set_slow_iops(self.slow_iops)
        return self.slow

    def set_slow_iops(self, iops: int | None) -> None:
        """Change the slow disk's IOPS limit (None: unthrottled)."""
        assert self.cgroup is not None
        self.slow_iops = iops
        limit = f"{self._disk[0]}:{self._disk[1]} {iops or 0}"
        for knob in ("read_iops_device", "write_iops_device"):
            (self.cgroup / f"blkio.throttle.{knob}").write_text(limit)

    def set_slow_limits(self, read_iops: int | None, write_iops: int | None) -> None:
        """Cap the slow disk's reads and writes separately (None: that direction free)."""
        assert self.cgroup is not None
        for knob, iops in (("read_iops_device", read_iops), ("write_iops_device", write_iops)):
            limit = f"{self._disk[0]}:{self._disk[1]} {iops or 0}"
            (self.cgroup / f"blkio.throttle.{knob}").write_text(limit)

    def set_slow_bandwidth(self, read_bps: int | None, write_bps: int | None) -> None:
        """Cap the slow disk's bytes per second, reads and writes apart (None: free)."""
        assert self.cgroup is not None
        for knob, bps in (("read_bps_device", read_bps), ("write_bps_device", write_bps)):
            limit = f"{self._disk[0]}:{self._disk[1]} {bps or 0}"
            (self.cgroup / f"blkio.throttle.{knob}").write_text(limit)

    def join(self) -> None:
        """Move this process (and so every child it starts from now on) into the lab."""
        assert self.cgroup is not None
        (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))

    def leave(self) -> None:
        (BLKIO / "cgroup.procs").write_text(str(os.getpid()))

    def files(self) -> list[str]:
        """The files backing this lab's devices (gone after close)."""
        hdd = [str(p) for d in self.arrays for p in (d.backing, d.mount)]
        return list(dict.fromkeys([str(p) for p in self._files] + hdd))

    @property
    def disk(self) -> tuple[int, int]:
        """(major, minor) of the throttled disk."""
        return self._disk

    def _joiner(self) -> Callable[[], None]:
        """What a child runs before exec to join the lab's cgroup."""
        assert self.cgroup is not None
        procs = self.cgroup / "cgroup.procs"

        def join() -> None:
            procs.write_text(str(os.getpid()))

        return join

    def command(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run argv inside the lab's cgroup (its I/O to the slow disk is throttled)."""
        return subprocess.run(argv, preexec_fn=self._joiner(), **kw)

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        """Start argv inside the lab's cgroup, without waiting for it."""
        return subprocess.Popen(argv, preexec_fn=self._joiner(), **kw)

    def _stop_members(self) -> None:
        """End what a command left in the lab's cgroup (after Ctrl-C, say): only this
        lab's commands join it, and a cgroup with members cannot be removed."""
        assert self.cgroup is not None
        me = str(os.getpid())
        for _ in range(50):
            pids: list[str] = []
            with contextlib.suppress(OSError):
                pids = [p for p in (self.cgroup / "cgroup.procs").read_text().split() if p != me]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.1)

    def close(self) -> None:
        if self.cgroup is not None:
            self._stop_members()
        # The newest first: a loop device may be backed by an older one.
        for dev in reversed(self._loops):
            subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)
        self._loops.clear()
        for disk in self.arrays:
            disk.close()
        self.arrays, self.slows, self.hdd = [], [], None
        for path in self._files:
            path.unlink(missing_ok=True)
        self._files.clear()
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                if str(os.getpid()) in (self.cgroup / "cgroup.procs").read_text().split():
                    self.leave()
            with contextlib.suppress(OSError):
                self.cgroup.rmdir()
            self.cgroup = None

    def __exit__(self, *exc) -> None:
        self.close()
        if self._sigterm is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._sigterm)  # type: ignore[arg-type]
            self._sigterm = None


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
