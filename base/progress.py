"""One progress bar for every long command (import, convert, check, ingest).

Drawn on stderr only when stderr is a terminal, so piped and --json output stays
clean; the callers get `None` instead of an update function when nothing is drawn.
rich is imported only to draw one (~30 ms of a command's start: rich.console and
rich.progress), so a command run from a script or a pipe does not load it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import ProgressColumn

Update = Callable[..., None]


@contextmanager
def progress(
    what: str,
    console: Console | None,
    unit: Literal["bytes", "items"] = "bytes",
    counter: str | None = None,
) -> Iterator[Update | None]:
    """A bar for `what`; yields update(done, total, **fields) or None when not a terminal.

    `counter` names a field shown as a running count beside the bar ("events"): the
    importers measure progress in input bytes but users think in requests.
    `console` None: stderr's, made (and rich imported) only where stderr is a terminal.
    """
    if console is None:
        if not sys.stderr.isatty():
            yield None
            return
        from rich.console import Console

        console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as _Bar

    columns: list[ProgressColumn] = [TextColumn(what), BarColumn()]
    columns.append(DownloadColumn() if unit == "bytes" else MofNCompleteColumn())
    if counter:
        columns.append(TextColumn(f"{{task.fields[{counter}]:,}} {counter}"))
    columns.append(TimeRemainingColumn())
    with _Bar(*columns, console=console, transient=True) as bar:
        fields: dict[str, Any] = {counter: 0} if counter else {}
        task = bar.add_task(what, total=None, **fields)

        def update(done: int, total: int | None, **more: Any) -> None:
            bar.update(task, completed=done, total=total, **more)

        yield update
