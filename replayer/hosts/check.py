"""`iotape replay check-host`: a host checks its own part of a multi-host plan.

The checks are those `replay run` makes of local targets (devices/targets.py, devices/safety.py:
a block device that is mounted, swap, held, opened exclusively, on the root disk
or holding a signature is refused without --destroy-data-on), made on the host,
where the kernel that knows the device runs, plus: the target is at least as
large as the plan reaches, and the host's copy of JOBDIR has the plan's iologs.

`replay run` runs it on each host through fio itself (hosts/run.py), as a job's
`exec_prerun`: fio does not return a command's output or exit status to its
client, but it does return how many bytes a job read. So the verdict is a file
whose size carries it: 512 bytes x (1 + code), code 0 when every check passed,
else 1 + 64 x reason + the target's index in the host's list. Its text is the
message, for whoever reads it on the host.
"""

from __future__ import annotations

import os
from pathlib import Path

from base.errors import IotapeError
from devices import targets
from devices.safety import check_target
from replayer.hosts import spec as hosts
from schemas.documents import plan as plan_document

UNIT = 512
PER_REASON = 64
# What a refusal was, in the order of the codes; the controller prints the text.
REASONS = (
    "the check failed",
    "does not exist or is not a block device or file",
    "is on the root disk",
    "is mounted",
    "is in use as swap",
    "is in use by device-mapper or md",
    "is opened exclusively by another program",
    "holds a filesystem signature or partition table",
    "is smaller than the plan reaches",
    "the host's copy of JOBDIR lacks the plan's iologs or plan.json",
    "the host's iologs differ from the plan's (copy JOBDIR again)",
)
_SAFETY = (
    ("root disk", 2),
    ("mounted at", 3),
    ("as swap", 4),
    ("in use by", 5),
    ("opened exclusively", 6),
    ("holds", 7),
)


def _reason(message: str) -> int:
    return next((code for text, code in _SAFETY if text in message), 0)


def check(jobdir: Path, host: str, destroy: list[str]) -> tuple[int, str]:
    """(code, message) for host `host`'s part of the plan in `jobdir`: (0, "ok")
    when it may run."""
    try:
        man = plan_document.load(jobdir / "plan.json")
        part = next(h for h in man.hosts if h.name == host)
    except (IotapeError, StopIteration):
        return 1 + PER_REASON * 9, f"{jobdir}: no plan.json naming host {host} on this host"
    try:
        digest = hosts.iologs_digest(jobdir, part)
    except FileNotFoundError as e:
        return 1 + PER_REASON * 9, f"{e.filename}: missing on host {host}"
    if digest != part.iologs_sha256:
        return 1 + PER_REASON * 10, f"{jobdir}/iologs: differ from the plan's on host {host}"
    writes = {t.path: t.writes for t in man.targets}
    reach = {t.path: t.reach_bytes or 0 for t in man.targets}
    for k, path in enumerate(part.targets):
        full = f"{host}:{path}"
        try:
            kind = targets.classify(path)
            if kind == "block" and writes.get(full):
                check_target(path, destroy)
            size = targets.size_of(path)[0]
        except IotapeError as e:
            why = 1 if "exist" in str(e) or "not a block" in str(e) else _reason(str(e))
            return 1 + PER_REASON * why + k, str(e)
        except OSError as e:
            return 1 + PER_REASON * 1 + k, f"{path}: {e.strerror}"
        if size < reach.get(full, 0):
            return (
                1 + PER_REASON * 8 + k,
                f"{path}: {size} bytes, but the plan reaches byte {reach[full]}",
            )
    return 0, "ok"


def write_verdict(path: Path, code: int, message: str) -> None:
    body = (message + "\n").encode()[: UNIT * (1 + code)]
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(body.ljust(UNIT * (1 + code), b"\0"))
    os.replace(tmp, path)


def explain(host: str, paths: list[str], nbytes: int) -> str:
    """The controller's one line for a verdict of `nbytes` bytes."""
    code = nbytes // UNIT - 1
    if code <= 0:
        return ""
    reason, k = divmod(code - 1, PER_REASON)
    text = REASONS[reason] if reason < len(REASONS) else REASONS[0]
    if reason in (9, 10):
        return f"host {host}: {text}"
    path = paths[k] if k < len(paths) else "?"
    hint = f" (pass --destroy-data-on {host}:{path} to write anyway)" if 2 <= reason <= 7 else ""
    return f"--target {host}:{path}: refused on host {host}: {text}{hint}"
