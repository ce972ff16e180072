"""What a user sees when iotape itself fails: one line, and the full report in a file.

A traceback helps whoever fixes the bug, not whoever ran the command, so it goes
to a file under the state directory and the line says where.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from pathlib import Path


def report_dir() -> Path:
    """$XDG_STATE_HOME/iotape/crash, else ~/.local/state/iotape/crash."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "iotape" / "crash"


def write_report(exc: BaseException, argv: list[str]) -> Path | None:
    """The traceback and the command line in a new file; None when no file can be written."""
    text = (
        f"command: {' '.join(argv)}\n"
        f"time: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n"
        f"python: {sys.version.split()[0]}\n\n" + "".join(traceback.format_exception(exc))
    )
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    for where in (report_dir(), Path(tempfile.gettempdir()) / "iotape-crash"):
        try:
            where.mkdir(parents=True, exist_ok=True)
            path = where / name
            path.write_text(text, encoding="utf-8")
            return path
        except OSError:
            continue
    return None


def one_line(exc: BaseException) -> str:
    """The exception's first line, with its type: what went wrong, in brief."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
