"""The workload report: what `iotape workload run --report` writes (workload/report.py
builds it from the engine's result), `workload show`, `workload esrp` and the HTML
read, and the store's ingest makes a run of."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from base.errors import IotapeError
from schemas import streams
from schemas.documents._document import Document, OpenPart, Part, read_json
from schemas.formats import ESRP_REPORT, WORKLOAD_REPORT

Number = int | float
Count = Annotated[int, Field(ge=0)]


class StreamFigures(Part):
    """One stream of one database, as the engine measured it."""

    count: Count
    bytes: Count
    per_s: Number
    avg_bytes: Number
    lat_avg_ms: Number
    lat_max_ms: Number


class Recovery(Part):
    """One database's soft recovery (workload/src/modes.c): the replayed log's page
    references, each read and compared by its dbtime with the record; redone (and
    later written) only where the page was behind. The page figures are None in
    reports of version 1, which did not have them."""

    log_stream: int
    logs_replayed: Count
    records: Count
    runs: Count
    replay_s: Number
    logs_per_s: Number | None = None
    pages_named: Count | None = None  # page references of the replayed records
    pages_current: Count | None = None  # of those, already as the record left them
    pages_redone: Count  # of those, behind: the record applied
    pages_read: Number | None = None  # from the database (db-read bytes / page size)
    pages_written: Number | None = None  # to the database (db-write bytes / page size)


class DatabaseRow(OpenPart):
    """One database: its figures, then one key per stream it has (streams.ENGINE,
    the engine's names), then its I/O shape."""

    __pydantic_extra__: dict[str, StreamFigures] = Field(init=False)

    db: int
    mailboxes: Number
    operations: int
    # The sessions' operations by kind (insert, delete, replace, read) and a digest
    # of their sequences: with the same --seed and --transactions the same on any
    # device. None in reports of an engine before them.
    operations_by_kind: dict[str, Count] | None = None
    operations_digest: str | None = None
    closed_logs: int
    cache: dict[str, Any]
    # The log stream this run wrote (its first generation; 0: none) and the earlier
    # runs' log files it kept or removed for room.
    log_stream: int
    logs_kept: int
    logs_removed: int
    recovery: Recovery | None = None  # a soft-recovery phase only
    shape: dict[str, Number | None]

    @model_serializer(mode="wrap")
    def _shape_last(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        if "shape" in out:
            out["shape"] = out.pop("shape")
        return out

    @property
    def streams(self) -> dict[str, StreamFigures]:
        return dict(self.__pydantic_extra__ or {})

    def stream(self, name: str) -> StreamFigures | None:
        return (self.__pydantic_extra__ or {}).get(name)


class TotalFigures(Part):
    count: Count
    bytes: Count
    per_s: Number
    mb_per_s: Number


class ShapeRow(Part):
    figure: str
    engine: Number | None
    published: Number | None
    deviation: Number | None


class Shape(Part):
    published_profile: str | None
    rows: list[ShapeRow]


class Check(Part):
    """One check of the verdict (schemas/jetstress.py's Check)."""

    db: int | None = None
    check: str
    value: Number | None = None
    limit: Number
    relation: str | None = None
    requests: int | None = None
    passed: bool | None = Field(alias="pass")
    information: bool | None = None  # LoadSim MMB2: a Jetstress check shown only


class Verdict(Part):
    result: str  # pass, fail, n/a; "not measured" (LoadSim MMB2)
    benchmark: str | None = None  # LoadSim MMB2: what it is judged as, and why not here
    criterion: str | None = None
    why: str | None = None
    thresholds: dict[str, Number] | None
    checks: list[Check]
    jetstress_information: str | None = None


class WorkloadReport(Document):
    FORMAT = WORKLOAD_REPORT
    WHAT = "workload report"

    format: str = WORKLOAD_REPORT.id
    version: int = WORKLOAD_REPORT.version
    mode: str
    interrupted: bool
    elapsed_s: Number
    load_s: Number
    config: dict[str, Any]  # WorkloadConfig.metadata(): also a recorded trace's metadata
    threads_final: int | None
    # Non-empty when completions were held to emulated latencies: then the latencies
    # and the verdict describe the emulated device, not the real one.
    emulated_latency_ms: dict[str, Number]
    log_flushes: list[dict[str, Any]]
    auto_tuning: list[Any]
    target_tx_iops: Number | None
    achieved_tx_iops: Number
    databases: list[DatabaseRow]
    # Per storage group: its databases, log path, commits and log I/O (the engine's
    # result); a group's log I/O is on its first database's rows.
    storage_groups: list[dict[str, Any]]
    tier: dict[str, Any] | None  # --ioengine tiered: placement totals and hit ratios
    total: dict[str, TotalFigures]
    shape: Shape
    verdict: Verdict
    stopped_after: bool | None = None  # an ESRP phase the sequence stopped after (Ctrl-C)


def _v1(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 1: a soft recovery had no page figures but pages_redone."""
    return {**doc, "version": WORKLOAD_REPORT.version}


WorkloadReport.UPGRADES = {1: _v1}


def parse(doc: Any, where: str) -> WorkloadReport:
    """A report from JSON values; `where` names it in errors."""
    if isinstance(doc, dict) and doc.get("format") == ESRP_REPORT.id:
        stem, suffix = Path(where).stem, Path(where).suffix
        names = ", ".join(f"{stem}.{p.get('phase')}{suffix}" for p in doc.get("phases") or [])
        raise IotapeError(
            f"{where}: an ESRP sequence report; ingest the phases' reports beside it: {names}"
        )
    if isinstance(doc, dict) and "format" not in doc:
        raise IotapeError(
            f'{where}: not a workload report (no "format": "{WORKLOAD_REPORT.id}"); '
            "`iotape workload run --report OUT.json` writes one"
        )
    rep = WorkloadReport.parse(doc, where)
    if not rep.databases:
        raise IotapeError(f"{where}: field 'databases': empty")
    for i, db in enumerate(rep.databases):
        for name in streams.REPORTED:
            if db.stream(name) is None:
                raise IotapeError(f"{where}: field 'databases.{i}.{name}': missing")
    return rep


def load(path: Path) -> WorkloadReport:
    return parse(read_json(path, WorkloadReport.WHAT), str(path))


def text(rep: WorkloadReport) -> str:
    """The report as `--report` writes it (one space of indent)."""
    return json.dumps(rep.data(), indent=1) + "\n"
