"""`iotape replay run` and `iotape replay check-host` (a host's part of a multi-host run)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from base.errors import IotapeError
from iotape.cliopts import AsJson, Force
from iotape.commands.replay.options import DestroyDataOn, err
from replayer.run import execute as runmod
from replayer.run.results import HostStart, RunSummary


def run(
    jobdir: Annotated[
        Path, typer.Argument(help="Job directory from `iotape replay plan`.", show_default=False)
    ],
    record: Annotated[
        Path | None,
        typer.Option("--record", help="Record the replay at the device into this trace."),
    ] = None,
    anchor_record: Annotated[
        Path | None,
        typer.Option("--anchor-record", help="Also run fio's plain replay, recorded here."),
    ] = None,
    destroy_data_on: DestroyDataOn = None,
    force: Force = False,
    host_iotape: Annotated[
        str,
        typer.Option("--host-iotape", help="Multi-host plans: the iotape command on the hosts."),
    ] = "iotape",
    runner: Annotated[
        str,
        typer.Option(
            "--runner",
            help="fio, lanes (iotape-lanes: each request at its microsecond; plans of "
            "lanes only) or auto (lanes for a plan of lanes, else fio).",
        ),
    ] = "auto",
    as_json: AsJson = False,
) -> None:
    """Run the plan's fio jobs (JSON results and latency logs in JOBDIR/results;
    a multi-host plan: every host at once through `fio --client`, results per host
    in JOBDIR/results/HOST).

    A plan of lanes (long traces) runs with iotape-lanes by default: the same job
    file and iologs, each request issued at its microsecond, where fio 3.33 wakes
    within a millisecond after it (`--runner fio` to run fio itself).

    Example: iotape replay run jobs/ --record replay.iot --anchor-record fio-plain.iot
    """
    with err.status("replaying") as status:
        summary = runmod.run(
            jobdir,
            record,
            destroy_data_on or [],
            anchor_record,
            force,
            say=lambda s: status.update(s),
            host_iotape=host_iotape,
            runner=runner,
        )
    if as_json:
        print(summary.text(), end="")
        return
    _print(summary)


def _print(summary: RunSummary) -> None:
    t = Table("job", "runtime ms", "read iops", "write iops", "read p99 ms", "write p99 ms")
    for row in summary.jobs:
        rd, wr = row.read, row.write
        t.add_row(
            row.job,
            str(row.runtime_ms),
            str(rd.iops if rd else "-"),
            str(wr.iops if wr else "-"),
            str(rd.p99_ms if rd else "-"),
            str(wr.p99_ms if wr else "-"),
        )
    Console().print(t)
    late = summary.issue_late_ms
    if late:
        print(
            f"iotape-lanes issued requests after their times by p50 {late.get('p50')} "
            f"p99 {late.get('p99')} max {late.get('max')} ms (its own clock)"
        )
    for name, h in (summary.hosts or {}).items():
        print(start_line(name, h.start or HostStart()))


def start_line(name: str, s: HostStart) -> str:
    """One host's start against the others, and its issue error, in one line."""
    if s.offset_ms is None or s.issue_error_ms is None:
        return f"host {name}: {s.logged or 0} requests logged, none paired with the plan"
    err = s.issue_error_ms
    return (
        f"host {name}: started {s.offset_ms} ms after the first host; "
        f"{s.paired}/{s.planned} planned requests in its fio logs, "
        f"issue error p50 {err.get('p50')} p99 {err.get('p99')} ms ({s.source})"
    )


def check_host(
    jobdir: Annotated[
        Path, typer.Argument(help="The job directory, as copied to this host.", show_default=False)
    ],
    host: Annotated[str, typer.Argument(help="This host's --host NAME.", show_default=False)],
    verdict: Annotated[
        Path | None,
        typer.Option("--verdict", help="Write the verdict file `replay run` reads back."),
    ] = None,
    destroy_data_on: DestroyDataOn = None,
) -> None:
    """Check this host's part of a multi-host plan: its targets (as `replay run` checks
    local ones), their size, and its copy of the iologs. `replay run` runs it on every
    host through fio before any I/O.

    Example: iotape replay check-host /srv/jobs h1 --destroy-data-on /dev/sdb
    """
    from replayer.hosts import check as hostcheck

    code, message = hostcheck.check(jobdir.resolve(), host, destroy_data_on or [])
    if verdict is not None:
        hostcheck.write_verdict(verdict, code, message)
    if code:
        raise IotapeError(message)
    print(f"host {host}: ok")
