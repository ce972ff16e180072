"""`iotape replay`: one module per command; each parses, calls one library function, prints.

The commands are listed here, in the order `iotape replay --help` lists them; a
command's module is imported only when it runs or is asked for its help
(iotape.cliutil.lazy_group)."""

from __future__ import annotations

import typer

from iotape.cliutil import LazyCommands, lazy_group

HELP = "Replay a trace with fio: plan job files, run them, measure fidelity."

COMMANDS: LazyCommands = {
    "plan": (
        "plan",
        "plan",
        "Turn a trace into fio job files (one iolog per stream and target, or fitted jobs).",
    ),
    "run": (
        "run",
        "run",
        "Run the plan's fio jobs (JSON results and latency logs in JOBDIR/results;\n"
        "a multi-host plan: every host at once through `fio --client`, results per host\n"
        "in JOBDIR/results/HOST).",
    ),
    "check-host": (
        "run",
        "check_host",
        "Check this host's part of a multi-host plan: its targets (as `replay run` checks\n"
        "local ones), their size, and its copy of the iologs. `replay run` runs it on every\n"
        "host through fio before any I/O.",
    ),
    "fidelity": (
        "fidelity",
        "fidelity",
        "Compare a replay with its original: per-second IOPS/MB/s error, mix, timing, "
        "locality,\nand the error per time window beside the wake-up floor measured "
        "during the run.",
    ),
    "split": (
        "split",
        "split",
        "Split a trace across devices `fast` and `slow` by a tiering or cache simulation's\n"
        "placement, to replay it as the hybrid array would have served it.",
    ),
    "tiering-check": (
        "tiering_check",
        "tiering_check",
        "Check a tiering projection on two real devices: replay the trace on the slow one,\n"
        "on the fast one, and split by the simulated placement across both (recorded), then\n"
        "compare the measured latency with the projection.",
    ),
}


def build(argv: list[str] | None = None) -> typer.Typer:
    """The group for the words after `replay` (None: every command)."""
    return lazy_group(HELP, __name__, COMMANDS, argv)


_app: typer.Typer | None = None


def __getattr__(name: str) -> typer.Typer:
    # `from iotape.commands.replay import app` (the tests): every command, built once.
    global _app
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _app is None:
        _app = build()
    return _app


__all__ = ["COMMANDS", "HELP", "app", "build"]
