"""The `iotape` command: a thin layer over the library, one sub-app per component."""

from __future__ import annotations

import importlib
import signal
import sys

import typer

from base.errors import IotapeError
from iotape import crash

# An internal error (a bug), told apart from a user's mistake (2).
INTERNAL_ERROR = 70

app = typer.Typer(
    name="iotape",
    help="Record block I/O with eBPF, replay it with fio, analyze it offline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# The command map, in the order `iotape --help` lists it: each top-level command or
# group, the module of iotape/commands/ that defines it, and what of that module is
# registered (a function is a command, a Typer app a group).
COMMANDS: dict[str, tuple[str, str]] = {
    "record": ("record", "record"),
    "trace": ("trace", "app"),
    "import": ("import_", "import_"),
    "ingest": ("ingest", "ingest"),
    "export": ("export", "export"),
    "runs": ("runs", "runs_app"),
    "db": ("db", "db_app"),
    "replay": ("replay", "app"),
    "serve": ("serve", "serve"),
    "workload": ("workload", "app"),
    "analyze": ("analyze", "app"),
    "compare": ("compare", "compare"),
    "history": ("history", "history"),
    "lab": ("lab", "app"),
}


def _register(only: str | None = None) -> None:
    """Register every command, or only the one named: its module alone is imported
    (each command module imports the components it drives), so `iotape ingest`
    does not pay for loading the replayer, the workload and the lab (0.1-0.2 s)."""
    for name, (module, attr) in COMMANDS.items():
        if only is not None and name != only:
            continue
        obj = getattr(importlib.import_module(f"iotape.commands.{module}"), attr)
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name)
        else:
            app.command(name)(obj)


@app.callback()
def _root() -> None:
    # A callback keeps `iotape CMD` a group of commands when only CMD is registered
    # (typer runs a lone command without its name otherwise).
    pass


def main() -> None:
    named = sys.argv[1] if len(sys.argv) > 1 else None
    _register(named if named in COMMANDS else None)
    # A shell starts background jobs with SIGINT ignored, and Python then keeps ignoring
    # it: `iotape ... & kill -INT $!` must stop a capture, a workload or a replay
    # cleanly all the same.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        app()
    except IotapeError as e:
        print(f"iotape: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("iotape: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:
        # A bug, not the user's input: no traceback on their terminal, but one to send.
        report = crash.write_report(e, sys.argv)
        where = f"the full report is in {report}" if report else "no report could be written"
        print(f"iotape: internal error: {crash.one_line(e)} ({where})", file=sys.stderr)
        sys.exit(INTERNAL_ERROR)
