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
    # Imported here so that `iotape --help` stays fast and a component with a
    # missing optional dependency does not break the others.
    from analyzer.analyses import cli as regress_cli
    from analyzer.lab import cli as lab_cli
    from analyzer.server import cli as serve_cli
    from analyzer.store import cli as analyzer_cli
    from analyzer.tiering import cli as analyze_cli
    from recorder.capture import cli as record_cli
    from recorder.importers import cli as import_cli
    from recorder.tracefile import cli as trace_cli
    from replayer import cli as replay_cli
    from workload import cli as workload_cli

    app.command("record")(record_cli.record)
    app.add_typer(trace_cli.app, name="trace")
    app.command("import")(import_cli.import_)
    app.command("ingest")(analyzer_cli.ingest)
    app.command("export")(analyzer_cli.export)
    app.add_typer(analyzer_cli.runs_app, name="runs")
    app.add_typer(analyzer_cli.db_app, name="db")
    app.add_typer(replay_cli.app, name="replay")
    app.command("serve")(serve_cli.serve)
    app.add_typer(workload_cli.app, name="workload")
    app.add_typer(analyze_cli.app, name="analyze")
    app.command("compare")(regress_cli.compare)
    app.command("history")(regress_cli.history)
    app.add_typer(lab_cli.app, name="lab")


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
