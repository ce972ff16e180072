"""`iotape lab device up|down|list`: an emulated disk (hdd.py's HDD-like disk, or
array.py's array) as a block device that outlives the command, for anything to run
on (fio, `iotape replay run`, the reference workload, one's own application).

`up` starts the server (its own session, messages to a log), puts a direct-I/O loop
device over its file and writes a state file naming everything it made (pid, mount,
backing, loop); `down` releases each of them by that name. A failure or Ctrl-C during
`up` releases whatever was made so far: nothing is left behind without a state file
naming it. The state files are in $IOTAPE_LAB_STATE, else /run/iotape-lab (memory:
gone at a reboot, as the loop devices are).

An array with two controllers (`up_controllers`, `up array --controllers 2`), as the
published MSA 2040 had, is two such devices, NAME.a and NAME.b (controllers A and B),
each its own server: its own write-back cache, RAID 6 set, tier or read cache and model
thread. They come up together (a failure in B releases A) and go down together
(`down NAME`; one alone is refused).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from analyzer.lab.array import SERVER as ARRAY_SERVER
from analyzer.lab.array import ArrayFile, ArrayModel
from analyzer.lab.fusedisk import DiskError, FuseDisk
from analyzer.lab.hdd import SERVER as HDD_SERVER
from analyzer.lab.hdd import HddFile, HddModel

KINDS = ("hdd", "array")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class DeviceError(RuntimeError):
    """A lab device cannot be brought up or found."""


def state_dir() -> Path:
    return Path(os.environ.get("IOTAPE_LAB_STATE") or "/run/iotape-lab")


@dataclass
class DeviceState:
    """What `up` made, by name: what `down` releases (the file NAME.json)."""

    name: str
    kind: str
    loop: str
    pid: int
    server: str
    mount: str
    backing: str
    size: int
    model: dict[str, Any]
    array: str = ""  # a controller of this two-controller array (its `down` name)
    controller: str = ""  # "a" or "b"

    @property
    def stats_path(self) -> Path:
        return Path(self.mount) / "stats"


def _state_file(name: str) -> Path:
    return state_dir() / f"{name}.json"


def _write_state(st: DeviceState) -> None:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{st.name}.json.tmp"
    tmp.write_text(json.dumps(asdict(st), indent=1) + "\n")
    os.replace(tmp, _state_file(st.name))


def read_state(name: str) -> DeviceState:
    path = _state_file(name)
    try:
        return DeviceState(**json.loads(path.read_text()))
    except FileNotFoundError:
        raise DeviceError(f"{name}: no such lab device (no {path})") from None
    except (ValueError, TypeError) as e:
        raise DeviceError(f"{path}: not a lab device's state ({e})") from None


def listed() -> list[DeviceState]:
    d = state_dir()
    return [read_state(p.stem) for p in sorted(d.glob("*.json"))] if d.is_dir() else []


def _losetup(path: Path) -> str:
    out = subprocess.run(
        ["losetup", "--find", "--show", "--direct-io=on", str(path)],
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise DeviceError(f"losetup {path}: {out.stderr.strip()}")
    dev = out.stdout.strip()
    # One request per I/O, as the replay issues them (devices.py does the same).
    Path(f"/sys/block/{os.path.basename(dev)}/queue/nomerges").write_text("2")
    return dev


def _check_new(name: str) -> None:
    for taken in (name, *controllers_of(name)):
        if _state_file(taken).exists():
            raise DeviceError(
                f"{name}: already up ({_state_file(taken)}); `iotape lab device down {name}` first"
            )


def controllers_of(name: str) -> list[str]:
    """The controllers' names of two-controller array NAME that are up."""
    d = state_dir()
    return [c for c in (f"{name}.a", f"{name}.b") if (d / f"{c}.json").exists()]


def up_controllers(name: str, size_mb: int, model: ArrayModel) -> list[DeviceState]:
    """Bring up a two-controller array: NAME.a and NAME.b, each `size_mb` with `model`;
    on any failure (or Ctrl-C) release both and raise."""
    if not NAME.fullmatch(name) or len(name) > 62:
        raise DeviceError(f"--name {name!r}: letters, digits, '_', '.', '-' (62 at most)")
    _check_new(name)
    made: list[DeviceState] = []
    try:
        for c in "ab":
            made.append(_up(f"{name}.{c}", "array", size_mb, model, array=name, controller=c))
    except BaseException:
        for st in made:
            _release(st)
        raise
    return made


def up(
    name: str, kind: str, size_mb: int, model: HddModel | ArrayModel, say: Any = None
) -> DeviceState:
    """Bring up NAME; on any failure (or Ctrl-C) release what was made and raise."""
    if not NAME.fullmatch(name):
        raise DeviceError(f"--name {name!r}: letters, digits, '_', '.', '-' (64 at most)")
    _check_new(name)
    return _up(name, kind, size_mb, model)


def _up(
    name: str,
    kind: str,
    size_mb: int,
    model: HddModel | ArrayModel,
    array: str = "",
    controller: str = "",
) -> DeviceState:
    if kind not in KINDS:
        raise DeviceError(f"{kind}: a lab device is one of {', '.join(KINDS)}")
    if size_mb < 16:
        raise DeviceError(f"--size-mb {size_mb}: at least 16")
    state_dir().mkdir(parents=True, exist_ok=True)
    log = state_dir() / f"{name}.log"
    disk: FuseDisk | None = None
    loop = ""
    try:
        if isinstance(model, ArrayModel):
            disk = ArrayFile(size_mb << 20, model, log=log, prefix=f"iotape-lab-{name}-")
        else:
            disk = HddFile(size_mb << 20, model, log=log, prefix=f"iotape-lab-{name}-")
        loop = _losetup(disk.path)
        st = DeviceState(
            name=name, kind=kind, loop=loop, pid=disk.pid,
            server=str(ARRAY_SERVER if kind == "array" else HDD_SERVER), mount=str(disk.mount),
            backing=str(disk.backing), size=size_mb << 20, model=asdict(model), array=array,
            controller=controller,
        )  # fmt: skip
        _write_state(st)
        disk.detach()
        return st
    except DiskError as e:
        _undo(disk, loop)
        raise DeviceError(f"{name}: {e}") from None
    except BaseException:
        _undo(disk, loop)
        raise


def _undo(disk: FuseDisk | None, loop: str) -> None:
    """up's way out: the loop device, then the server, mount and backing."""
    if loop:
        subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)
    if disk is not None:
        disk.close()


def _ours(pid: int, server: str) -> bool:
    """Whether pid is still the server `up` started (not a reused pid)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmd) and cmd[0].decode(errors="replace") == server


def _loop_backing(loop: str) -> str:
    try:
        return Path(f"/sys/block/{os.path.basename(loop)}/loop/backing_file").read_text().strip()
    except OSError:
        return ""


def down(name: str) -> list[str]:
    """Release everything NAME's state names (a two-controller array: both
    controllers'); what was released, in order."""
    both = [] if _state_file(name).exists() else controllers_of(name)
    if both:
        done: list[str] = []
        for c in both:
            done += _release(read_state(c))
        return done
    st = read_state(name)
    if st.array:
        raise DeviceError(
            f"{name}: controller {st.controller.upper()} of {st.array}; "
            f"`iotape lab device down {st.array}` releases both"
        )
    return _release(st)


def _release(st: DeviceState) -> list[str]:
    done: list[str] = []
    running = _ours(st.pid, st.server)
    # The loop device only if it is still over this device's file (the number may
    # have been reused after a manual release).
    if _loop_backing(st.loop) == str(Path(st.mount) / "disk"):
        subprocess.run(["losetup", "-d", st.loop], check=False, capture_output=True)
        done.append(st.loop)
    if Path(st.mount) in [Path(line.split()[1]) for line in _mounts()]:
        subprocess.run(["umount", "-l", st.mount], check=False, capture_output=True)
        done.append(st.mount)
    if running:
        # Unmounted, the server reads ENODEV and ends; if not, it is ended.
        for _ in range(50):
            if not _ours(st.pid, st.server):
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(st.pid, signal.SIGKILL)
        done.append(f"pid {st.pid}")
    with contextlib.suppress(ChildProcessError):
        os.waitpid(st.pid, os.WNOHANG)  # when `up` ran in this process: no zombie
    with contextlib.suppress(OSError):
        Path(st.mount).rmdir()
    if Path(st.backing).exists():
        Path(st.backing).unlink()
        done.append(st.backing)
    (state_dir() / f"{st.name}.log").unlink(missing_ok=True)
    _state_file(st.name).unlink(missing_ok=True)
    return done


def _mounts() -> list[str]:
    return Path("/proc/mounts").read_text().splitlines()


def stats(name: str) -> dict[str, Any]:
    """The device's own counters (the array's model; the HDD-like disk has none); a
    two-controller array's by controller ({"a": ..., "b": ...})."""
    both = [] if _state_file(name).exists() else controllers_of(name)
    if both:
        return {read_state(c).controller: stats(c) for c in both}
    st = read_state(name)
    if st.kind != "array":
        raise DeviceError(f"{name}: a {st.kind} device has no counters")
    return json.loads(st.stats_path.read_text())
