"""Where a bench's JSON goes: to -o FILE when given, else to stdout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(doc: Any, out: Path | None) -> None:
    text = json.dumps(doc, indent=1) + "\n"
    if out:
        out.write_text(text)
    else:
        print(text, end="")
