"""The flight recorder (`iotape record --ring 30m`): snapshots on a signal, on a
command (`iotape record --snapshot -o OUT`) or on a trigger (`--trigger 'p99 > 50ms
over 10s'`), and the client of the recorder's control socket.

The loader does the work (recorder/snapshot.c, recorder/trigger.c,
recorder/control.c); this module holds the options, checks a trigger with the
loader's own parser (one grammar, in C, where it is evaluated), and talks to a
running recorder through OUT.ctl (why a socket: recorder/control.h)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from base.errors import IotapeError
from recorder.capture.rotation import Rotation, parse_duration
from recorder.tracefile import segments_of

LOADER = Path(__file__).resolve().parents[1] / "build" / "iotape-rec"


def loader_path() -> Path:
    """The eBPF loader, recorder/build/iotape-rec (or $IOTAPE_REC)."""
    path = Path(os.environ.get("IOTAPE_REC", LOADER))
    if not path.exists():
        raise IotapeError(f"{path}: the eBPF loader is not built; run `make setup`")
    return path


DEFAULT_AFTER = "2m"
REPLY_TIMEOUT_S = 10.0


@dataclass
class Flight:
    """What a ring capture saves: the window after a request, and its triggers."""

    after_s: float = 0.0
    triggers: list[str] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return self.after_s > 0

    @classmethod
    def parse(cls, rotation: Rotation, after: str | None, triggers: list[str]) -> Flight:
        if not rotation.keep_s:
            if after is not None or triggers:
                raise IotapeError("--snapshot-after and --trigger need --ring (a flight recorder)")
            return cls()
        f = cls(after_s=parse_duration("--snapshot-after", after or DEFAULT_AFTER), triggers=[])
        if f.after_s < 0.001:
            raise IotapeError(f"--snapshot-after {after}: at least 1ms")
        for expr in triggers:
            check_trigger(expr)
            f.triggers.append(expr)
        return f

    def loader_args(self, rotation: Rotation) -> list[str]:
        if not self.enabled:
            return []
        args = [
            "--snapshot-before-ms",
            str(max(1, round(rotation.keep_s * 1000))),
            "--snapshot-after-ms",
            str(max(1, round(self.after_s * 1000))),
        ]
        for expr in self.triggers:
            args += ["--trigger", expr]
        return args


def check_trigger(expr: str) -> None:
    """Raises IotapeError with the loader's one line when EXPR does not parse."""
    res = subprocess.run(
        [str(loader_path()), "--check-trigger", expr], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        line = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "not a trigger"
        raise IotapeError(line.removeprefix("iotape-rec: ").removeprefix("error: "))


def control_path(output: str | os.PathLike) -> Path:
    """The control socket of the capture writing `output` (OUT.iot -> OUT.ctl)."""
    out = str(output)
    return Path((out[:-4] if out.endswith(".iot") else out) + ".ctl")


def snapshots_dir(output: str | os.PathLike) -> Path:
    """Where a ring capture writing `output` saves its snapshots (OUT.snapshots)."""
    out = str(output)
    return Path((out[:-4] if out.endswith(".iot") else out) + ".snapshots")


def keep_previous(output: str | os.PathLike) -> Path | None:
    """A ring capture started again on the same name (a service restarted): the
    earlier capture's files move into a snapshot, OUT.snapshots/<time>-previous/,
    instead of being refused or deleted. Returns that directory, or None."""
    old = segments_of(output)
    if not old:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(old[-1].stat().st_mtime))
    dest = snapshots_dir(output) / f"{stamp}-previous"
    n = 1
    while dest.exists():
        n += 1
        dest = snapshots_dir(output) / f"{stamp}-previous-{n}"
    dest.mkdir(parents=True)
    for p in old:
        p.rename(dest / p.name)
    return dest


def request(output: str | os.PathLike, what: str) -> dict:
    """Sends `what` ("snapshot" or "status") to the recorder writing `output`; its answer."""
    path = control_path(output)
    if not path.exists():
        raise IotapeError(f"{path}: no recorder is writing {output} (no control socket)")
    # The socket's path may be longer than sun_path holds: reach it through its directory.
    dirfd = os.open(path.parent if str(path.parent) else ".", os.O_PATH | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(REPLY_TIMEOUT_S)
            try:
                s.connect(f"/proc/self/fd/{dirfd}/{path.name}")
            except ConnectionRefusedError:
                raise IotapeError(
                    f"{path}: no recorder is listening (left by one that stopped)"
                ) from None
            s.sendall(what.encode() + b"\n")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
    except TimeoutError:
        raise IotapeError(f"{path}: the recorder did not answer in {REPLY_TIMEOUT_S:g} s") from None
    finally:
        os.close(dirfd)
    if not reply:
        raise IotapeError(f"{path}: the recorder closed it without an answer (stopping?)")
    answer = json.loads(reply)
    if "error" in answer:
        raise IotapeError(f"{output}: {answer['error']}")
    return answer
