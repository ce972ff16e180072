"""The published Jetstress/ESRP test sequence on the same databases.

`run_sequence` runs a performance (or stress) test, then a database backup, then
soft recovery of the logs the first phase wrote, each phase an ordinary engine
run (optionally recorded, one trace per phase) that shares one sequence id.
`build` turns the three workload reports into the ESRP report: the test
parameters, then for each phase the per-database table the published reports
print (database and log reads/s, writes/s, average bytes, average latency;
backup MB/s; logs replayed and logs/s), the totals and the verdict.

Soft recovery as Jetstress runs it: the test's logs are replayed against
databases whose pages are almost all current already. ESE reads each page a
log record names, compares its dbtime with the record's, and redoes (and later
writes) only the pages that are behind. How far behind is the parameter
`recovery-behind-pct` (default 4 % of the test's log): the test phase ends as an
instance that stops without a clean shutdown (`end=crash`) whose checkpoint has
written every page first dirtied before the last 4 % of the log. Why 4 %: ESE
keeps a database at most its checkpoint depth behind its log (20 MB for
Exchange 2010, the engine's `checkpoint-depth-mb`), and a published
soft-recovery test replays about 500 logs of 1 MB, of which those are the last
20. A short test here writes far less log than 20 MB; left at the checkpoint
depth its recovery would redo and write back nearly every page it reads, which
the published runs do not. The soft-recovery table says it per database: pages
the log names, current (read only), redone, read and written.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from base.errors import IotapeError
from schemas.documents.workload_report import DatabaseRow, StreamFigures, WorkloadReport
from schemas.formats import ESRP_REPORT
from schemas.workload_options import default_float
from workload import engine, report

FORMAT, VERSION = ESRP_REPORT.id, ESRP_REPORT.version
BEHIND = "recovery-behind-pct"
BEHIND_SOURCE = (
    "ESE's checkpoint depth (20 MB, Exchange 2010) of the about 500 logs of 1 MB a "
    "published soft-recovery test replays: the pages of the last 4 % of the log are "
    "behind when recovery starts, the rest current"
)
PHASES = ("test", "backup", "soft-recovery")  # "test": performance or stress

RunPhase = Callable[[engine.WorkloadConfig, Path | None], dict]


def phase_path(path: Path, phase: str) -> Path:
    """Where a phase's own file goes: `R.json` -> `R.performance.json`."""
    return path.with_name(f"{path.stem}.{phase}{path.suffix}")


def phase_configs(cfg: engine.WorkloadConfig, test: str) -> list[engine.WorkloadConfig]:
    if test not in ("performance", "stress"):
        raise IotapeError(f"--test {test}: performance or stress")
    seq = cfg.sequence or secrets.token_hex(6)
    first = dataclasses.replace(
        cfg, mode=test, sequence=seq, overrides={"end": "crash", **cfg.overrides}
    )
    return [first] + [
        dataclasses.replace(
            cfg, mode=mode, sequence=seq, create="reuse", overrides=dict(cfg.overrides)
        )
        for mode in ("backup", "soft-recovery")
    ]


def run_sequence(
    cfg: engine.WorkloadConfig,
    test: str,
    run_phase: RunPhase,
    record: Path | None = None,
    force: bool = False,
) -> tuple[str, list[WorkloadReport]]:
    """Run the phases in order; stop after one that was interrupted. Returns the
    sequence id and each phase's workload report."""
    cfgs = phase_configs(cfg, test)
    traces = [phase_path(record, c.mode) if record else None for c in cfgs]
    for t in traces:
        if t and t.exists() and not force:
            raise IotapeError(f"{t}: exists; give --force to overwrite it")
    for c in cfgs:
        engine.validate(c)  # every phase's options and targets before anything runs
    reports: list[WorkloadReport] = []
    try:
        for c, t in zip(cfgs, traces, strict=True):
            rep = report.build(run_phase(c, t))
            reports.append(rep)
            if rep.interrupted:
                break
    except KeyboardInterrupt:  # between phases: the phases run so far are the report
        if not reports:
            raise
        reports[-1] = reports[-1].model_copy(update={"stopped_after": True})
    return cfgs[0].sequence or "", reports


def _s(rep: WorkloadReport, db: DatabaseRow, name: str) -> StreamFigures:
    # Built here, not at import: a model instance at import builds pydantic's validators
    # (and scans the installed plugins) on every `iotape` start.
    return db.stream(name) or StreamFigures(
        count=0, bytes=0, per_s=0.0, avg_bytes=0.0, lat_avg_ms=0.0, lat_max_ms=0.0
    )


def db_table(rep: WorkloadReport) -> list[dict]:
    """Per database, the figures the published table of this phase gives."""
    rows = []
    backup = rep.mode == "backup"
    for db in rep.databases:
        rd = _s(rep, db, "backup-read" if backup else "db-read")
        wr, lw, lr = _s(rep, db, "db-write"), _s(rep, db, "log-write"), _s(rep, db, "log-read")
        row = {
            "db": db.db,
            "db_reads_s": rd.per_s,
            "db_writes_s": wr.per_s,
            "db_read_avg_bytes": rd.avg_bytes,
            "db_write_avg_bytes": wr.avg_bytes,
            "db_read_ms": rd.lat_avg_ms,
            "db_write_ms": wr.lat_avg_ms,
            "log_reads_s": lr.per_s,
            "log_read_avg_bytes": lr.avg_bytes,
            "log_writes_s": lw.per_s,
            "log_write_avg_bytes": lw.avg_bytes,
            "log_write_ms": lw.lat_avg_ms,
        }
        if backup:
            row["backup_mb_s"] = rd.per_s * rd.avg_bytes / 2**20
        rec = db.recovery
        if rec:
            secs = rec.replay_s or rep.elapsed_s
            row.update(
                logs_replayed=rec.logs_replayed,
                replay_s=secs,
                logs_per_s=rec.logs_replayed / secs if secs else 0.0,
                pages_redone=rec.pages_redone,
            )
            # Why the database writes so little: most pages the log names are
            # current already (written before the stop) and only read.
            for key in ("pages_named", "pages_current", "pages_read", "pages_written"):
                if (v := getattr(rec, key)) is not None:
                    row[key] = v
        rows.append(row)
    return rows


def _phase_verdict(rep: WorkloadReport) -> dict:
    if rep.interrupted:
        return {"result": "fail", "why": "interrupted"}
    if rep.mode in ("performance", "stress"):
        v = rep.verdict
        bad = [report.check_line(c) for c in v.checks if not c.passed]
        return {"result": v.result, "why": "; ".join(bad)}
    if rep.mode == "soft-recovery":
        n = sum(r.get("logs_replayed", 0) for r in db_table(rep))
        return {"result": "pass" if n else "fail", "why": f"{n} log files replayed"}
    return {"result": "pass", "why": "every database read"}


def build(sequence: str, reports: list[WorkloadReport], test: str) -> dict:
    params = dict(reports[0].config) if reports else {}
    params.pop("mode", None)
    phases: list[dict[str, Any]] = []
    for rep in reports:
        phases.append(
            {
                "phase": rep.mode,
                "elapsed_s": rep.elapsed_s,
                "interrupted": rep.interrupted,
                "target_tx_iops": rep.target_tx_iops,
                "achieved_tx_iops": rep.achieved_tx_iops,
                "databases": db_table(rep),
                "total": {k: t.data() for k, t in rep.total.items()},
                "verdict": _phase_verdict(rep),
                "report": rep.data(),
            }
        )
    done = [p["phase"] for p in phases]
    overrides = reports[0].config.get("overrides") or {} if reports else {}
    ok = len(phases) == 3 and all(p["verdict"]["result"] == "pass" for p in phases)
    return {
        "format": FORMAT,
        "version": VERSION,
        "sequence": sequence,
        "test": test,
        "parameters": params,
        # How far the databases were behind their logs when recovery started.
        "recovery_behind_pct": float(overrides.get(BEHIND, default_float(BEHIND))),
        "recovery_behind_source": BEHIND_SOURCE
        if BEHIND not in overrides
        else "set with --set recovery-behind-pct",
        "phases": phases,
        "interrupted": any(p["interrupted"] for p in phases)
        or any(r.stopped_after for r in reports),
        "verdict": {
            "result": "pass" if ok else "fail",
            "phases_run": done,
        },
    }


# The published table's rows: (label, key, format); a phase prints those it has.
ROWS = (
    ("Database reads/s", "db_reads_s", "{:,.3f}"),
    ("Database writes/s", "db_writes_s", "{:,.3f}"),
    ("Database reads avg bytes", "db_read_avg_bytes", "{:,.0f}"),
    ("Database writes avg bytes", "db_write_avg_bytes", "{:,.0f}"),
    ("Database reads avg latency (ms)", "db_read_ms", "{:.3f}"),
    ("Database writes avg latency (ms)", "db_write_ms", "{:.3f}"),
    ("Log reads/s", "log_reads_s", "{:,.3f}"),
    ("Log reads avg bytes", "log_read_avg_bytes", "{:,.0f}"),
    ("Log writes/s", "log_writes_s", "{:,.3f}"),
    ("Log writes avg bytes", "log_write_avg_bytes", "{:,.0f}"),
    ("Log writes avg latency (ms)", "log_write_ms", "{:.3f}"),
    ("MB read/s", "backup_mb_s", "{:,.3f}"),
    ("Log files replayed", "logs_replayed", "{:,}"),
    ("Replay seconds", "replay_s", "{:,.3f}"),
    ("Log files replayed/s", "logs_per_s", "{:,.3f}"),
    ("Pages named by the log", "pages_named", "{:,}"),
    ("Pages current (read only)", "pages_current", "{:,}"),
    ("Pages redone (behind)", "pages_redone", "{:,}"),
    ("Database pages read", "pages_read", "{:,.0f}"),
    ("Database pages written", "pages_written", "{:,.0f}"),
)
# Rows that say nothing in a phase (always zero there) are left out of its table.
SKIP = {
    "backup": {"db_writes_s", "db_write_avg_bytes", "db_write_ms", "log_reads_s",
               "log_read_avg_bytes", "log_writes_s", "log_write_avg_bytes", "log_write_ms"},
    "soft-recovery": {"log_writes_s", "log_write_avg_bytes", "log_write_ms"},
    "performance": {"log_reads_s", "log_read_avg_bytes"},
    "stress": {"log_reads_s", "log_read_avg_bytes"},
}  # fmt: skip


def phase_rows(phase: dict) -> list[tuple[str, list[str]]]:
    """(label, one cell per database) for the rows this phase has."""
    dbs = phase["databases"]
    out = []
    for label, key, fmt in ROWS:
        if key in SKIP.get(phase["phase"], set()) or not any(key in d for d in dbs):
            continue
        out.append((label, [fmt.format(d[key]) if key in d else "-" for d in dbs]))
    return out


PARAMS = (
    ("Test", "test"),
    ("Databases", "databases"),
    ("Mailboxes", "mailboxes"),
    ("IOPS per mailbox", "iops_per_mailbox"),
    ("Mailbox size (MB)", "mailbox_size_mb"),
    ("Threads per database", "threads"),
    ("Database copies", "copies"),
    ("Test duration (s)", "duration"),
    ("Database cache (MB)", "cache_max_mb"),
    ("Database behind the log at recovery start (% of the test's log)", "recovery_behind_pct"),
    ("  why that value", "recovery_behind_source"),
    ("Profile", "profile"),
    ("Sequence", "sequence"),
)


def parameters(rep: dict) -> list[tuple[str, str]]:
    p = {**rep["parameters"], "test": rep["test"], "sequence": rep["sequence"]}
    if "recovery_behind_pct" in rep:
        p["recovery_behind_pct"] = rep["recovery_behind_pct"]
        p["recovery_behind_source"] = rep.get("recovery_behind_source", "")
    return [(label, str(p[k])) for label, k in PARAMS if k in p]


def render(rep: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    head = f"iotape workload esrp · sequence {rep['sequence']}"
    if rep["interrupted"]:
        head += " · [yellow]interrupted: partial results[/]"
    con.print(f"[bold]{head}[/]")
    t = Table(title="Test parameters", title_justify="left")
    t.add_column("parameter")
    t.add_column("value", justify="right")
    for label, value in parameters(rep):
        t.add_row(label, value)
    con.print(t)
    for ph in rep["phases"]:
        dbs = ph["databases"]
        title = f"{ph['phase']} · {ph['elapsed_s']:.1f} s"
        if ph["target_tx_iops"]:
            title += (
                f" · transactional IOPS achieved {ph['achieved_tx_iops']:,.1f}"
                f" / target {ph['target_tx_iops']:,.1f}"
            )
        pt = Table(title=title, title_justify="left")
        pt.add_column("per database")
        for d in dbs:
            pt.add_column(f"db {d['db']}", justify="right")
        for label, cells in phase_rows(ph):
            pt.add_row(label, *cells)
        con.print(pt)
        v = ph["verdict"]
        colour = "green" if v["result"] == "pass" else "red"
        con.print(f"  {ph['phase']}: [{colour}]{v['result'].upper()}[/] {v['why']}")
    tt = Table(title="Totals (I/O per second, all databases)", title_justify="left")
    tt.add_column("stream")
    for ph in rep["phases"]:
        tt.add_column(ph["phase"], justify="right")
    names = sorted({k for ph in rep["phases"] for k, v in ph["total"].items() if v["count"]})
    for name in names:
        tt.add_row(
            name, *[f"{ph['total'].get(name, {}).get('per_s', 0):,.2f}" for ph in rep["phases"]]
        )
    con.print(tt)
    v = rep["verdict"]
    colour = "green" if v["result"] == "pass" else "red"
    con.print(f"verdict: [bold {colour}]{v['result'].upper()}[/] ({', '.join(v['phases_run'])})")
