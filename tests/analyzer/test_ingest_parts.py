"""`iotape ingest` of workload reports and replay job directories (issue 5).

The report comes from the workload engine run with its null I/O backend (no root,
no device) and from `report.build` on a made-up engine result; the job directory
from `iotape replay plan` and `iotape replay run` on a small synthetic trace with a
regular file as the target. Both backends, DuckDB and chDB, run every test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import need
from store_helpers import store_url
from trace_helpers import header, make_trace, workload_records

from analyzer.store import catalog, ingest_replay, queries
from analyzer.store.ingest import DATA_TABLES, ingest
from analyzer.store.opener import open_store
from base.errors import IotapeError
from recorder.tracefile import TraceWriter, open_trace
from replayer.plan.build import PlanOptions, plan
from replayer.run import execute as replay_run
from schemas.documents.workload_report import WorkloadReport
from workload import engine, report


def count(store, table: str, run_id: str) -> int:
    from schemas.tables import quote

    sql = f"SELECT count(*) FROM {quote(table)} WHERE {quote('run_id')} = "
    sql += "$r" if store.dialect == "duckdb" else "{r:String}"
    return int(store.rows(sql, {"r": run_id})[0][0])


# --------------------------------------------------------------------------- reports


def _stream(count_: int, avg: int, lat: float) -> dict:
    return {"count": count_, "bytes": count_ * avg, "per_s": count_ / 10, "avg_bytes": avg,
            "lat_avg_ms": lat, "lat_max_ms": lat * 4, "hist_log2_ns": [count_]}  # fmt: skip


def built_report(config: dict | None = None) -> dict:
    """A report from the workload's own `report.build`, two databases, one failing."""
    dbs = []
    for i, log_lat in enumerate((2.0, 12.0)):  # db 1 is over the 10 ms log write limit
        streams = {
            "db-read": _stream(1463, 38000, 5.0),
            "db-write": _stream(1000, 37000, 3.0),
            "log-write": _stream(900, 4836, log_lat),
            "bdm-read": _stream(236, 262144, 8.0),
        }
        dbs.append({"db": i, "mailboxes": 50, "operations": 1500, "closed_logs": 4,
                    "cache": {"pages": 100, "hits": 1, "misses": 2, "dirty_at_end": 0},
                    "streams": streams})  # fmt: skip
    result = {
        "format": "iotape-ese-result", "version": 1, "mode": "performance",
        "interrupted": False, "elapsed_s": 10.0, "copies": 2, "log_file_bytes": 2**20,
        "threads_final": 3, "auto": [], "databases": dbs,
        "config": config or {"mailboxes": 100, "iops_per_mailbox": 2.0, "profile": "exchange2010"},
    }  # fmt: skip
    return report.build(result).data()


def write_report(path: Path, rep: dict) -> Path:
    path.write_text(json.dumps(rep, indent=1) + "\n")  # as `workload run --report` does
    return path


@pytest.fixture(scope="module")
def engine_report(tmp_path_factory) -> Path:
    """A real report: the engine with its null I/O backend, two databases, one second."""
    need(engine.ENGINE.exists(), f"the workload engine built at {engine.ENGINE} (make setup)")
    d = tmp_path_factory.mktemp("workload")
    (d / "db").mkdir()
    (d / "log").mkdir()
    cfg = engine.WorkloadConfig(
        db_paths=[str(d / "db")],
        log_paths=[str(d / "log")],
        mailboxes=4,
        mailbox_size_mb=1,
        databases=2,
        duration=1.0,
        ioengine="null",
    )
    return write_report(d / "report.json", report.build(engine.run(cfg)).data())


def test_engine_report_is_one_workload_run(store, engine_report: Path) -> None:
    rep = json.loads(engine_report.read_text())
    r = ingest(store, engine_report, tags={"lab": "a"})
    assert not r.skipped and r.kind == "workload" and r.events == 0
    run = catalog.resolve(store, r.run_id)
    assert run["kind"] == "workload" and run["tags"] == {"lab": "a"}
    assert run["duration_ns"] == int(rep["elapsed_s"] * 1e9)
    p = run["parameters"]
    assert p["config"] == rep["config"] and p["mode"] == rep["mode"]
    assert p["verdict"] == rep["verdict"]["result"]

    w = queries.workload_report(store, r.run_id)
    assert [d["database"] for d in w["databases"]] == ["0", "1", "total"]
    total = w["databases"][-1]
    assert total["achieved_iops"] == pytest.approx(rep["achieved_tx_iops"])
    assert total["target_iops"] == pytest.approx(rep["target_tx_iops"])
    assert total["verdict"] == rep["verdict"]["result"]
    for d, db in zip(w["databases"], rep["databases"], strict=False):
        assert d["db_read_avg_ms"] == pytest.approx(db["db-read"]["lat_avg_ms"])
        assert d["log_write_avg_ms"] == pytest.approx(db["log-write"]["lat_avg_ms"])
    by = {(s["database"], s["stream"]): s for s in w["streams"]}
    for db in rep["databases"]:
        for name in ("db-read", "db-write", "log-write"):
            assert by[(str(db["db"]), name)]["ios"] == db[name]["count"]
    for name, t in rep["total"].items():
        assert by[("total", name)]["ios"] == t["count"]
        assert by[("total", name)]["bytes"] == t["bytes"]

    again = ingest(store, engine_report)
    assert again.skipped and again.run_id == r.run_id and "already ingested" in again.message
    assert count(store, "workload_reports", r.run_id) == 3


def test_built_report_verdict_per_database(store, tmp_path: Path) -> None:
    r = ingest(store, write_report(tmp_path / "fail.json", built_report()))
    w = queries.workload_report(store, r.run_id)
    assert [(d["database"], d["verdict"]) for d in w["databases"]] == [
        ("0", "pass"),
        ("1", "fail"),
        ("total", "fail"),
    ]
    # The mean over databases is weighted by I/Os: equal counts, so the plain mean.
    assert w["databases"][-1]["log_write_avg_ms"] == pytest.approx(7.0)
    assert w["databases"][0]["target_iops"] == pytest.approx(100.0)


def test_report_links_the_trace_recorded_with_it(store, tmp_path: Path) -> None:
    config = {"mailboxes": 100, "iops_per_mailbox": 2.0, "profile": "exchange2010", "seed": 7}
    trace = tmp_path / "ex.iot"
    with TraceWriter(trace, header(metadata=config), chunk_records=100) as w:
        w.write(workload_records(500, seed=4))
        w.close({"stop_reason": "command-exit", "lost": {}, "pre_start": 0})
    other = make_trace(tmp_path / "other.iot", workload_records(50, seed=5))
    t = ingest(store, trace)
    ingest(store, other)
    r = ingest(store, write_report(tmp_path / "ex.json", built_report(config)))
    run = catalog.resolve(store, r.run_id)
    assert run["tags"] == {"trace": t.run_id}
    assert run["parameters"]["trace_run_id"] == t.run_id
    assert (run["host"], run["start_ns"]) == ("lab1", header()["wall_start_ns"])
    # No trace with the report's config: no link, the start estimated from the file.
    lone = ingest(store, write_report(tmp_path / "lone.json", built_report()))
    run = catalog.resolve(store, lone.run_id)
    assert run["tags"] == {} and "mtime" in run["parameters"]["start_from"]


def test_esrp_phases_ingest_as_runs_linked_by_sequence(store, tmp_path: Path) -> None:
    """`iotape workload esrp`: each phase's report (and trace) is a run of its own,
    tagged with the sequence; the combined report says what to ingest instead."""
    from workload import esrp

    seq = "abc123def456"
    ids = []
    for mode in ("performance", "backup"):
        config = {"mailboxes": 100, "iops_per_mailbox": 2.0, "profile": "exchange2010",
                  "mode": mode, "sequence": seq}  # fmt: skip
        rep = built_report(config)
        ids.append(ingest(store, write_report(tmp_path / f"s.{mode}.json", rep)).run_id)
    trace = tmp_path / "s.soft-recovery.iot"
    meta = {"mode": "soft-recovery", "sequence": seq}
    with TraceWriter(trace, header(metadata=meta), chunk_records=100) as w:
        w.write(workload_records(50, seed=4))
        w.close({"stop_reason": "command-exit", "lost": {}, "pre_start": 0})
    ids.append(ingest(store, trace).run_id)
    runs = [catalog.resolve(store, i) for i in ids]
    assert len(set(ids)) == 3
    assert all(r["tags"] == {"sequence": seq} for r in runs)
    assert [r["parameters"].get("sequence") for r in runs[:2]] == [seq, seq]
    first = built_report({"mailboxes": 100, "iops_per_mailbox": 2.0, "sequence": seq})
    combined = esrp.build(seq, [WorkloadReport.model_validate(first)], "performance")
    with pytest.raises(IotapeError, match=r"ESRP sequence report; ingest .* s\.performance\.json"):
        ingest(store, write_report(tmp_path / "s.json", combined))


def _broken(rep: dict, path: list, value) -> dict:
    rep = json.loads(json.dumps(rep))
    doc = rep
    for k in path[:-1]:
        doc = doc[k]
    if value is _DELETE:
        del doc[path[-1]]
    else:
        doc[path[-1]] = value
    return rep


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "says"),
    [
        (
            ["databases", 1, "db-read", "lat_avg_ms"],
            "slow",
            r"field 'databases\.1\.db-read\.lat_avg_ms': expected a number, got 'slow'",
        ),
        (["databases", 0, "log-write"], _DELETE, r"field 'databases\.0\.log-write': missing"),
        (["databases", 0, "db"], True, r"field 'databases\.0\.db': expected an integer, got True"),
        (["elapsed_s"], None, "field 'elapsed_s': expected a number, got None"),
        (["databases"], [], "field 'databases': empty"),
        (["verdict", "result"], _DELETE, "field 'verdict.result': missing"),
        (
            ["total", "db-read", "count"],
            -1,
            r"field 'total\.db-read\.count': expected a whole number >= 0",
        ),
        (["version"], 9, "field 'version': 9; this iotape reads workload reports of version 2"),
        (["format"], "other", "not a workload report"),
    ],
)
def test_malformed_report_names_file_and_field(store, tmp_path, path, value, says) -> None:
    bad = write_report(tmp_path / "bad.json", _broken(built_report(), path, value))
    with pytest.raises(IotapeError, match=says) as e:
        ingest(store, bad)
    assert str(e.value).startswith(f"{bad}: ") and "\n" not in str(e.value)
    assert catalog.all_runs(store, ("loading", "ready")) == []


def test_report_that_is_not_json(store, tmp_path: Path) -> None:
    bad = tmp_path / "cut.json"
    bad.write_text('{"format": "iotape-workload-report",\n "version": ')
    with pytest.raises(IotapeError, match=r"cut\.json: line 2: not JSON"):
        ingest(store, bad)


# --------------------------------------------------------------------------- replays


def _source_trace(path: Path) -> Path:
    """A short trace whose requests fit a 16 MiB target and replay in ~0.3 s."""
    r = workload_records(300, seed=11)
    r["ts_queue_ns"] = np.sort(np.random.default_rng(11).integers(1, 3 * 10**8, size=300))
    r["ts_issue_ns"] = r["ts_queue_ns"] + 100
    r["ts_complete_ns"] = r["ts_issue_ns"] + 5_000
    r["offset"] = r["offset"] % (1 << 24) // 4096 * 4096
    r["error"] = 0
    return make_trace(path, r)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory) -> tuple[Path, Path]:
    """(source trace, job directory) after `replay plan` and `replay run` (no --record)."""
    need(shutil.which("fio") is not None, "fio")
    d = tmp_path_factory.mktemp("replay")
    trace = _source_trace(d / "src.iot")
    target = d / "target.img"
    with target.open("wb") as f:
        f.truncate(64 << 20)
    jobdir = d / "jobs"
    plan(PlanOptions(trace, jobdir, mode="exact", targets=[f"all={target}"]))
    replay_run.run(jobdir)
    return trace, jobdir


def _fio(jobdir: Path) -> dict:
    text = (jobdir / "results" / "fio.json").read_text()
    return json.loads(text[text.index("{") :])


def test_replay_job_directory_is_one_run_under_its_trace(store, replayed) -> None:
    trace, jobdir = replayed
    t = ingest(store, trace)
    r = ingest(store, jobdir, tags={"fw": "GDC5"})
    assert not r.skipped and r.kind == "replay" and r.events == 0
    run = catalog.resolve(store, r.run_id)
    assert run["parent_id"] == t.run_id
    assert run["parameters"]["plan"]["trace"] == str(trace.resolve())
    # Who replayed it, from summary.json (not from fio.json's "fio version").
    assert run["parameters"]["runner"] == "fio"
    assert queries.children(store, t.run_id) == [{"id": r.run_id, "name": "jobs", "kind": "replay"}]

    fio = _fio(jobdir)
    jobs = queries.fio_jobs(store, r.run_id)
    want = {
        (j["jobname"], d): j[d]["total_ios"]
        for j in fio["jobs"]
        for d in ("read", "write", "trim", "sync")
        if j[d]["total_ios"]
    }
    assert {(x["job"], x["op"]): x["ios"] for x in jobs} == want
    some = next(x for x in jobs if x["op"] in ("read", "write"))
    assert some["clat_percentiles_ns"]["99"] > 0
    # fio logs every read, write and trim (not syncs): one sample each.
    data_ios = sum(n for (_, d), n in want.items() if d != "sync")
    assert count(store, "fio_latency_samples", r.run_id) == data_ios
    lat = queries.fio_sample_latency(store, r.run_id)
    assert sum(x["ios"] for x in lat) == data_ios
    assert all(x["min_ns"] > 0 for x in lat)

    again = ingest(store, jobdir)
    assert again.skipped and again.run_id == r.run_id
    assert count(store, "fio_jobs", r.run_id) == len(want)


def test_replay_parts_agree_across_engines(replayed, tmp_path: Path) -> None:
    _, jobdir = replayed
    got = []
    for kind in ("duckdb", "chdb"):
        s = open_store(store_url(kind, tmp_path))
        try:
            r = ingest(s, jobdir)
            got.append(
                (
                    r.run_id,
                    queries.fio_jobs(s, r.run_id),
                    queries.fio_summary(s, r.run_id),
                    queries.fio_sample_latency(s, r.run_id),
                )
            )
        finally:
            s.close()
    duck, ch = got
    assert duck[:2] == ch[:2] and duck[3] == ch[3]
    # Summed IOPS: float sums in whatever order each engine adds them.
    assert duck[2] == [{**x, "iops": pytest.approx(x["iops"])} for x in ch[2]]


def test_replay_lasts_from_its_start_to_its_end_across_jobs(store, replayed) -> None:
    """Not the longest job: a plan's jobs start at their pieces' times."""
    _, jobdir = replayed
    fio = _fio(jobdir)
    run = catalog.resolve(store, ingest(store, jobdir).run_id)
    # fio: each job's elapsed, whole seconds since fio started, the same for all.
    assert run["duration_ns"] == max(j["elapsed"] for j in fio["jobs"]) * 10**9
    assert run["duration_ns"] >= max(j["job_runtime"] for j in fio["jobs"]) * 10**6
    jobs = [{"jobname": "a", "job_runtime": 10}, {"jobname": "b", "job_runtime": 12}]
    # iotape-lanes: the run's span; without either, the longest job.
    assert ingest_replay.run_duration_ns({"elapsed_ms": 250, "jobs": jobs}) == 250 * 10**6
    assert ingest_replay.run_duration_ns({"jobs": jobs}) == 12 * 10**6
    assert ingest_replay.run_duration_ns({"jobs": [{**j, "elapsed": 3} for j in jobs]}) == 3 * 10**9


def test_replay_without_its_trace_in_the_store(store, replayed) -> None:
    _, jobdir = replayed
    r = ingest(store, jobdir)
    run = catalog.resolve(store, r.run_id)
    assert run["parent_id"] == ""
    assert "is not in the store" in run["parameters"]["parent"]


def test_recorded_replay_takes_the_re_recorded_events(store, replayed, tmp_path: Path) -> None:
    """What `replay run --record OUT` leaves: summary.json names OUT (made here
    without a kernel; the real recorder's run is test_real_recorded_replay)."""
    _, jobdir = replayed
    copy = tmp_path / "jobs"
    shutil.copytree(jobdir, copy)
    rerecorded = make_trace(tmp_path / "replayed.iot", workload_records(777, seed=9))
    summary = json.loads((copy / "results" / "summary.json").read_text())
    summary["record"] = str(rerecorded)
    (copy / "results" / "summary.json").write_text(json.dumps(summary))
    plain = ingest(store, jobdir)
    r = ingest(store, copy)
    assert r.run_id != plain.run_id, "the re-recorded trace is part of the replay's content"
    assert r.events == 777 and queries.run(store, "run_events", run_id=r.run_id) == [(777,)]
    run = catalog.resolve(store, r.run_id)
    # The run lasts as its recording does (its events' times count from its start).
    with open_trace(rerecorded) as t:
        assert run["duration_ns"] == int(t.read_all()["ts_complete_ns"].max())
    assert run["host"] == "lab1" and run["header"]["host"] == "lab1"
    assert len(queries.run(store, "run_devices", run_id=r.run_id)) == 2
    # The re-recorded trace changing makes another run; it going away is a clear error.
    rerecorded.unlink()
    with pytest.raises(
        IotapeError, match=r"summary\.json: field 'record': the re-recorded trace .* missing"
    ):
        ingest(store, copy)


@pytest.mark.kernel
def test_real_recorded_replay(loop, tmp_path: Path) -> None:
    """`replay plan` onto a loop device, `replay run --record`: the run's events are
    the recorder's, and its parent is the source trace."""
    trace = _source_trace(tmp_path / "src.iot")
    jobdir = tmp_path / "jobs"
    plan(PlanOptions(trace, jobdir, mode="exact", targets=[f"all={loop.path}"]))
    replay_run.run(jobdir, record_to=tmp_path / "replayed.iot", destroy=[loop.path])
    s = open_store(store_url("duckdb", tmp_path))
    try:
        t = ingest(s, trace)
        r = ingest(s, jobdir)
        assert r.events > 0 and catalog.resolve(s, r.run_id)["parent_id"] == t.run_id
        assert queries.run(s, "run_events", run_id=r.run_id) == [(r.events,)]
        assert count(s, "fio_latency_samples", r.run_id) > 0
    finally:
        s.close()


def test_failed_replay_ingest_leaves_nothing_and_a_retry_completes(
    store, replayed, monkeypatch
) -> None:
    _, jobdir = replayed
    real = ingest_replay.ReplaySource._samples

    def dies(self):
        it = real(self)
        yield next(it)
        raise RuntimeError("killed half-way")

    monkeypatch.setattr(ingest_replay.ReplaySource, "_samples", dies)
    # The engine may wrap the error (DuckDB does); its words come through.
    with pytest.raises(Exception, match="killed half-way"):
        ingest(store, jobdir)
    assert catalog.all_runs(store) == []
    monkeypatch.setattr(ingest_replay.ReplaySource, "_samples", real)
    r = ingest(store, jobdir)
    assert not r.skipped
    fio = _fio(jobdir)
    data_ios = sum(j[d]["total_ios"] for j in fio["jobs"] for d in ("read", "write", "trim"))
    assert count(store, "fio_latency_samples", r.run_id) == data_ios
    catalog.delete(store, r.run_id, DATA_TABLES)
    assert all(count(store, t, r.run_id) == 0 for t in DATA_TABLES)


def _edit(path: Path, fn) -> None:
    path.write_text(fn(path.read_text()))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda d: (d / "plan.json").unlink(), "without plan.json: not a replay job directory"),
        (lambda d: (d / "results" / "fio.json").unlink(), r"fio\.json: missing: the plan has not"),
        (lambda d: (d / "plan.json").write_text("{"), r"plan\.json: line 1: not JSON"),
        (
            lambda d: _edit(d / "plan.json", lambda t: t.replace('"version": 1', '"version": 9')),
            r"plan\.json: field 'version': 9; this iotape reads replay plans of version 1",
        ),
        (
            lambda d: _edit(d / "plan.json", lambda t: t.replace('"mode": "exact"', '"mode": 3')),
            r"plan\.json: field 'mode': expected a string",
        ),
        (
            lambda d: (d / "results" / "fio.json").write_text('{"x": 1}'),
            r"fio\.json: jobs: missing",
        ),
        (
            lambda d: (d / "results" / "lat_lat.1.log").write_text("1, 2\n"),
            r"lat_lat\.1\.log: line 1: 2 fields",
        ),
        (
            lambda d: (d / "results" / "lat_lat.1.log").write_text("1, x, 0, 4096, 0, 0\n"),
            r"lat_lat\.1\.log: not a fio latency log",
        ),
    ],
)
def test_malformed_job_directory_names_file_and_field(
    store, replayed, tmp_path, damage, says
) -> None:
    copy = tmp_path / "jobs"
    shutil.copytree(replayed[1], copy)
    damage(copy)
    with pytest.raises(IotapeError, match=says) as e:
        ingest(store, copy)
    assert str(e.value).startswith(str(copy)) and "\n" not in str(e.value)
    # A log found broken while loading leaves its run `loading` on ClickHouse: invisible.
    assert catalog.all_runs(store) == []
