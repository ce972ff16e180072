"""README.md is a user guide that stays true: short, self-contained, and every
`iotape …` example in it names a command and options that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from iotape import cli

ROOT_DIR = Path(__file__).resolve().parents[1]
README = ROOT_DIR / "README.md"
DOCS = sorted((ROOT_DIR / "docs").glob("*.md"))
# Every page a user reads from the README on, and what the tests below hold them to.
PAGES = [README, *DOCS, ROOT_DIR / "traces" / "README.md"]
cli._register()
ROOT = typer.main.get_command(cli.app)


def _examples(text: str) -> list[str]:
    """`iotape …` command lines of the README's sh blocks, continuations joined."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("iotape "):
                out.append(line)
    return out


EXAMPLES = _examples(README.read_text())
# The docs/ pages' examples are held to the same rule: a user copies them as often.
DOC_EXAMPLES = [
    pytest.param(e, id=f"{page.name}: {e[:60]}")
    for page in DOCS
    for e in _examples(page.read_text())
]


def _resolve(argv: list[str]) -> tuple[Any, list[str], list[str]]:
    """The command an argv names, the path to it, and the arguments after it.
    (Typer carries its own click, so groups are told by their `commands`.)"""
    cmd: Any = ROOT
    path: list[str] = []
    rest = argv
    while hasattr(cmd, "commands") and rest and not rest[0].startswith("-"):
        sub = cmd.commands.get(rest[0])
        assert sub is not None, f"iotape {' '.join(path)} has no command {rest[0]!r}"
        cmd, path, rest = sub, [*path, rest[0]], rest[1:]
    assert not hasattr(cmd, "commands"), f"iotape {' '.join(path)} names a group"
    return cmd, path, rest


def test_the_readme_has_examples_of_every_command_group() -> None:
    groups = {shlex.split(e)[1] for e in EXAMPLES}
    assert set(ROOT.commands) - {"export", "runs", "db"} <= groups


@pytest.mark.parametrize("example", [*EXAMPLES, *DOC_EXAMPLES])
def test_an_example_names_a_real_command_and_options(example: str) -> None:
    argv = shlex.split(example)[1:]
    cmd, path, rest = _resolve(argv)
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    named = {a.split("=", 1)[0] for a in rest if a.startswith("-") and a != "--"}
    # After `--` comes the user's command (record's and workload's `-- CMD`).
    if "--" in rest:
        named = {a.split("=", 1)[0] for a in rest[: rest.index("--")] if a.startswith("-")}
    assert named <= known, f"iotape {' '.join(path)}: no option {sorted(named - known)}"
    # The command's own help runs: it is the real CLI, not a stale name.
    res = CliRunner().invoke(cli.app, [*path, "--help"])
    assert res.exit_code == 0, res.output


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_nothing_points_outside_the_repository() -> None:
    # Spelled in parts, so that this test does not itself point outside.
    outside = "/".join(["..", "shared"])
    for page in PAGES:
        text = page.read_text()
        assert outside not in text, page
        assert "workplace" not in text.lower(), page


def test_every_page_named_is_in_the_repository() -> None:
    # A page named in prose rather than linked (a design document that lives
    # elsewhere, say) is as much a dead end as a broken link.
    for page in PAGES:
        for name in set(re.findall(r"(?<![\w/.-])([\w./-]+\.md)\b", page.read_text())):
            assert (page.parent / name).exists() or (ROOT_DIR / name).exists(), (
                f"{page.relative_to(ROOT_DIR)} names {name}, which is not in the repository"
            )


def test_every_relative_link_exists() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), (
                f"{page.relative_to(ROOT_DIR)}: link to {target} is broken"
            )
