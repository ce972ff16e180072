"""`iotape workload`: the Exchange-like reference workload (parse, run, report)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from base.errors import IotapeError
from iotape.cliopts import AsJson, Force
from iotape.cliutil import key_values, sub_app
from iotape.commands import workload_options as o
from schemas.documents import workload_report
from schemas.documents.workload_report import WorkloadReport
from schemas.formats import ESRP_REPORT
from workload import engine, esrp, html, profiles, report

app = sub_app("The reference Exchange-like (ESE) workload: a Jetstress for Linux.")
err = Console(stderr=True)


_RECREATE = {
    "incomplete": "its creation was interrupted: creating it again",
    "different": "the one there has another size or page size: creating it again",
}


class _Live:
    """Database creation as a progress bar, then the run's elapsed time."""

    def __init__(self, duration: float, show: bool) -> None:
        self.duration = duration
        self.bar = None
        if show:
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                console=err,
                transient=True,
            )
            self.bar.start()
        self.tasks: dict[str, int] = {}

    def _task(self, key: str, desc: str, total: float | None):
        assert self.bar
        if key not in self.tasks:
            self.tasks[key] = self.bar.add_task(desc, total=total, info="")
        return self.tasks[key]

    def __call__(self, msg: dict) -> None:
        kind = msg.get("type")
        why = _RECREATE.get(msg.get("found", "")) if kind == "db" else None
        if why and msg.get("action") == "create":
            err.print(f"database {msg['db']}: {why}")
        if kind == "logs":
            _say_logs({"databases": [msg]})
        if not self.bar:
            return
        if kind == "create":
            t = self._task(f"db{msg['db']}", f"creating database {msg['db']}", msg["total"])
            self.bar.update(t, completed=msg["done"], info=f"{msg['done'] / 2**30:.2f} GiB")
        elif kind == "tick":
            # A run of --transactions has no known length: a bar without a total.
            t = self._task("run", "running", self.duration or None)
            done = min(msg["t"], self.duration) if self.duration else msg["t"]
            self.bar.update(t, completed=done, info=f"{msg['tx_ios']:,} tx I/O")

    def close(self) -> None:
        if self.bar:
            self.bar.stop()


def _emulated(spec: str | None) -> dict[str, float] | None:
    if spec is None:
        return None
    parts = spec.split(",")
    if len(parts) == 1:
        return profiles.published_latency(spec)
    try:
        ms = [float(p) for p in parts]
    except ValueError:
        ms = []
    if len(ms) != len(profiles.LATENCY_KEYS) or min(ms) < 0:
        raise IotapeError(
            f"--emulate-latency {spec}: a published run's id or DB_READ_MS,DB_WRITE_MS,LOG_WRITE_MS"
        )
    return dict(zip(profiles.LATENCY_KEYS, ms, strict=True))


def _say_logs(result: dict) -> None:
    """A run that writes a log starts a new log stream and keeps what earlier runs left."""
    logs = result["databases"]
    groups = result.get("storage_groups", [])
    if 0 < len(groups) < len(logs):  # one log per storage group
        logs = [{**g, "db": g["group"]} for g in groups]
    for d in logs:
        stream = d.get("log_stream") or d.get("stream")
        if not stream:
            continue
        kept = d.get("logs_kept", d.get("kept", 0))
        removed = d.get("logs_removed", d.get("removed", 0))
        who = f"database {d['db']}"
        if len(d.get("databases", [])) > 1:  # a storage group's log, shared by its databases
            dbs = ", ".join(str(x) for x in d["databases"])
            who = f"storage group {d['group']} (databases {dbs})"
        line = f"{who}: new log stream from generation {stream}"
        if kept:
            line += f"; {kept} log file(s) of earlier runs kept"
        if removed:
            line += f"; {removed} of the oldest removed to leave room for the log"
        err.print(line)


def _run_engine(
    cfg: engine.WorkloadConfig,
    record: Path | None,
    device: list[str] | None,
    force: bool,
    show: bool,
    wakes: bool = False,
) -> dict:
    if record:
        result, summary = engine.run_recorded(cfg, record, device, force, wakes)
        err.print(f"recorded {summary.get('events', 0):,} events to {record}")
        _say_logs(result)  # a recorded engine is quiet: said once it is done
    else:
        timed = cfg.mode in engine.MODES[:3] and not cfg.transactions
        live = _Live(cfg.duration if timed else 0, show)
        try:
            result = engine.run(cfg, live)  # said as it starts (the "logs" message)
        finally:
            live.close()
    return result


def _config(db_path: list[str], log_path: list[str], **kw: Any) -> engine.WorkloadConfig:
    """The run's configuration from the options both commands share."""
    # Options a preset sets unless given (Exchange 2000: 4 KiB pages, one copy, no
    # maintenance); None here means "not given".
    preset = profiles.RUN_DEFAULTS.get(kw["profile"], {})
    for key, generic in (("page_kb", o.PAGE_KB), ("copies", o.COPIES)):
        if kw[key] is None:
            kw[key] = preset.get(key, generic)
    no_bdm = kw.pop("no_bdm")
    return engine.WorkloadConfig(
        db_paths=db_path,
        log_paths=log_path,
        bdm=not no_bdm if no_bdm is not None else bool(preset.get("bdm", True)),
        create="recreate" if kw.pop("recreate") else "reuse",
        destroy_data_on=kw.pop("destroy_data_on") or [],
        overrides=key_values("--set", kw.pop("set_") or [], "NAME=VALUE (an engine option)"),
        **kw,
    )


def _check_outputs(*outs: Path | None) -> None:
    for out in outs:
        if out and not out.parent.is_dir():
            raise IotapeError(f"{out}: directory {out.parent} does not exist")


def _emit(
    rep: WorkloadReport | dict, report_out: Path | None, json_out: bool, render: Callable
) -> None:
    """The report (a workload's, or an ESRP sequence's) to its file, to stdout as JSON
    or as tables; 130 if interrupted."""
    if isinstance(rep, WorkloadReport):
        data, interrupted = rep.data(), rep.interrupted
    else:
        data, interrupted = rep, bool(rep["interrupted"])
    if report_out:
        report_out.write_text(json.dumps(data, indent=1) + "\n")
    if json_out:
        json.dump(data, sys.stdout, indent=1)
        print()
    else:
        render(rep)
    if interrupted:
        raise typer.Exit(130)


@app.command("run")
def run(
    db_path: o.Paths,
    log_path: o.Paths,
    profile: o.Profile = o.PROFILE,
    mode: o.Mode = o.MODE,
    mailboxes: o.Mailboxes = o.MAILBOXES,
    iops_per_mailbox: o.IopsPerMailbox = o.IOPS_PER_MAILBOX,
    mailbox_size_mb: o.MailboxSizeMb = o.MAILBOX_SIZE_MB,
    databases: o.Databases = o.DATABASES,
    storage_groups: o.StorageGroups = None,
    copies: o.Copies = None,
    duration: o.Duration = o.DURATION,
    transactions: o.Transactions = o.TRANSACTIONS,
    threads: Annotated[str, typer.Option(help="per database, or 'auto' (throughput)")] = str(
        o.THREADS
    ),
    cache_min_mb: o.CacheMinMb = None,
    cache_max_mb: o.CacheMaxMb = None,
    page_kb: o.PageKb = None,
    seed: o.Seed = o.SEED,
    no_bdm: o.NoBdm = None,
    recreate: o.Recreate = False,
    ioengine: o.Ioengine = o.IOENGINE,
    set_: o.Set = None,
    destroy_data_on: o.DestroyDataOn = None,
    report_out: Annotated[Path | None, typer.Option("--report", help="report JSON")] = None,
    html_out: o.HtmlOut = None,
    record: Annotated[Path | None, typer.Option(help="record the run to this trace")] = None,
    record_wakes: Annotated[
        bool, typer.Option(help="with --record: record wakes too (`iotape record --wakes`)")
    ] = False,
    device: o.Device = None,
    force: Force = False,
    json_out: AsJson = False,
    emulate_latency: Annotated[
        str | None,
        typer.Option(
            help="EMULATION: hold completions to a published run's latencies (its id) or to "
            "DB_READ_MS,DB_WRITE_MS,LOG_WRITE_MS; the report says so"
        ),
    ] = None,
) -> None:
    """Run the workload and print the Jetstress-style report.

    Example: iotape workload run --db-path /dev/nvme1n1 --log-path /mnt/logs
    --mailboxes 200 --mailbox-size-mb 64 --duration 60 --destroy-data-on /dev/nvme1n1
    """
    if threads != "auto" and not threads.isdigit():
        raise IotapeError(f"--threads {threads}: a number or 'auto'")
    cfg = _config(
        db_path, log_path, profile=profile, mode=mode, mailboxes=mailboxes,
        iops_per_mailbox=iops_per_mailbox, mailbox_size_mb=mailbox_size_mb,
        databases=databases, storage_groups=storage_groups, copies=copies, duration=duration,
        transactions=transactions,
        threads=threads if threads == "auto" else int(threads), cache_min_mb=cache_min_mb,
        cache_max_mb=cache_max_mb, page_kb=page_kb, seed=seed, no_bdm=no_bdm,
        recreate=recreate, ioengine=ioengine, set_=set_, destroy_data_on=destroy_data_on,
        emulate_latency_ms=_emulated(emulate_latency),
    )  # fmt: skip
    _check_outputs(report_out, html_out)
    if record_wakes and not record:
        raise IotapeError("--record-wakes: only with --record")
    result = _run_engine(cfg, record, device, force, err.is_terminal and not json_out,
                         record_wakes)  # fmt: skip
    rep = report.build(result)
    if html_out:
        html.write(rep, html_out)
    _emit(rep, report_out, json_out, report.render)


@app.command("esrp")
def esrp_cmd(
    db_path: o.Paths,
    log_path: o.Paths,
    test: Annotated[str, typer.Option(help="the first phase: performance or stress")] = (
        "performance"
    ),
    profile: o.Profile = o.PROFILE,
    mailboxes: o.Mailboxes = o.MAILBOXES,
    iops_per_mailbox: o.IopsPerMailbox = o.IOPS_PER_MAILBOX,
    mailbox_size_mb: o.MailboxSizeMb = o.MAILBOX_SIZE_MB,
    databases: o.Databases = o.DATABASES,
    storage_groups: o.StorageGroups = None,
    copies: o.Copies = None,
    duration: o.Duration = o.DURATION,
    threads: o.Threads = o.THREADS,
    cache_max_mb: o.CacheMaxMb = None,
    page_kb: o.PageKb = None,
    seed: o.Seed = o.SEED,
    no_bdm: o.NoBdm = None,
    recreate: o.Recreate = False,
    set_: o.Set = None,
    destroy_data_on: o.DestroyDataOn = None,
    report_out: Annotated[
        Path | None,
        typer.Option("--report", help="ESRP report JSON; each phase's report beside it"),
    ] = None,
    html_out: o.HtmlOut = None,
    record: Annotated[
        Path | None, typer.Option(help="record each phase: X.iot gives X.PHASE.iot")
    ] = None,
    device: o.Device = None,
    force: Force = False,
    json_out: AsJson = False,
) -> None:
    """Run the published Jetstress sequence on the same databases: a performance
    (or stress) test, a database backup, then soft recovery of the logs the test
    wrote; one report with a table per phase.

    Example: iotape workload esrp --db-path /mnt/db --log-path /mnt/log
    --mailboxes 200 --iops-per-mailbox 0.3 --duration 600 --report esrp.json --html esrp.html
    """
    if profiles.is_mmb2(profile):
        raise IotapeError(
            f"--profile {profile}: the ESRP sequence is Jetstress's; LoadSim MMB2 has no "
            "such sequence (use `iotape workload run`)"
        )
    cfg = _config(
        db_path, log_path, profile=profile, mailboxes=mailboxes,
        iops_per_mailbox=iops_per_mailbox, mailbox_size_mb=mailbox_size_mb,
        databases=databases, storage_groups=storage_groups, copies=copies, duration=duration,
        threads=threads,
        cache_max_mb=cache_max_mb, page_kb=page_kb, seed=seed, no_bdm=no_bdm,
        recreate=recreate, set_=set_, destroy_data_on=destroy_data_on,
    )  # fmt: skip
    _check_outputs(report_out, html_out)
    show = err.is_terminal and not json_out

    def run_phase(c: engine.WorkloadConfig, trace: Path | None) -> dict:
        err.print(f"[bold]{c.mode}[/]")
        return _run_engine(c, trace, device, force, show)

    seq, reports = esrp.run_sequence(cfg, test, run_phase, record, force)
    rep = esrp.build(seq, reports, test)
    for ph in rep["phases"]:
        if report_out:
            path = esrp.phase_path(report_out, ph["phase"])
            path.write_text(json.dumps(ph["report"], indent=1) + "\n")
    if html_out:
        html.write_esrp(rep, html_out)
    _emit(rep, report_out, json_out, esrp.render)


@app.command("show")
def show(
    report_json: Annotated[Path, typer.Argument(help="a report written by --report")],
    html_out: Annotated[Path | None, typer.Option("--html", help="also write the HTML")] = None,
) -> None:
    """Print a saved report (of `run` or `esrp`) again, or turn it into the one-page HTML.

    Example: iotape workload show run.json --html run.html
    """
    try:
        rep = json.loads(report_json.read_text())
    except (OSError, ValueError) as e:
        raise IotapeError(f"{report_json}: cannot read a report: {e}") from None
    # Version 1 lacks the recovery page rows, which render only where present.
    if (
        isinstance(rep, dict)
        and rep.get("format") == ESRP_REPORT.id
        and rep.get("version")
        in (
            1,
            ESRP_REPORT.version,
        )
    ):
        esrp.render(rep)
        if html_out:
            html.write_esrp(rep, html_out)
        return
    wrep = workload_report.parse(rep, str(report_json))
    report.render(wrep)
    if html_out:
        html.write(wrep, html_out)
