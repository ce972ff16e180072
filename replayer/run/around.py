"""What goes around a replay's command on this host: the wake-up probe beside it
and the recorder around it (relabelling the recording after it: relabel.py).

The probe (wakeup.py) measures the machine's wake-up floor for the whole run; the
recorder captures the targets while the command runs, so original and replay are
measured the same way, at the device.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from base.errors import IotapeError
from recorder.capture import record as rec


@contextmanager
def wakeup_probe(out: Path) -> Iterator[None]:
    """The wake-up floor, measured beside the command for the whole run, to `out`."""
    p = subprocess.Popen([sys.executable, "-m", "replayer.run.wakeup", str(out)])
    try:
        yield
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def check_outputs(paths: list[Path | None], force: bool) -> None:
    """Refuse, before anything runs, a recording that could not be written."""
    for p in paths:
        if p is not None:
            rec.check_output(Path(p), force)


def command(
    cmd: list[str],
    jobdir: Path,
    jobfile: str,
    devs: list[str],
    record_to: Path | None,
    force: bool,
    wakeup: Path | None,
) -> int | None:
    """Run `cmd`, recorded into `record_to` when given: its exit status (None: the
    recorder ran no command)."""
    if record_to is not None:
        if not devs:
            raise IotapeError("--record: the plan has no block-device target to record")
        res = rec.record(
            rec.RecordOptions(
                devices=devs,
                output=record_to,
                command=cmd,
                force=force,
                metadata={"replay_of": str(jobdir), "jobfile": jobfile}
                | ({"wakeup": str(wakeup)} if wakeup else {}),
            )
        )
        return res.command_exit
    return subprocess.run(cmd, check=False).returncode
