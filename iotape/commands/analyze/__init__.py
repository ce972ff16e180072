"""`iotape analyze`: analyses of a stored run from the terminal, one module per command."""

from __future__ import annotations

from iotape.cliutil import sub_app
from iotape.commands.analyze import latency, tiering, verdict

app = sub_app("Analyses of a stored run from the terminal.")
app.command("tiering")(tiering.tiering_cmd)
app.command("latency")(latency.latency)
app.command("verdict")(verdict.verdict)
