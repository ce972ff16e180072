"""How a command's process ends, whichever way its line was read (iotape/cli.py
with typer, iotape/launch.py without): a user's error as one line and its exit
code, a bug as one line and a crash report, and the quick exit of the commands
that take it. No typer here: `iotape ingest`'s plain lines do without it."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from base.errors import IotapeError

# An internal error (a bug), told apart from a user's mistake (2).
INTERNAL_ERROR = 70
# Commands whose process ends as soon as they are done, without the interpreter's
# teardown: after `iotape ingest` it took 60-70 ms (numpy's, pyarrow's and DuckDB's
# modules and libraries torn down) of a command of ~0.6 s, with the store closed
# and every file synced already.
QUICK_EXIT = frozenset({"ingest"})


def quick_exit() -> None:
    """Exit 0 now, as the interpreter would but without tearing down its modules:
    the atexit handlers run and stdout and stderr are flushed. Only where the main
    thread is the last one (a thread left running gets the ordinary exit, which
    waits for it)."""
    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            # The reader went away (`| head`) or the stream is closed: the exit the
            # interpreter would take reports it.
            return
    os._exit(0)


def guarded(named: str | None, command: Callable[[], object]) -> NoReturn:
    """Run `command` (which ends in SystemExit, as typer's app does) as the process's
    work, and end the process as the command line says it ends."""
    # A shell starts background jobs with SIGINT ignored, and Python then keeps ignoring
    # it: `iotape ... & kill -INT $!` must stop a capture, a workload or a replay
    # cleanly all the same.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            command()
        except SystemExit as e:
            if named in QUICK_EXIT and e.code in (0, None):
                quick_exit()
            raise
    except IotapeError as e:
        print(f"iotape: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("iotape: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:
        # A bug, not the user's input: no traceback on their terminal, but one to send.
        # Imported here: its tempfile and traceback are ~7 ms of every command's start.
        from iotape import crash

        report = crash.write_report(e, sys.argv)
        where = f"the full report is in {report}" if report else "no report could be written"
        print(f"iotape: internal error: {crash.one_line(e)} ({where})", file=sys.stderr)
        sys.exit(INTERNAL_ERROR)
    raise AssertionError("the command returned without SystemExit")  # pragma: no cover
