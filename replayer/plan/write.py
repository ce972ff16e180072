"""Write a plan's JOBDIR whole, or nothing: everything goes into a temporary
directory beside it (`staged`), renamed into place at the end."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from base.errors import IotapeError
from replayer.hosts import spec as hosts
from replayer.plan import iolog, jobfile
from replayer.plan.model import Manifest, Plan


def check_jobdir(jobdir: Path, force: bool) -> Path:
    """The directory JOBDIR is made in, once JOBDIR may be (re)placed."""
    if jobdir.exists():
        if not jobdir.is_dir():
            raise IotapeError(f"{jobdir}: exists and is not a directory")
        if any(jobdir.iterdir()) and not (force and (jobdir / "plan.json").exists()):
            raise IotapeError(f"{jobdir}: not empty; pass --force to replace an earlier plan")
    parent = jobdir.resolve().parent
    if not parent.is_dir():
        raise IotapeError(f"{jobdir}: directory {parent} does not exist")
    return parent


def _iologs(tmp: Path, p: Plan) -> None:
    (tmp / "iologs").mkdir()
    stamped = len(p.windows) > 1
    for j in p.jobs:
        if j.entries is not None and p.layout == "lanes":
            assert p.start_us is not None  # exact mode
            iolog.write_v2(
                tmp / "iologs" / f"{j.name}.log",
                hosts.local_path(j.target),
                *j.entries,
                start_us=p.start_us,
            )
        elif j.entries is not None:
            iolog.write(
                tmp / "iologs" / f"{j.name}.log",
                hosts.local_path(j.target),
                *j.entries,
                start_us=p.start_us,
                stamped=stamped,
            )


def contents(
    tmp: Path, jobdir: Path, p: Plan, man: Manifest, texts: dict[str, str], logs: bool = True
) -> None:
    """Everything in JOBDIR, written into `tmp`; a multi-host plan's manifest gets
    its hosts. `logs`: False where the iologs and anchor.log are in `tmp` already
    (appended as the trace was read in chunks: sinks.LaneLogs)."""
    if logs:
        _iologs(tmp, p)
    (tmp / "results").mkdir()
    if p.hosts:
        per_host = {h: jobfile.host_jobfile_text(p, h) for h in p.hosts}
        parts = hosts.write_parts(tmp, jobdir.resolve(), p.hosts, per_host, p.jobs)
        man.hosts = parts
        man.jobfile = None
        man.anchor = None
    else:
        for name, t in texts.items():
            (tmp / name).write_text(t)
    if not logs:
        (tmp / "anchor.fio").write_text(jobfile.anchor_job())
    elif anchor := (jobfile.anchor(p) if not p.hosts else None):
        (tmp / "anchor.fio").write_text(anchor[0])
        (tmp / "anchor.log").write_text(anchor[1])
    man.write(tmp / "plan.json")


@contextmanager
def staged(jobdir: Path, force: bool) -> Iterator[Path]:
    """A temporary directory beside JOBDIR to write it in, renamed to JOBDIR
    (replacing an earlier plan with `force`) at the end, or removed on an error."""
    parent = check_jobdir(jobdir, force)
    tmp = Path(tempfile.mkdtemp(prefix=f".{jobdir.name}.", dir=parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        if jobdir.exists():
            shutil.rmtree(jobdir)
        os.replace(tmp, jobdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
