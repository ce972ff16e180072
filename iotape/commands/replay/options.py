"""What the `iotape replay` commands share."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

err = Console(stderr=True)

DestroyDataOn = Annotated[
    list[str] | None,
    typer.Option(
        "--destroy-data-on",
        help="Allow writing to DEV despite a filesystem, mount or root disk.",
    ),
]
