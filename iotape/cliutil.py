"""What every sub-command group shares: how a group is made, how KEY=VALUE
options parse, how --json prints."""

from __future__ import annotations

import json

import typer

from base.errors import IotapeError


def sub_app(help: str) -> typer.Typer:
    """A command group that prints help when called bare and lets IotapeError reach main()."""
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
