"""The options of `iotape workload run` and `esrp`: help, bounds and defaults from
the engine's option table (schemas/workload_options.toml), declared once for both."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from iotape.cliopts import DestroyDataOn as DestroyDataOn  # declared once, for all commands
from schemas.workload_options import bounds, default_float, default_int, default_str, options
from workload.profiles import PRESETS

# Bounds at least this large only keep nonsense out of the engine: not worth a
# place in --help, which shows a bound typer checks.
_UNBOUNDED = 1e6
# Options a preset may set (profiles.RUN_DEFAULTS); parentheses, since rich takes
# square brackets in help for markup and drops them.
_PRESET_OR = "(default: the profile's, else "


def _opt(name: str, *decls: str, help: str | None = None, **kw: Any) -> Any:
    """typer.Option of an engine option: its help and, for a number, its bounds."""
    o = options()[name]
    if o.type in ("int", "double"):
        lo, hi = bounds(name)
        kw["min"] = lo
        if hi < _UNBOUNDED:
            kw["max"] = hi
    return typer.Option(*decls, help=help or o.help, **kw)


Paths = Annotated[list[str], typer.Option(help="directory or raw block device; once, or per db")]
Profile = Annotated[str, typer.Option(help=f"preset: {', '.join(PRESETS)}")]
Mode = Annotated[str, _opt("mode")]
Mailboxes = Annotated[int, _opt("mailboxes")]
IopsPerMailbox = Annotated[float, _opt("iops-per-mailbox")]
MailboxSizeMb = Annotated[float, _opt("mailbox-size-mb")]
Databases = Annotated[int, _opt("databases")]
StorageGroups = Annotated[
    int | None,
    _opt(
        "storage-groups",
        help="storage groups the databases share (database i in group i % G): one log "
        "writer, log target and log stream per group (default: the profile's, else one "
        "per database)",
    ),
]
Copies = Annotated[
    int | None,
    _opt("copies", help=f"{options()['copies'].help} {_PRESET_OR}{default_int('copies')})"),
]
Duration = Annotated[float, _opt("duration")]
Transactions = Annotated[int, _opt("transactions")]
Threads = Annotated[int, _opt("threads")]
CacheMinMb = Annotated[float | None, _opt("cache-min-mb", help="default: 1/8 of the maximum")]
CacheMaxMb = Annotated[
    float | None, _opt("cache-max-mb", help="default: 4 pages per mailbox, at least 8 MiB")
]
PageKb = Annotated[
    int | None,
    _opt("page-kb", help=f"{options()['page-kb'].help} {_PRESET_OR}{default_int('page-kb')})"),
]
Seed = Annotated[int, _opt("seed")]
NoBdm = Annotated[
    bool | None,
    typer.Option(
        "--no-bdm/--bdm",
        help="background maintenance off or on (default: the profile's, else on)",
        show_default=False,
    ),
]
Recreate = Annotated[bool, typer.Option(help="recreate databases even if reusable")]
Ioengine = Annotated[str, _opt("ioengine")]
Set = Annotated[list[str] | None, typer.Option("--set", help="NAME=VALUE: any engine option")]
HtmlOut = Annotated[Path | None, typer.Option("--html", help="one-page HTML report")]
Device = Annotated[list[str] | None, typer.Option("-d", "--device", help="device to record")]

# The defaults: the engine's.
PROFILE = "exchange2010"
MODE = default_str("mode")
MAILBOXES = default_int("mailboxes")
IOPS_PER_MAILBOX = default_float("iops-per-mailbox")
MAILBOX_SIZE_MB = default_float("mailbox-size-mb")
DATABASES = default_int("databases")
COPIES = default_int("copies")
DURATION = default_float("duration")
TRANSACTIONS = default_int("transactions")
THREADS = default_int("threads")
PAGE_KB = default_int("page-kb")
SEED = default_int("seed")
IOENGINE = default_str("ioengine")
