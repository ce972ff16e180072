"""Every command of the root CLI has help, and that help has an example."""

from __future__ import annotations

import pytest
import typer
from typer.core import TyperGroup

from iotape import cli

cli._register()
ROOT = typer.main.get_command(cli.app)


def _commands(group: TyperGroup, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in group.commands.items():
        path = (*prefix, name)
        if isinstance(cmd, TyperGroup):
            out += _commands(cmd, path)
        else:
            out.append(path)
    return out


COMMANDS = _commands(ROOT)


def test_the_commands_of_this_issue_exist() -> None:
    assert {("record",), ("trace", "info"), ("trace", "convert"), ("trace", "check")} <= set(
        COMMANDS
    )


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_has_an_example(path: tuple[str, ...]) -> None:
    cmd = ROOT
    for name in path:
        cmd = cmd.commands[name]
    assert cmd.help and f"Example: iotape {' '.join(path)}" in cmd.help
