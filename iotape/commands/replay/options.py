"""What the `iotape replay` commands share."""

from __future__ import annotations

from rich.console import Console

from iotape.cliopts import DestroyDataOn

__all__ = ["DestroyDataOn", "err"]

err = Console(stderr=True)
