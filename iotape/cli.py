"""The `iotape` command: a thin layer over the library, one sub-app per component."""

from __future__ import annotations

import importlib
import sys

import typer

from iotape import exits

# Where the process's end is decided (iotape/exits.py); here too, as before.
QUICK_EXIT = exits.QUICK_EXIT
INTERNAL_ERROR = exits.INTERNAL_ERROR

app = typer.Typer(
    name="iotape",
    help="Record block I/O with eBPF, replay it with fio, analyze it offline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# The command map: each top-level command or group, the module of iotape/commands/
# that defines it, what of that module is registered (a function is a command, a
# Typer app a group), and the line `iotape --help` shows for it, so that the root
# help lists every command without importing any of them (tests/test_cli_help.py
# holds each line to the command's own help).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "record": (
        "record",
        "record",
        "Record every block request on the given devices into a trace file.",
    ),
    "trace": (
        "trace",
        "app",
        "Inspect, convert and validate trace files (.iot).",
    ),
    "import": (
        "import_",
        "import_",
        ("Import a trace that iotape did not record (blktrace, blkparse, SNIA, fio logs, ...)."),
    ),
    "ingest": (
        "ingest",
        "ingest",
        "Ingest files into the store, one run each; a file already there is skipped.",
    ),
    "export": (
        "export",
        "export",
        ("Write a run's events to Parquet: the trace record's columns and the trace header."),
    ),
    "runs": (
        "runs",
        "runs_app",
        "List, show, delete and tag the runs in the store.",
    ),
    "db": (
        "db",
        "db_app",
        "Create the store's tables (DuckDB, ClickHouse, or a ClickHouse cluster).",
    ),
    "replay": (
        "replay",
        "app",
        "Replay a trace with fio: plan job files, run them, measure fidelity.",
    ),
    "serve": (
        "serve",
        "serve",
        ("Serve the runs in the store as JSON (OpenAPI at /docs) and as a dashboard at /."),
    ),
    "workload": (
        "workload",
        "app",
        "The reference Exchange-like (ESE) workload: a Jetstress for Linux.",
    ),
    "analyze": (
        "analyze",
        "app",
        "Analyses of a stored run from the terminal.",
    ),
    "compare": (
        "compare",
        "compare",
        "Compare candidate runs with a base run, per device model, op and stream.",
    ),
    "history": (
        "history",
        "history",
        (
            "A device model across firmware versions: per op and stream, each version's "
            "percentiles, mean and IOPS."
        ),
    ),
    "lab": (
        "lab",
        "app",
        "Experiments on emulated devices, end to end.",
    ),
}
# What asks for the root help alone.
ROOT_HELP: tuple[list[str], ...] = ([], ["--help"], ["-h"])


def _is_group(attr: str) -> bool:
    return attr == "app" or attr.endswith("_app")


def _register(only: str | None = None, rest: list[str] | None = None) -> None:
    """Register every command, or only the one named: its module alone is imported
    (each command module imports the components it drives), so `iotape ingest`
    does not pay for loading the replayer, the workload and the lab (0.1-0.2 s).
    A group with a `build` (iotape.cliutil.lazy_group) gets the words after its
    name (`rest`) and imports only the command they name."""
    for name, (module, attr, _line) in COMMANDS.items():
        if only is not None and name != only:
            continue
        mod = importlib.import_module(f"iotape.commands.{module}")
        build = getattr(mod, "build", None)
        obj = build(rest) if only is not None and rest is not None and build else getattr(mod, attr)
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name)
        else:
            app.command(name)(obj)


def _register_lines() -> None:
    """Every command as its line of the root help only, in the place the real
    registration gives it (typer lists commands, then groups): `iotape --help`
    imports no command module (it took 0.66 s, a command's own help 0.41 s)."""
    for name, (_module, attr, line) in COMMANDS.items():
        if _is_group(attr):
            app.add_typer(typer.Typer(help=line), name=name)
        else:
            app.command(name, help=line)(_unreachable)


def _unreachable() -> None:  # pragma: no cover - only listed, never run
    raise AssertionError("a help line was run as a command")


@app.callback()
def _root() -> None:
    # A callback keeps `iotape CMD` a group of commands when only CMD is registered
    # (typer runs a lone command without its name otherwise).
    pass


def _plain_coercion() -> None:
    """Plain values (text, paths, defaults) coerced without pydantic: 45-65 ms of a
    command (iotape/coercion.py). It hooks typer's private modules of 0.29 (uv.lock);
    another typer (pyproject allows >= 0.12) keeps its own coercion."""
    try:
        from iotape import coercion
    except ImportError:
        return
    coercion.install()


def main() -> None:
    named = sys.argv[1] if len(sys.argv) > 1 else None
    if sys.argv[1:] in ROOT_HELP:
        _register_lines()
    else:
        _register(named if named in COMMANDS else None, sys.argv[2:])
    _plain_coercion()
    exits.guarded(named, app)
