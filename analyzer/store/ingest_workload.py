"""Ingest of a workload report (`iotape workload run --report OUT.json`).

The report (workload/report.py, format schemas.formats.WORKLOAD_REPORT)
becomes a run of kind `workload`: its configuration, verdict and totals in the
run's parameters, one `workload_reports` row per database plus `total`, and one
`workload_streams` row per database and stream plus the totals per stream.

A report holds no events, host or start time. When a trace of the same run
(`--record`) is already in the store, its header's metadata is the report's
`config` (both are `WorkloadConfig.metadata()`): the report is linked to it
(tag `trace=RUN`, `parameters.trace_run_id`) and takes its host, kernel and
start. Otherwise the start is estimated as the report's mtime minus the run's
length, and `parameters.start_from` says so.

A phase of an ESRP sequence (`iotape workload esrp`, config `sequence`) carries
the sequence id in `parameters.sequence` and the tag `sequence=ID`, which links
its phases (and their traces, whose header metadata has the same id).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyzer.store import catalog
from analyzer.store.catalog import sequence_tags
from analyzer.store.interface import Store
from schemas.documents import workload_report
from schemas.documents.workload_report import DatabaseRow, StreamFigures, WorkloadReport

TRACE_KINDS = ("capture", "import")


class WorkloadSource:
    """A workload report, read and checked field by field (workload_report.load)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.report = read_report(path)
        self.mtime_ns = path.stat().st_mtime_ns

    def describe(self, store: Store) -> dict[str, Any]:
        rep = self.report
        elapsed_ns = int(rep.elapsed_s * 1e9)
        params: dict[str, Any] = {
            "format": rep.format,
            "version": rep.version,
            "mode": rep.mode,
            "interrupted": rep.interrupted,
            "elapsed_s": rep.elapsed_s,
            "config": rep.config,
            "threads_final": rep.threads_final,
            "auto_tuning": rep.auto_tuning,
            "target_tx_iops": rep.target_tx_iops,
            "achieved_tx_iops": rep.achieved_tx_iops,
            "verdict": rep.verdict.result,
            "shape": rep.shape.data(),
            "start_from": "report mtime - elapsed",
        }
        seq = sequence_tags(rep.config)
        if seq:
            params["sequence"] = seq["sequence"]
        fields: dict[str, Any] = {
            "kind": "workload",
            "start_ns": max(0, self.mtime_ns - elapsed_ns),
            "duration_ns": elapsed_ns,
            "parameters": params,
            "tags": dict(seq),
        }
        trace = _recorded_trace(store, rep.config, self.mtime_ns)
        if trace is not None:
            params["trace_run_id"] = trace["id"]
            params["start_from"] = f"trace run {trace['id']}"
            fields.update(
                host=trace["host"],
                kernel=trace["kernel"],
                start_ns=trace["start_ns"],
                tags={**seq, "trace": trace["id"]},
            )
        return fields

    def load(self, store: Store, run_id: str, progress: Any = None) -> dict[str, Any]:
        reports = report_rows(self.report, run_id)
        streams = stream_rows(self.report, run_id)
        store.insert_rows("workload_reports", reports)
        store.insert_rows("workload_streams", streams)
        n = len(self.report.databases)
        verdict = self.report.verdict.result
        return {
            "events": 0,
            "bytes": 0,
            "duration_ns": int(self.report.elapsed_s * 1e9),
            "summary": f"workload report, {n} database{'s' if n != 1 else ''}, "
            f"{len(streams)} stream rows, verdict {verdict}",
        }

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- reading


def read_report(path: Path) -> WorkloadReport:
    """The report at `path`, every field checked (schemas/documents/workload_report.py);
    errors name the file and the field."""
    return workload_report.load(path)


# --------------------------------------------------------------------------- rows


def _figures(db: DatabaseRow, name: str) -> StreamFigures:
    s = db.stream(name)
    assert s is not None  # workload_report.load: every database has the reported streams
    return s


def report_rows(rep: WorkloadReport, run_id: str) -> list[dict[str, Any]]:
    """One row per database, then `total`: the Jetstress figures and the verdict."""
    dbs = rep.databases
    target = rep.target_tx_iops
    judged = rep.verdict.result in ("pass", "fail")
    out = []
    for db in dbs:
        checks = [c for c in rep.verdict.checks if c.db == db.db]
        verdict = ""
        if judged and checks:
            verdict = "pass" if all(c.passed for c in checks) else "fail"
        rd, wr = _figures(db, "db-read"), _figures(db, "db-write")
        lw = _figures(db, "log-write")
        out.append(
            {
                "run_id": run_id,
                "database": str(db.db),
                # The target is the whole run's; each database holds its share.
                "target_iops": float(target) / len(dbs) if target else 0.0,
                "achieved_iops": float(rd.per_s + wr.per_s),
                "db_reads_per_s": float(rd.per_s),
                "db_writes_per_s": float(wr.per_s),
                "db_read_avg_ms": float(rd.lat_avg_ms),
                "db_write_avg_ms": float(wr.lat_avg_ms),
                "log_write_avg_ms": float(lw.lat_avg_ms),
                "verdict": verdict,
                "report": json.dumps(db.data(), sort_keys=True),
            }
        )
    total = rep.total
    out.append(
        {
            "run_id": run_id,
            "database": "total",
            "target_iops": float(target or 0.0),
            "achieved_iops": float(rep.achieved_tx_iops),
            "db_reads_per_s": float(t.per_s if (t := total.get("db-read")) else 0.0),
            "db_writes_per_s": float(t.per_s if (t := total.get("db-write")) else 0.0),
            "db_read_avg_ms": _weighted(dbs, "db-read"),
            "db_write_avg_ms": _weighted(dbs, "db-write"),
            "log_write_avg_ms": _weighted(dbs, "log-write"),
            "verdict": rep.verdict.result if judged else "",
            "report": json.dumps(rep.data(), sort_keys=True),
        }
    )
    return out


def stream_rows(rep: WorkloadReport, run_id: str) -> list[dict[str, Any]]:
    """One row per database and stream the report has, then the totals per stream."""
    out = []
    for db in rep.databases:
        for name, s in db.streams.items():
            out.append(_stream_row(run_id, str(db.db), name, s))
    for name, t in rep.total.items():
        maxima = [float(m.lat_max_ms) for db in rep.databases if (m := db.stream(name))]
        row = StreamFigures(
            count=t.count,
            bytes=t.bytes,
            per_s=t.per_s,
            avg_bytes=t.bytes / t.count if t.count else 0.0,
            lat_avg_ms=_weighted(rep.databases, name),
            lat_max_ms=max(maxima, default=0.0),
        )
        out.append(_stream_row(run_id, "total", name, row))
    return out


def _stream_row(run_id: str, database: str, name: str, s: StreamFigures) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "database": database,
        "stream": name,
        "ios": int(s.count),
        "bytes": int(s.bytes),
        "per_s": float(s.per_s),
        "avg_bytes": float(s.avg_bytes),
        "lat_avg_ms": float(s.lat_avg_ms),
        "lat_max_ms": float(s.lat_max_ms),
    }


def _weighted(dbs: list[DatabaseRow], stream: str) -> float:
    """A stream's mean latency over databases, each weighted by its I/Os."""
    figures = [s for db in dbs if (s := db.stream(stream)) is not None]
    n = sum(s.count for s in figures)
    if not n:
        return 0.0
    return sum(s.count * float(s.lat_avg_ms) for s in figures) / n


# --------------------------------------------------------------------------- linking


def _recorded_trace(store: Store, config: dict, mtime_ns: int) -> dict[str, Any] | None:
    """The trace recorded with this run (`--record`), if the store has it: a capture
    whose header metadata is the report's config. Of several (the same command run
    again), the one that ended nearest to when the report was written."""
    if not config:
        return None
    hits = [
        r
        for r in catalog.all_runs(store)
        if r["kind"] in TRACE_KINDS and (r["parameters"].get("metadata") or {}) == config
    ]
    if not hits:
        return None
    return min(hits, key=lambda r: abs(r["start_ns"] + r["duration_ns"] - mtime_ns))
