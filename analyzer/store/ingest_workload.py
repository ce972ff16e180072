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
import math
from pathlib import Path
from typing import Any

from analyzer.store import catalog
from analyzer.store.interface import Store
from base.errors import IotapeError
from schemas import streams, workload_header
from schemas.formats import ESRP_REPORT, WORKLOAD_REPORT

FORMAT, VERSION = WORKLOAD_REPORT.id, WORKLOAD_REPORT.version
# The streams every database section has (workload/report.py writes them all).
REQUIRED_STREAMS = streams.REPORTED
STREAM_FIELDS = ("count", "bytes", "per_s", "avg_bytes", "lat_avg_ms", "lat_max_ms")
TRACE_KINDS = ("capture", "import")


class WorkloadSource:
    """A workload report, read and checked field by field."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.report = read_report(path)
        self.mtime_ns = path.stat().st_mtime_ns

    def describe(self, store: Store) -> dict[str, Any]:
        rep = self.report
        elapsed_ns = int(rep["elapsed_s"] * 1e9)
        params: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "mode": rep["mode"],
            "interrupted": rep["interrupted"],
            "elapsed_s": rep["elapsed_s"],
            "config": rep["config"],
            "threads_final": rep.get("threads_final"),
            "auto_tuning": rep.get("auto_tuning") or [],
            "target_tx_iops": rep["target_tx_iops"],
            "achieved_tx_iops": rep["achieved_tx_iops"],
            "verdict": rep["verdict"]["result"],
            "shape": rep.get("shape") or {},
            "start_from": "report mtime - elapsed",
        }
        seq = sequence_tags(rep["config"])
        if seq:
            params["sequence"] = seq["sequence"]
        fields: dict[str, Any] = {
            "kind": "workload",
            "start_ns": max(0, self.mtime_ns - elapsed_ns),
            "duration_ns": elapsed_ns,
            "parameters": params,
            "tags": dict(seq),
        }
        trace = _recorded_trace(store, rep["config"], self.mtime_ns)
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
        n = len(self.report["databases"])
        verdict = self.report["verdict"]["result"]
        return {
            "events": 0,
            "bytes": 0,
            "duration_ns": int(self.report["elapsed_s"] * 1e9),
            "summary": f"workload report, {n} database{'s' if n != 1 else ''}, "
            f"{len(streams)} stream rows, verdict {verdict}",
        }

    def close(self) -> None:
        pass


def sequence_tags(metadata: dict | None) -> dict[str, str]:
    """The tag linking the phases of one ESRP sequence, from a workload run's
    config or a trace header's metadata; empty for a run of its own."""
    seq = (metadata or {}).get(workload_header.SEQUENCE)
    return {"sequence": seq} if isinstance(seq, str) and seq else {}


# --------------------------------------------------------------------------- reading


def read_report(path: Path) -> dict[str, Any]:
    """The report at `path`, every field the ingest uses checked; errors name the
    file and the field."""
    try:
        rep = json.loads(path.read_text())
    except UnicodeDecodeError:
        raise IotapeError(f"{path}: not a workload report (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise IotapeError(f"{path}: line {e.lineno}: not JSON: {e.msg}") from None
    if isinstance(rep, dict) and rep.get("format") == ESRP_REPORT.id:
        names = ", ".join(
            f"{path.stem}.{p.get('phase')}{path.suffix}" for p in rep.get("phases") or []
        )
        raise IotapeError(
            f"{path}: an ESRP sequence report; ingest the phases' reports beside it: {names}"
        )
    if not isinstance(rep, dict) or rep.get("format") != FORMAT:
        raise IotapeError(
            f'{path}: not a workload report (no "format": "{FORMAT}"); '
            "`iotape workload run --report OUT.json` writes one"
        )
    if rep.get("version") != VERSION:
        raise IotapeError(
            f"{path}: version: {rep.get('version')!r}; this iotape reads workload reports "
            f"of version {VERSION}"
        )
    _field(path, rep, "mode", str)
    _field(path, rep, "interrupted", bool)
    _number(path, rep, "elapsed_s")
    _number(path, rep, "achieved_tx_iops")
    _number(path, rep, "target_tx_iops", optional=True)
    _field(path, rep, "config", dict)
    verdict = _field(path, rep, "verdict", dict)
    _field(path, verdict, "result", str, where="verdict.")
    checks = _field(path, verdict, "checks", list, where="verdict.")
    for i, c in enumerate(checks):
        if not isinstance(c, dict) or not isinstance(c.get("pass"), bool):
            raise IotapeError(f"{path}: verdict.checks[{i}].pass: expected true or false")
    dbs = _field(path, rep, "databases", list)
    if not dbs:
        raise IotapeError(f"{path}: databases: empty")
    for i, db in enumerate(dbs):
        where = f"databases[{i}]."
        if not isinstance(db, dict):
            raise IotapeError(f"{path}: databases[{i}]: expected an object")
        _field(path, db, "db", int, where=where)
        for name in REQUIRED_STREAMS:
            _stream(path, db, name, where)
        for name, s in db.items():
            if name not in REQUIRED_STREAMS and _is_stream(s):
                _stream(path, db, name, where)
    total = _field(path, rep, "total", dict)
    for name, t in total.items():
        if not isinstance(t, dict):
            raise IotapeError(f"{path}: total.{name}: expected an object")
        for k in ("count", "bytes"):
            _number(path, t, k, where=f"total.{name}.", integer=True)
        _number(path, t, "per_s", where=f"total.{name}.")
    return rep


def _is_stream(value: Any) -> bool:
    return isinstance(value, dict) and "count" in value and "lat_avg_ms" in value


def _stream(path: Path, db: dict, name: str, where: str) -> dict:
    s = _field(path, db, name, dict, where=where)
    for k in STREAM_FIELDS:
        _number(path, s, k, where=f"{where}{name}.", integer=k in ("count", "bytes"))
    return s


def _field(path: Path, doc: dict, key: str, kind: type, where: str = "") -> Any:
    if key not in doc:
        raise IotapeError(f"{path}: {where}{key}: missing")
    value = doc[key]
    # bool is an int in Python: a count of `true` is as wrong as a string.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise IotapeError(
            f"{path}: {where}{key}: expected {_KIND_NAMES[kind]}, got {_short(value)}"
        )
    return value


def _number(
    path: Path,
    doc: dict,
    key: str,
    where: str = "",
    integer: bool = False,
    optional: bool = False,
) -> None:
    if key not in doc:
        raise IotapeError(f"{path}: {where}{key}: missing")
    v = doc[key]
    if v is None and optional:
        return
    ok = isinstance(v, int | float) and not isinstance(v, bool)
    if ok and integer:
        ok = isinstance(v, int) and v >= 0
    if ok and not integer:
        ok = math.isfinite(v)
    if not ok:
        want = "a whole number >= 0" if integer else "a number"
        raise IotapeError(f"{path}: {where}{key}: expected {want}, got {_short(v)}")


_KIND_NAMES = {str: "a string", bool: "true or false", dict: "an object", list: "a list"}
_KIND_NAMES[int] = "a whole number"


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --------------------------------------------------------------------------- rows


def report_rows(rep: dict, run_id: str) -> list[dict[str, Any]]:
    """One row per database, then `total`: the Jetstress figures and the verdict."""
    dbs = rep["databases"]
    target = rep["target_tx_iops"]
    judged = rep["verdict"]["result"] in ("pass", "fail")
    out = []
    for db in dbs:
        checks = [c for c in rep["verdict"]["checks"] if c.get("db") == db["db"]]
        verdict = ""
        if judged and checks:
            verdict = "pass" if all(c["pass"] for c in checks) else "fail"
        out.append(
            {
                "run_id": run_id,
                "database": str(db["db"]),
                # The target is the whole run's; each database holds its share.
                "target_iops": float(target) / len(dbs) if target else 0.0,
                "achieved_iops": float(db["db-read"]["per_s"] + db["db-write"]["per_s"]),
                "db_reads_per_s": float(db["db-read"]["per_s"]),
                "db_writes_per_s": float(db["db-write"]["per_s"]),
                "db_read_avg_ms": float(db["db-read"]["lat_avg_ms"]),
                "db_write_avg_ms": float(db["db-write"]["lat_avg_ms"]),
                "log_write_avg_ms": float(db["log-write"]["lat_avg_ms"]),
                "verdict": verdict,
                "report": json.dumps(db, sort_keys=True),
            }
        )
    total = rep["total"]
    out.append(
        {
            "run_id": run_id,
            "database": "total",
            "target_iops": float(target or 0.0),
            "achieved_iops": float(rep["achieved_tx_iops"]),
            "db_reads_per_s": float((total.get("db-read") or {}).get("per_s", 0.0)),
            "db_writes_per_s": float((total.get("db-write") or {}).get("per_s", 0.0)),
            "db_read_avg_ms": _weighted(dbs, "db-read"),
            "db_write_avg_ms": _weighted(dbs, "db-write"),
            "log_write_avg_ms": _weighted(dbs, "log-write"),
            "verdict": rep["verdict"]["result"] if judged else "",
            "report": json.dumps(rep, sort_keys=True),
        }
    )
    return out


def stream_rows(rep: dict, run_id: str) -> list[dict[str, Any]]:
    """One row per database and stream the report has, then the totals per stream."""
    out = []
    for db in rep["databases"]:
        for name, s in db.items():
            if _is_stream(s):
                out.append(_stream_row(run_id, str(db["db"]), name, s))
    for name, t in rep["total"].items():
        count = int(t["count"])
        maxima = [
            float(db[name]["lat_max_ms"]) for db in rep["databases"] if _is_stream(db.get(name))
        ]
        lat_max = max(maxima, default=0.0)
        row = {
            "count": count,
            "bytes": t["bytes"],
            "per_s": t["per_s"],
            "avg_bytes": t["bytes"] / count if count else 0.0,
            "lat_avg_ms": _weighted(rep["databases"], name),
            "lat_max_ms": lat_max,
        }
        out.append(_stream_row(run_id, "total", name, row))
    return out


def _stream_row(run_id: str, database: str, name: str, s: dict) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "database": database,
        "stream": name,
        "ios": int(s["count"]),
        "bytes": int(s["bytes"]),
        "per_s": float(s["per_s"]),
        "avg_bytes": float(s["avg_bytes"]),
        "lat_avg_ms": float(s["lat_avg_ms"]),
        "lat_max_ms": float(s["lat_max_ms"]),
    }


def _weighted(dbs: list[dict], stream: str) -> float:
    """A stream's mean latency over databases, each weighted by its I/Os."""
    n = sum(int(db[stream]["count"]) for db in dbs if _is_stream(db.get(stream)))
    if not n:
        return 0.0
    s = sum(
        int(db[stream]["count"]) * float(db[stream]["lat_avg_ms"])
        for db in dbs
        if _is_stream(db.get(stream))
    )
    return s / n


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
