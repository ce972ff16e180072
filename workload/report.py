"""The Jetstress-style report, from the engine's own completion times.

`build` turns the engine's result into the report document (the `--report`
JSON): achieved against target transactional IOPS, per database the database
and log I/O, background maintenance and log replication, total I/O, the I/O
shape next to the published run, and the verdict against the thresholds.
`render` prints it as tables; `html.py` writes the one-page HTML.

A run of the exchange2000 preset is judged as LoadSim MMB2, not Jetstress: its
pass criterion is the clients' response time, which the engine cannot measure,
so its verdict says "not measured" (contracts.toml [mmb2]) and the Jetstress
checks are shown as information only; its shape is compared as ratios with the
published server totals.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

import schemas
from schemas import jetstress, streams
from schemas.documents.workload_report import Check, WorkloadReport
from workload import profiles


def _stream(db: dict, name: str) -> dict:
    s = db["streams"].get(name)
    if not s:
        return {
            "count": 0,
            "bytes": 0,
            "per_s": 0.0,
            "avg_bytes": 0.0,
            "lat_avg_ms": 0.0,
            "lat_max_ms": 0.0,
        }
    return {k: v for k, v in s.items() if k != "hist_log2_ns"}


def _verdict(mode: str, dbs: list[dict], achieved: float, target: float | None) -> dict:
    """The Jetstress checks of each database (schemas.jetstress), then the target's."""
    if mode not in ("performance", "stress", "throughput"):
        return {"result": "n/a", "thresholds": None, "checks": []}
    judged = "stress" if mode == "stress" else "performance"
    checks: list[jetstress.Check] = []
    for db in dbs:
        figures = {
            s: jetstress.Figures(db[s]["count"], db[s]["lat_avg_ms"], db[s]["lat_max_ms"])
            for s in streams.REPORTED
        }
        checks += jetstress.checks(judged, figures, db=db["db"])
    if target:
        checks.append(jetstress.target_check(achieved, target))
    ok = all(c["pass"] for c in checks)
    return {"result": "pass" if ok else "fail", "thresholds": jetstress.thresholds(judged),
            "checks": checks}  # fmt: skip


def _mmb2_verdict(jet: dict) -> dict:
    """LoadSim MMB2's verdict: its criterion cannot be measured here; the
    Jetstress checks stay, marked as information (they judge nothing)."""
    m = schemas.contracts()["mmb2"]
    return {
        "result": m["result"],
        "benchmark": m["benchmark"],
        "criterion": m["criterion"],
        "why": m["why"],
        "thresholds": jet["thresholds"],
        "checks": [{**c, "information": True} for c in jet["checks"]],
        "jetstress_information": jet["result"],
    }


def _shape_rows(shape: dict, pub: dict, extra: dict) -> list[dict]:
    """Engine against published per figure; `extra`: MMB2's further figures."""
    mine = {**shape, **extra}
    keys = (*profiles.SHAPE_KEYS, *extra)
    return [
        {
            "figure": k,
            "engine": mine[k],
            "published": pub.get(k),
            "deviation": profiles.deviation(mine[k], pub.get(k)),
        }
        for k in keys
    ]


def _achieved(result: dict, totals: dict) -> float:
    """Transactional IOPS over the measurement window: start of the load to its
    stop, without the clean shutdown's final flush (whose writes are no load).
    A result without the window (an older engine) counts everything."""
    load_s = result.get("load_s")
    dbs = result["databases"]
    if load_s and all("tx_ios_load" in d for d in dbs):
        return sum(d["tx_ios_load"] for d in dbs) / load_s
    secs = result["elapsed_s"]
    tx = sum(totals[s]["count"] for s in streams.TRANSACTIONAL)
    return tx / secs if secs > 0 else 0.0


def check_line(c: Check) -> str:
    """One check as it reads: `achieved 60.1 >= target 60.0`, `db-read avg ms 3.2 <= limit 20`."""
    rel = c.relation or "<="
    holds = rel if c.passed else {"<=": ">", ">=": "<"}[rel]
    where = f"db {c.db}: " if c.db is not None else ""
    if c.check == jetstress.TARGET_CHECK:
        return f"{where}achieved {c.value or 0:,.1f} {holds} target {c.limit:,.1f}"
    return f"{where}{c.check} {c.value or 0:.3f} {holds} limit {c.limit}"


def _recovery(d: dict, result: dict, secs: float) -> dict:
    """A database's soft recovery: the engine's counts, and what they mean in pages.
    Every page a replayed record names is read (from the cache or the disk) and
    compared; only those behind are redone and later written (coalesced)."""
    rec = dict(d["recovery"])
    page = result.get("page_bytes") or 0
    for key, stream in (("pages_read", "db-read"), ("pages_written", "db-write")):
        nbytes = d["streams"].get(stream, {}).get("bytes", 0)
        rec[key] = nbytes / page if page else None
    if "pages_named" in rec:
        rec["pages_current"] = max(0, rec["pages_named"] - rec["pages_redone"])
    replay = rec.get("replay_s") or secs
    rec["logs_per_s"] = rec["logs_replayed"] / replay if replay else 0.0
    return rec


def build(result: dict) -> WorkloadReport:
    """The report document (schemas/documents/workload_report.py) of an engine result."""
    cfg = result.get("config", {})
    secs = result["elapsed_s"]
    mode = result["mode"]
    dbs: list[dict] = []
    totals: dict[str, dict] = {}
    for d in result["databases"]:
        row = {
            "db": d["db"],
            "mailboxes": d["mailboxes"],
            "operations": d["operations"],
            "operations_by_kind": d.get("operations_by_kind"),
            "operations_digest": d.get("operations_digest"),
            "closed_logs": d["closed_logs"],
            "cache": d["cache"],
            # The log stream this run wrote (its first generation; 0: none) and
            # the earlier runs' log files it kept or removed for room.
            "log_stream": d.get("log_stream", 0),
            "logs_kept": d.get("logs_kept", 0),
            "logs_removed": d.get("logs_removed", 0),
        }
        if "recovery" in d:
            row["recovery"] = _recovery(d, result, secs)
        for name in streams.ENGINE:
            row[name] = _stream(d, name)
            t = totals.setdefault(name, {"count": 0, "bytes": 0})
            t["count"] += row[name]["count"]
            t["bytes"] += row[name]["bytes"]
        counts = {k: (v["count"], v["bytes"]) for k, v in d["streams"].items()}
        row["shape"] = profiles.shape_from_counts(
            counts, result["copies"], result.get("log_file_bytes", profiles.LOG_FILE_BYTES)
        )
        dbs.append(row)
    achieved = _achieved(result, totals)
    target = None
    if mode in ("performance", "stress") and cfg:
        target = cfg["mailboxes"] * cfg["iops_per_mailbox"]
    for t in totals.values():
        t["per_s"] = t["count"] / secs if secs > 0 else 0.0
        t["mb_per_s"] = t["bytes"] / secs / 2**20 if secs > 0 else 0.0
    all_counts = {k: (v["count"], v["bytes"]) for k, v in totals.items()}
    shape = profiles.shape_from_counts(
        all_counts, result["copies"], result.get("log_file_bytes", profiles.LOG_FILE_BYTES)
    )
    pub_id = profiles.PUBLISHED_FOR.get(cfg.get("profile", ""), None)
    pub = profiles.published_shape(pub_id) if pub_id else {}
    mmb2 = profiles.is_mmb2(cfg.get("profile"))
    # MMB2's rate is per user (a mailbox); all its db I/O is transactional.
    extra = {"db_iops_per_user": achieved / cfg["mailboxes"]} if mmb2 else {}
    verdict = _verdict(mode, dbs, achieved, target)
    fields = {
        "mode": mode,
        "interrupted": result["interrupted"],
        "elapsed_s": secs,
        "load_s": result.get("load_s", secs),
        "config": cfg,
        "threads_final": result.get("threads_final"),
        "emulated_latency_ms": {
            k: v for k, v in result.get("emulated_latency_ms", {}).items() if v
        },
        "log_flushes": [d.get("log_flushes", {}) for d in result["databases"]],
        "auto_tuning": result.get("auto", []),
        "target_tx_iops": target,
        "achieved_tx_iops": achieved,
        "databases": dbs,
        "storage_groups": result.get("storage_groups", []),
        "tier": result.get("tier"),
        "total": totals,
        "shape": {"published_profile": pub_id, "rows": _shape_rows(shape, pub, extra)},
        "verdict": _mmb2_verdict(verdict) if mmb2 and verdict["checks"] else verdict,
    }
    return WorkloadReport.model_validate(fields)


def _f(x: float | None, fmt: str = "{:,.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _say_groups(con: Console, rep: WorkloadReport) -> None:
    groups = rep.storage_groups
    if len(groups) < len(rep.databases):
        con.print(
            "storage groups (a group's log on its first database's rows): "
            + "; ".join(
                f"{g['group']}: db {', '.join(str(d) for d in g['databases'])}" for g in groups
            ),
            highlight=False,
        )


def render(rep: WorkloadReport, console: Console | None = None) -> None:
    con = console or Console()
    head = f"iotape workload · {rep.mode} · {rep.elapsed_s:.1f} s"
    if rep.interrupted:
        head += " · [yellow]interrupted: partial results[/]"
    con.print(f"[bold]{head}[/]")
    if rep.emulated_latency_ms:
        emu = ", ".join(f"{k} {v:g} ms" for k, v in rep.emulated_latency_ms.items())
        con.print(
            f"[yellow]EMULATED device latency ({emu}): "
            "the latencies and the verdict are not the device's[/]"
        )
    tgt = rep.target_tx_iops
    con.print(
        f"transactional IOPS: achieved [bold]{rep.achieved_tx_iops:,.1f}[/]"
        + (f" / target {tgt:,.1f}" if tgt else "")
        + (f" · threads {rep.threads_final}" if rep.mode == "throughput" else "")
    )
    t = Table(title="Per database", title_justify="left")
    for col in ("db", "stream", "I/O/s", "avg bytes", "avg ms", "max ms"):
        t.add_column(col, justify="right" if col not in ("stream",) else "left")
    for db in rep.databases:
        for name in streams.REPORTED:
            r = db.stream(name)
            if r is None:
                continue
            t.add_row(
                str(db.db),
                name,
                _f(r.per_s),
                _f(r.avg_bytes, "{:,.0f}"),
                _f(r.lat_avg_ms, "{:.3f}"),
                _f(r.lat_max_ms, "{:.3f}"),
            )
    con.print(t)
    _say_groups(con, rep)
    _render_totals(con, rep)
    _render_shape_and_verdict(con, rep)


def _render_totals(con: Console, rep: WorkloadReport) -> None:
    b = Table(title="Background and total I/O", title_justify="left")
    for col in ("stream", "I/O", "I/O/s", "MiB/s"):
        b.add_column(col, justify="left" if col == "stream" else "right")
    for name, v in rep.total.items():
        if v.count:
            b.add_row(name, f"{v.count:,}", _f(v.per_s), _f(v.mb_per_s, "{:.3f}"))
    cnt = sum(v.count for v in rep.total.values())
    mb = sum(v.mb_per_s for v in rep.total.values())
    b.add_row(
        "[bold]total[/]",
        f"{cnt:,}",
        _f(cnt / rep.elapsed_s if rep.elapsed_s else 0),
        _f(mb, "{:.3f}"),
    )
    con.print(b)


def _render_shape_and_verdict(con: Console, rep: WorkloadReport) -> None:
    sh = Table(
        title=f"I/O shape vs published ({rep.shape.published_profile})", title_justify="left"
    )
    for col in ("figure", "engine", "published", "deviation"):
        sh.add_column(col, justify="left" if col == "figure" else "right")
    for r in rep.shape.rows:
        dev = r.deviation * 100 if r.deviation is not None else None
        sh.add_row(
            r.figure,
            _f(r.engine, "{:,.3f}"),
            _f(r.published, "{:,.3f}"),
            _f(dev, "{:+.1f} %"),
        )
    con.print(sh)
    v = rep.verdict
    colour = {"pass": "green", "fail": "red"}.get(v.result, "white")
    con.print(f"verdict: [bold {colour}]{v.result.upper()}[/]")
    if v.benchmark:
        con.print(f"  {v.benchmark}: {v.criterion}: {v.why}")
        con.print(f"  Jetstress latency checks, as information only: {v.jetstress_information}")
    for c in v.checks:
        if c.information:
            con.print(f"  information: {check_line(c)}")
        elif not c.passed or c.relation == ">=":
            con.print(f"  [{'green' if c.passed else 'red'}]{check_line(c)}[/]")
