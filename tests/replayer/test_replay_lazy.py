"""`iotape replay CMD` imports CMD's module alone (iotape.cliutil.lazy_group):
`replay fidelity` of a recorded replay loads neither the plan builder nor the
runner of `replay run`, nor pydantic (no plan document to read), nor pyarrow
(compressed chunks decompress in C); `replay --help`
lists every command by a line that is the command's own."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from trace_helpers import make_trace, workload_records

from iotape.commands import replay

# What `replay fidelity` imported before its group was lazy (0.3-0.5 s of its start),
# and pyarrow, which it loaded for the codecs of compressed chunks (~0.1 s; now in C,
# recorder/planes.c) and the Arrow schema it does not use.
HEAVY = ("replayer.run.execute", "replayer.plan.build", "replayer.hosts.run", "pydantic",
         "pyarrow")  # fmt: skip

PROBE = (
    "import sys\n"
    "sys.argv = ['iotape', *sys.argv[1:]]\n"
    "from iotape import cli\n"
    "try:\n    cli.main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
    "print(sorted(m for m in sys.modules if m in {heavy!r}"
    " or m.startswith('iotape.commands.')))"
)


def _run(*argv: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    p = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=heavy), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    *out, modules = p.stdout.strip().splitlines()
    return [*out, modules]


def test_fidelity_of_a_recording_imports_no_runner(tmp_path: Path) -> None:
    o = make_trace(tmp_path / "o.iot", workload_records(400, seed=3), compression="zstd")
    r = make_trace(tmp_path / "r.iot", workload_records(400, seed=3), compression="lz4")
    # rich too: only the tables import it (~40 ms), and --json prints none.
    out = _run("replay", "fidelity", str(o), str(r), "--json", heavy=(*HEAVY, "rich"))
    assert '"requests"' in "\n".join(out[:-1])
    assert out[-1] == "['iotape.commands.replay', 'iotape.commands.replay.fidelity']"


def test_fidelity_help_imports_no_runner() -> None:
    out = _run("replay", "fidelity", "--help")
    assert "Example: iotape replay fidelity" in "\n".join(out)
    assert out[-1].endswith("'iotape.commands.replay.fidelity']") and "pydantic" not in out[-1]


def test_group_help_imports_no_command() -> None:
    out = _run("replay", "--help")
    text = "\n".join(out)
    assert all(f" {name} " in text for name in replay.COMMANDS)
    assert out[-1] == "['iotape.commands.replay']"


@pytest.mark.parametrize("name", list(replay.COMMANDS))
def test_listed_line_is_the_commands_own(name: str) -> None:
    """The line `replay --help` lists is the first paragraph of the command's help,
    as typer would take it from the function."""
    module, attr, line = replay.COMMANDS[name]
    fn = getattr(__import__(f"iotape.commands.replay.{module}", fromlist=[attr]), attr)
    assert (inspect.getdoc(fn) or "").split("\n\n")[0] == line
