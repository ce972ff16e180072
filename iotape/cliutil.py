"""What every sub-command group shares: how a group is made, how KEY=VALUE
options parse, how --json prints."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from base.errors import IotapeError

if TYPE_CHECKING:
    # Where a group is made, not here: `iotape ingest`'s --json prints with print_json
    # without typer (iotape/ingest_command.py).
    import typer


def sub_app(help: str) -> typer.Typer:
    """A command group that prints help when called bare and lets IotapeError reach main()."""
    import typer

    return typer.Typer(
        help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False
    )


def key_values(option: str, pairs: list[str], what: str = "KEY=VALUE") -> dict[str, str]:
    """Parse repeated `--option KEY=VALUE` values; a malformed one is a one-line error."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise IotapeError(f"{option} {pair!r}: expected {what}")
        out[key] = value
    return out


def print_json(obj: object) -> None:
    """A command's --json answer (`iotape ingest` prints it without loading `runs`)."""
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


# A lazy group's commands: each name, the module of its package that defines it, the
# function that is the command, and the first paragraph of that function's help
# (what the group's --help lists for it; tests/test_cli_help.py holds it to the
# function's own).
LazyCommands = dict[str, tuple[str, str, str]]


def lazy_group(
    help: str, package: str, commands: LazyCommands, argv: list[str] | None
) -> typer.Typer:
    """The group with every command (argv None: a test, or a module that imports it),
    or, for the words that follow the group's name on the command line, only what
    they need: the invoked command's module alone, or no module for the group's own
    help (each line as a stand-in). `iotape replay fidelity` then does not import the
    plan builder and the runner of `replay run` (0.3-0.5 s of its start)."""
    import importlib

    app = sub_app(help)
    lines_only = argv is not None and (not argv or argv[0] in ("--help", "-h"))
    only = argv[0] if argv and argv[0] in commands else None
    for name, (module, attr, line) in commands.items():
        if only is not None and name != only:
            continue
        if lines_only:
            app.command(name, help=line)(_listed_only)
        else:
            app.command(name)(getattr(importlib.import_module(f"{package}.{module}"), attr))
    return app


def _listed_only() -> None:  # pragma: no cover - only listed, never run
    raise AssertionError("a help line was run as a command")
