"""The `iotape` command's entry (pyproject's script, `python -m iotape`): a plain
`iotape ingest` line goes straight to its command (iotape/ingest_command.py), without
typer, its click and the command map (~35 ms of a command of ~0.5 s: issue 36, its
fixed cost); every other line to iotape.cli, which reads it with typer."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["ingest"]:
        from iotape import ingest_command

        line = ingest_command.parse(sys.argv[2:])
        if line is not None:
            from iotape import exits

            exits.guarded("ingest", lambda: ingest_command.main(line))
    from iotape import cli

    cli.main()
