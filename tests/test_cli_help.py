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


def _first_paragraph(text: str) -> str:
    return " ".join(text.split("\n\n")[0].split())


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_root_help_line_is_the_commands_own(name: str) -> None:
    """`iotape --help` lists each command by its line in cli.COMMANDS, without
    importing it: that line is how the command's own help begins."""
    line = cli.COMMANDS[name][2]
    own = _first_paragraph(ROOT.commands[name].help or "")
    assert own.startswith(line.rstrip(".")), (line, own)


def test_root_help_imports_no_command_module(tmp_path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.argv = ['iotape', '--help']\n"
        "from iotape import cli\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('iotape.commands.')))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"
    for name in cli.COMMANDS:
        assert f" {name} " in p.stdout
