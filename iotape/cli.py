"""The `iotape` command: a thin layer over the library, one sub-app per component."""

from __future__ import annotations

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


def _register() -> None:
    """The command map: each top-level command or group, from the module named for it
    in iotape/commands/."""
    # Imported here so that `iotape --help` stays fast and a component with a
    # missing optional dependency does not break the others.
    from iotape.commands import (
        analyze,
        compare,
        db,
        export,
        history,
        import_,
        ingest,
        lab,
        record,
        replay,
        runs,
        serve,
        trace,
        workload,
    )

    app.command("record")(record.record)
    app.add_typer(trace.app, name="trace")
    app.command("import")(import_.import_)
    app.command("ingest")(ingest.ingest)
    app.command("export")(export.export)
    app.add_typer(runs.runs_app, name="runs")
    app.add_typer(db.db_app, name="db")
    app.add_typer(replay.app, name="replay")
    app.command("serve")(serve.serve)
    app.add_typer(workload.app, name="workload")
    app.add_typer(analyze.app, name="analyze")
    app.command("compare")(compare.compare)
    app.command("history")(history.history)
    app.add_typer(lab.app, name="lab")


def main() -> None:
    _register()
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
