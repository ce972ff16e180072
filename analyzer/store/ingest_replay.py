"""Ingest of a replay job directory (`iotape replay plan` then `iotape replay run`).

JOBDIR (replayer/plan/build.py, run.py) becomes a run of kind `replay`:
- plan.json: the plan's parameters, and the source trace, whose run becomes the
  parent when the store has it (matched by the trace file's content hash, which
  is its run id, else by its path);
- results/fio.json: fio's JSON output, one `fio_jobs` row per job and direction
  with I/Os, and its completion-latency percentiles in `fio_percentiles`;
- results/*_lat.N.log: fio's per-I/O total-latency logs (write_lat_log,
  log_avg_msec=0, log_offset=1), N the job's place in the job file, read with
  pyarrow.csv into `fio_latency_samples`;
- results/summary.json: names the re-recorded trace (`replay run --record`); its
  events, devices and streams become the run's.
A multi-host plan (plan.json `hosts`, replayer/hosts/spec.py) has per host
hosts/HOST.fio, results/HOST/fio.json and results/HOST/*_lat.N.log: still one run,
its jobs named HOST/JOB and its devices the targets, named HOST:PATH.

The run id is the hash of those files (names and contents), so re-running the
replay in the same directory makes a new run and ingesting it twice does not.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

import schemas
from analyzer.store import catalog
from analyzer.store.interface import Store
from analyzer.store.trace_source import (
    Progress,
    file_sha256,
    load_trace,
    open_trace_source,
    source_sha256,
    trace_fields,
)
from base.errors import IotapeError
from schemas.documents import plan as plan_document
from schemas.documents import summary as summary_document
from schemas.documents.plan import HostEntry, ReplayPlan, TargetEntry
from schemas.documents.summary import HostRun, HostStart, ReplaySummary
from schemas.tables import table

DIRECTIONS = ("read", "write", "trim", "sync")
# fio's latency log: time (ms since the job's start), latency (ns), data direction,
# block size, offset (log_offset=1), priority. Without log_offset there is no offset.
LOG_COLUMNS = ("t_ms", "lat_ns", "ddir", "bytes", "offset", "prio")
LAT_LOG = re.compile(r"^(?P<prefix>.*)_lat\.(?P<n>[1-9][0-9]*)\.log$")
JOB_SECTION = re.compile(r"^\s*\[(?P<name>[^\]]+)\]\s*$")
_OP = schemas.enum("op")
# fio's enum fio_ddir (read, write, trim, sync, datasync, sync_file_range) to the
# trace record's op codes.
DDIR_TO_OP = (_OP["read"], _OP["write"], _OP["discard"], _OP["flush"], _OP["flush"], _OP["flush"])
_ARROW = {
    "string": pa.string(),
    "lstring": pa.string(),
    "json": pa.string(),
    "bool": pa.bool_(),
    "u8": pa.uint8(),
    "u16": pa.uint16(),
    "u32": pa.uint32(),
    "u64": pa.uint64(),
    "i16": pa.int16(),
    "i64": pa.int64(),
    "f64": pa.float64(),
}


def arrow_schema(table_name: str) -> pa.Schema:
    """A table's columns but `run_id`, as Arrow: what `Store.insert_batches` takes."""
    t = table(table_name)
    return pa.schema([(c.name, _ARROW[c.type]) for c in t.columns if c.name != "run_id"])


# --------------------------------------------------------------------------- the directory


def result_files(jobdir: Path) -> list[Path]:
    """The files that make up a replay's result, in a fixed order (for the hash)."""
    plan = jobdir / "plan.json"
    if not plan.is_file():
        raise IotapeError(
            f"{jobdir}: a directory without plan.json: not a replay job directory "
            "(`iotape replay plan -o DIR` makes one)"
        )
    results = jobdir / "results"
    man = _plan(jobdir)
    if man.hosts:
        return _host_files(jobdir, man.hosts)
    fio = results / "fio.json"
    if not fio.is_file():
        raise IotapeError(
            f"{fio}: missing: the plan has not been run; `iotape replay run {jobdir}` runs it"
        )
    assert man.jobfile is not None  # plan.load: a plan of one host has its job file
    files = [plan, jobdir / man.jobfile, fio]
    summary = results / "summary.json"
    if summary.is_file():
        files.append(summary)
    files += sorted(p for p in results.iterdir() if LAT_LOG.match(p.name) and p.is_file())
    record = _recorded(jobdir)
    if record is not None:
        files.append(record)
    return files


def _host_files(jobdir: Path, hosts: list[HostEntry]) -> list[Path]:
    files = [jobdir / "plan.json"]
    for h in hosts:
        fio = jobdir / "results" / h.name / "fio.json"
        if not fio.is_file():
            raise IotapeError(
                f"{fio}: missing: the plan has not been run; `iotape replay run {jobdir}` runs it"
            )
        files += [jobdir / h.jobfile, fio]
        files += sorted(p for p in fio.parent.iterdir() if LAT_LOG.match(p.name) and p.is_file())
    summary = jobdir / "results" / "summary.json"
    return files + ([summary] if summary.is_file() else [])


def _host_results(jobdir: Path, hosts: list[HostEntry]) -> tuple[dict, list[tuple[str, Path]]]:
    """Every host's fio.json as one document (jobs named HOST/JOB) and its latency
    logs as (job, path): log N of a host is the N-th job of its job file."""
    doc: dict[str, Any] = {"jobs": []}
    logs: list[tuple[str, Path]] = []
    for h in hosts:
        path = jobdir / "results" / h.name / "fio.json"
        one = _read_json(path)
        _check_fio(path, one)
        for k in ("fio version", "timestamp", "timestamp_ms", "global options"):
            doc.setdefault(k, one.get(k))
        doc["jobs"] += [{**j, "jobname": f"{h.name}/{j['jobname']}"} for j in one["jobs"]]
        names = _job_names(jobdir, h.jobfile)
        for p in sorted(path.parent.iterdir()):
            m = LAT_LOG.match(p.name)
            if m and p.is_file():
                n = int(m.group("n"))
                job = names[n - 1] if n <= len(names) else f"job{n}"
                logs.append((f"{h.name}/{job}", p))
    return doc, logs


def jobdir_sha256(jobdir: Path) -> str:
    """SHA-256 over the result files' names (relative to JOBDIR) and contents."""
    h = hashlib.sha256()
    for p in result_files(jobdir):
        try:
            name = str(p.relative_to(jobdir))
        except ValueError:
            name = "record:" + p.name  # the re-recorded trace may live elsewhere
        h.update(f"{name}\0{file_sha256(p)}\n".encode())
    return h.hexdigest()


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise IotapeError(f"{path}: missing") from None
    except UnicodeDecodeError:
        raise IotapeError(f"{path}: not JSON (not UTF-8 text)") from None
    try:
        # fio may print notes before its JSON in the same file.
        start = text.index("{") if path.name.startswith("fio") else 0
        return json.loads(text[start:])
    except ValueError as e:
        line = f"line {e.lineno}: " if isinstance(e, json.JSONDecodeError) else ""
        raise IotapeError(f"{path}: {line}not JSON: {getattr(e, 'msg', e)}") from None


def _plan(jobdir: Path) -> ReplayPlan:
    return plan_document.load(jobdir / "plan.json")


def _summary(jobdir: Path) -> ReplaySummary | None:
    path = jobdir / "results" / "summary.json"
    return summary_document.load(path) if path.is_file() else None


def _recorded(jobdir: Path) -> Path | None:
    """The re-recorded trace that results/summary.json names, if any."""
    summary = _summary(jobdir)
    record = summary.record if summary is not None else None
    if record is None:
        return None
    where = jobdir / "results" / "summary.json"
    if not record:
        raise IotapeError(f"{where}: field 'record': expected a path, got {record!r}")
    p = Path(record)
    if not p.is_absolute():
        p = jobdir / p
    if not p.is_file():
        raise IotapeError(
            f"{where}: field 'record': the re-recorded trace {p} is missing; put it back, or "
            'remove "record" from the summary to ingest the replay without its events'
        )
    return p


def _job_names(jobdir: Path, jobfile: str) -> list[str]:
    """Job names in the job file's order: fio numbers its logs so (1-based)."""
    names = []
    for line in (jobdir / jobfile).read_text().splitlines():
        m = JOB_SECTION.match(line)
        if m and m.group("name") != "global":
            names.append(m.group("name"))
    return names


# --------------------------------------------------------------------------- the source


class ReplaySource:
    """A replay job directory with its results, read and checked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.plan = _plan(path)
        self.summary = _summary(path)
        self.record = _recorded(path)
        self.trace = open_trace_source(self.record) if self.record is not None else None
        if self.plan.hosts:
            self.fio, self.logs = _host_results(path, self.plan.hosts)
        else:
            self.fio_path = path / "results" / "fio.json"
            self.fio = _read_json(self.fio_path)
            _check_fio(self.fio_path, self.fio)
            assert self.plan.jobfile is not None  # plan.load: one host, one job file
            names = _job_names(path, self.plan.jobfile)
            fio_names = [str(j["jobname"]) for j in self.fio["jobs"]]
            names = names if len(names) == len(fio_names) else fio_names
            numbered = sorted(
                (int(m.group("n")), p)
                for p in (path / "results").iterdir()
                if (m := LAT_LOG.match(p.name)) and p.is_file()
            )
            self.logs = [(names[n - 1] if n <= len(names) else f"job{n}", p) for n, p in numbered]
        for _, p in self.logs:
            lat_log_fields(p)

    def describe(self, store: Store) -> dict[str, Any]:
        man = self.plan
        fields: dict[str, Any] = {"kind": "replay", "header": {}}
        if self.trace is not None:
            t = trace_fields(self.trace)
            fields.update(host=t["host"], kernel=t["kernel"], start_ns=t["start_ns"])
            fields["header"] = t["header"]
        else:
            fields["start_ns"] = (
                int(self.fio.get("timestamp_ms") or 0) * 1_000_000
                or int(self.fio.get("timestamp") or 0) * 1_000_000_000
            )
        fields["duration_ns"] = run_duration_ns(self.fio)
        parent = _parent(store, man.trace)
        fields["parent_id"] = parent["id"] if parent else ""
        fields["parameters"] = {
            # The storage-group layout only where the plan has groups (issue 22).
            "plan": man.parameters(),
            "jobs": len(self.fio["jobs"]),
            "fio_version": self.fio.get("fio version", ""),
            "global_options": self.fio.get("global options") or {},
            "record": str(self.record) if self.record else None,
            # Who replayed it (summary.json's runner): fio or iotape-lanes, whose JSON
            # output imitates fio's; None where the plan ran without a summary.
            "runner": self.summary.runner if self.summary else None,
            "anchor": self.summary.anchor.data() if self.summary and self.summary.anchor else None,
            "parent": "" if parent else f"source trace {man.trace} is not in the store",
        }
        if man.hosts:
            runs = (self.summary.hosts if self.summary else None) or {}
            fields["parameters"]["hosts"] = [
                {"name": h.name, "address": h.address, "port": h.port, "targets": h.targets}
                | {"start": start.data() if (start := _start(runs, h.name)) else None}
                for h in man.hosts
            ]
        if self.trace is not None:
            fields["parameters"]["recorded"] = {
                "recorder": self.trace.header.get("recorder") or {},
                "metadata": self.trace.header.get("metadata") or {},
                "footer": self.trace.footer or {},
            }
        return fields

    def load(self, store: Store, run_id: str, progress: Progress | None) -> dict[str, Any]:
        out: dict[str, Any] = {"events": 0, "bytes": 0}
        if self.trace is not None:
            got = load_trace(store, self.trace, run_id, progress)
            # The recording's own span, as every traced run's: its events' times
            # count from its start (analyses read rates over it).
            out.update(events=got["events"], bytes=got["bytes"], duration_ns=got["duration_ns"])
        if self.trace is None and self.plan.hosts:
            # No recording: the devices are the plan's targets, each named HOST:PATH
            # (a remote device's number is not known here: they are numbered 1..N).
            store.insert_rows(
                "devices",
                [_target_device(run_id, k, t) for k, t in enumerate(self.plan.targets, start=1)],
            )
        jobs, pcts = fio_tables(self.fio)
        store.insert_batches("fio_jobs", [jobs], run_id)
        store.insert_batches("fio_percentiles", [pcts], run_id)
        samples = store.insert_batches("fio_latency_samples", self._samples(), run_id)
        out["summary"] = (
            f"replay, {len(self.fio['jobs'])} fio jobs, {samples:,} latency samples, "
            f"{out['events']:,} events re-recorded"
        )
        return out

    def _samples(self) -> Iterator[pa.RecordBatch]:
        schema = arrow_schema("fio_latency_samples")
        for job, path in self.logs:
            t = read_lat_log(path)
            if t.num_rows == 0:
                continue
            # Vectorised: fio's direction codes become the record's op codes by lookup.
            lut = pa.array(DDIR_TO_OP, pa.uint8())
            ddir = t.column("ddir").to_numpy()
            if (ddir >= len(DDIR_TO_OP)).any():
                raise IotapeError(f"{path}: data direction {int(ddir.max())} is not one fio writes")
            cols = {
                "job": pa.repeat(pa.scalar(job), t.num_rows),
                "ts_ns": pa.array(t.column("t_ms").to_numpy() * 1_000_000, pa.uint64()),
                "lat_ns": t.column("lat_ns"),
                "op": lut.take(pa.array(ddir)),
                "bytes": t.column("bytes"),
                "offset": t.column("offset")
                if "offset" in t.column_names
                else pa.repeat(pa.scalar(0, pa.uint64()), t.num_rows),
            }
            table_ = pa.table({k: cols[k] for k in schema.names}).cast(schema)
            yield from table_.to_batches(max_chunksize=65_536)

    def close(self) -> None:
        if self.trace is not None:
            self.trace.close()


def _start(runs: dict[str, HostRun], host: str) -> HostStart | None:
    run = runs.get(host)
    return run.start if run is not None else None


def _target_device(run_id: str, k: int, t: TargetEntry) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "dev": k,
        "name": t.path,
        "model": "",
        "firmware": "",
        "rotational": False,
        "logical_block_size": t.block_size,
        "capacity_bytes": t.size or 0,
        "partition_name": "",
        "partition_start_bytes": 0,
    }


def lat_log_fields(path: Path) -> int:
    """How many fields a fio latency log has (0: empty); an error for another layout.
    Checked before the ingest starts, so a wrong file stops it before any insert."""
    with path.open("rb") as f:
        first = f.readline().decode(errors="replace")
    if not first:
        return 0
    ncols = first.count(",") + 1
    if ncols not in (5, 6):
        raise IotapeError(
            f"{path}: line 1: {ncols} fields; a fio latency log has 5 "
            "(time, latency, direction, size, priority) or 6 (with log_offset=1)"
        )
    return ncols


def read_lat_log(path: Path) -> pa.Table:
    """One fio latency log as Arrow (pyarrow.csv: no per-row Python)."""
    ncols = lat_log_fields(path)
    if ncols == 0:
        return pa.table({c: pa.array([], pa.uint64()) for c in ("t_ms", "lat_ns", "ddir")})
    names = list(LOG_COLUMNS) if ncols == 6 else [c for c in LOG_COLUMNS if c != "offset"]
    types = {"t_ms": pa.uint64(), "lat_ns": pa.uint64(), "ddir": pa.uint8(), "bytes": pa.uint32()}
    if ncols == 6:
        types["offset"] = pa.uint64()
    try:
        return pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=names),
            convert_options=pacsv.ConvertOptions(column_types=types, include_columns=[*types]),
        )
    except pa.ArrowInvalid as e:
        raise IotapeError(f"{path}: not a fio latency log: {str(e).splitlines()[0]}") from None


# --------------------------------------------------------------------------- fio JSON


def run_duration_ns(fio: dict) -> int:
    """How long the replay ran, across all its jobs. A job's `job_runtime` counts
    from its own first I/O, and the jobs of a plan start at their pieces' times,
    so the longest job is not the run (it made replay IOPS ~2.8x too high):
    iotape-lanes reports the run's span (`elapsed_ms`); fio each job's `elapsed`,
    whole seconds since fio started, the same for every job. The longest job only
    where neither is there (iotape-lanes before it reported its span)."""
    if isinstance(fio.get("elapsed_ms"), int) and fio["elapsed_ms"] > 0:
        return int(fio["elapsed_ms"]) * 1_000_000
    elapsed = [j.get("elapsed") for j in fio["jobs"]]
    if elapsed and all(isinstance(e, int) and e > 0 for e in elapsed):
        return max(elapsed) * 1_000_000_000
    return max((int(j.get("job_runtime") or 0) for j in fio["jobs"]), default=0) * 1_000_000


def _check_fio(path: Path, doc: Any) -> None:
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise IotapeError(f"{path}: jobs: missing; not fio's JSON output (--output-format=json)")
    for i, j in enumerate(doc["jobs"]):
        if not isinstance(j, dict) or not isinstance(j.get("jobname"), str):
            raise IotapeError(f"{path}: jobs[{i}].jobname: missing")
        for d in DIRECTIONS:
            s = j.get(d)
            if s is None:
                continue
            if not isinstance(s, dict):
                raise IotapeError(f"{path}: jobs[{i}].{d}: expected an object")
            ios = s.get("total_ios", 0)
            if not isinstance(ios, int) or isinstance(ios, bool) or ios < 0:
                raise IotapeError(f"{path}: jobs[{i}].{d}.total_ios: expected a count, got {ios!r}")


def fio_tables(doc: dict) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """fio's JSON output as `fio_jobs` and `fio_percentiles` batches: one job row per
    job and direction that did I/O, its completion-latency percentiles (for sync,
    fio reports total latency only)."""
    jobs: dict[str, list] = {n: [] for n in arrow_schema("fio_jobs").names}
    pcts: dict[str, list] = {n: [] for n in arrow_schema("fio_percentiles").names}
    for j in doc["jobs"]:
        name = str(j["jobname"])
        options = json.dumps(j.get("job options") or {}, sort_keys=True)
        for d in DIRECTIONS:
            s = j.get(d) or {}
            if not s.get("total_ios"):
                continue
            lat = s.get("lat_ns") or {}
            row = {
                "job": name,
                "op": d,
                "ios": int(s["total_ios"]),
                "bytes": int(s.get("io_bytes") or 0),
                "runtime_ms": int(s.get("runtime") or j.get("job_runtime") or 0),
                "iops": float(s.get("iops") or 0.0),
                "bw_bytes": float(s.get("bw_bytes") or 0.0),
                "lat_min_ns": int(lat.get("min") or 0),
                "lat_max_ns": int(lat.get("max") or 0),
                "lat_mean_ns": float(lat.get("mean") or 0.0),
                "lat_stddev_ns": float(lat.get("stddev") or 0.0),
                "options": options,
            }
            for k, v in row.items():
                jobs[k].append(v)
            clat = s.get("clat_ns") or {}
            table_ = clat.get("percentile") or lat.get("percentile") or {}
            for q, v in sorted(table_.items(), key=lambda kv: float(kv[0])):
                pcts["job"].append(name)
                pcts["op"].append(d)
                pcts["percentile"].append(float(q))
                pcts["lat_ns"].append(int(v))
    return (
        pa.RecordBatch.from_pydict(jobs, schema=arrow_schema("fio_jobs")),
        pa.RecordBatch.from_pydict(pcts, schema=arrow_schema("fio_percentiles")),
    )


# --------------------------------------------------------------------------- the parent


def _parent(store: Store, trace: str) -> dict[str, Any] | None:
    """The visible run of the trace the plan was made from: by the file's content
    hash (a run's id is the start of it), else by the path it was ingested from."""
    p = Path(trace)
    if p.is_file():
        run = catalog.get(store, source_sha256(p)[:12])
        if run is not None and run["state"] == "ready":
            return run
    hits = [r for r in catalog.all_runs(store) if r["source_path"] == str(p.resolve())]
    hits = [r for r in hits if r["kind"] in ("capture", "import")]
    return hits[-1] if hits else None
