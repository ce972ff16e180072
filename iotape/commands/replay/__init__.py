"""`iotape replay`: one module per command; each parses, calls one library function, prints.

The commands are registered here, in the order `iotape replay --help` lists them."""

from __future__ import annotations

import typer

from iotape.commands.replay import fidelity, plan, run, split, tiering_check

app = typer.Typer(
    help="Replay a trace with fio: plan job files, run them, measure fidelity.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("plan")(plan.plan)
app.command("run")(run.run)
app.command("check-host")(run.check_host)
app.command("fidelity")(fidelity.fidelity)
app.command("split")(split.split)
app.command("tiering-check")(tiering_check.tiering_check)

__all__ = ["app"]
