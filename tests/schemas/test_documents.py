"""The JSON documents that cross a component boundary (schemas/documents/): what each
real writer produces validates and reads back to the same bytes; a document of
another version is read or refused in one line; a malformed field is an error of
one line naming the file and the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from base.errors import IotapeError
from replayer.plan.build import PlanOptions, plan
from schemas.documents import plan as plan_document
from schemas.documents import summary as summary_document
from schemas.documents import workload_report
from schemas.formats import REPLAY_PLAN, REPLAY_SUMMARY, WORKLOAD_REPORT

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "traces" / "workload" / "reference-20mbx-5s.iot"


def _one_line(e: pytest.ExceptionInfo[IotapeError], path: Path, *parts: str) -> None:
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    for part in parts:
        assert part in msg, msg


def _edit(path: Path, fn: Any) -> Path:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


# --------------------------------------------------------------------------- plan.json


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The reference trace planned by the replay plan library, three ways."""
    d = tmp_path_factory.mktemp("plans")
    img = d / "tgt.img"
    with img.open("wb") as f:
        f.truncate(2 << 30)
    out = {}
    for name, kw in {
        "exact": {"mode": "exact"},
        "synthetic": {"mode": "synthetic"},
        "lanes": {"mode": "exact", "layout": "lanes"},
    }.items():
        jobdir = d / name
        plan(PlanOptions(TRACE, jobdir, targets=[f"all={img}"], **kw))
        out[name] = jobdir / "plan.json"
    return out


@pytest.mark.parametrize("name", ["exact", "synthetic", "lanes"])
def test_a_written_plan_validates_and_reads_back_to_its_bytes(plans, name) -> None:
    path = plans[name]
    man = plan_document.load(path)
    assert man.format == REPLAY_PLAN.id and man.version == REPLAY_PLAN.version
    assert man.trace == str(TRACE) and man.jobs and man.targets
    assert man.lanes == (name == "lanes")
    assert man.text() == path.read_text()


@pytest.mark.parametrize("version", [0, 2, None])
def test_a_plan_of_another_version_is_refused_in_one_line(plans, tmp_path, version) -> None:
    copy = shutil.copy(plans["exact"], tmp_path / "plan.json")
    bad = _edit(copy, lambda d: d.update(version=version))
    with pytest.raises(IotapeError) as e:
        plan_document.load(bad)
    _one_line(e, bad, "field 'version'", "reads replay plans of version 1")


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda d: d["targets"][0].update(path=5), "field 'targets.0.path': expected a string"),
        (lambda d: d["jobs"][1].pop("requests"), "field 'jobs.1.requests': missing"),
        (lambda d: d.update(duration_s="long"), "field 'duration_s': expected a number"),
        (lambda d: d["targets"][0].update(writes=1), "field 'targets.0.writes': expected true"),
        (lambda d: d.update(jobfile="../x.fio"), "field 'jobfile': '../x.fio' is not a file name"),
        (lambda d: d.update(format="other"), "field 'format': 'other'"),
        (lambda d: d.update(extra=1), "field 'extra': not a field of this document"),
    ],
)
def test_a_malformed_plan_names_file_and_field(plans, tmp_path, damage, says) -> None:
    bad = _edit(shutil.copy(plans["exact"], tmp_path / "plan.json"), damage)
    with pytest.raises(IotapeError) as e:
        plan_document.load(bad)
    _one_line(e, bad, says)


def test_a_plan_that_is_not_json_or_not_there(tmp_path) -> None:
    (tmp_path / "plan.json").write_text('{"format": ')
    with pytest.raises(IotapeError, match=r"plan\.json: line 1: not JSON"):
        plan_document.load(tmp_path / "plan.json")
    with pytest.raises(IotapeError, match=r"nowhere\.json: missing"):
        plan_document.load(tmp_path / "nowhere.json")


# --------------------------------------------------------------------------- summary.json


@pytest.fixture(scope="module")
def replayed(plans, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A replay run's summary: the reference trace at ten times its speed, by fio."""
    from replayer.run import execute

    if shutil.which("fio") is None:
        pytest.skip("fio is not installed")
    d = tmp_path_factory.mktemp("replayed")
    img = d / "tgt.img"
    with img.open("wb") as f:
        f.truncate(2 << 30)
    jobdir = d / "jobs"
    plan(PlanOptions(TRACE, jobdir, mode="exact", targets=[f"all={img}"], time_scale=0.1))
    execute.run(jobdir, runner="fio")
    return jobdir / "results" / "summary.json"


def test_a_written_summary_validates_and_names_its_runner(replayed) -> None:
    doc = summary_document.load(replayed)
    assert doc.format == REPLAY_SUMMARY.id and doc.version == REPLAY_SUMMARY.version
    assert doc.runner == "fio" and doc.mode == "exact" and doc.jobs
    assert doc.text() == replayed.read_text()


def test_a_summary_from_before_versions_is_read_as_fios(replayed, tmp_path) -> None:
    def unversioned(d: dict) -> None:
        for k in ("format", "version", "runner"):
            d.pop(k)

    old = _edit(shutil.copy(replayed, tmp_path / "summary.json"), unversioned)
    doc = summary_document.load(old)
    assert doc.runner == "fio" and doc.version == REPLAY_SUMMARY.version
    newer = _edit(shutil.copy(replayed, tmp_path / "summary.json"), lambda d: d.update(version=7))
    with pytest.raises(IotapeError) as e:
        summary_document.load(newer)
    _one_line(e, newer, "field 'version': 7", "reads replay summaries of version 1")


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda d: d.update(runner="spdk"), "field 'runner'"),
        (lambda d: d["jobs"][0].update(job=None), "field 'jobs.0.job': expected a string"),
        (lambda d: d.update(record=3), "field 'record': expected a string"),
    ],
)
def test_a_malformed_summary_names_file_and_field(replayed, tmp_path, damage, says) -> None:
    bad = _edit(shutil.copy(replayed, tmp_path / "summary.json"), damage)
    with pytest.raises(IotapeError) as e:
        summary_document.load(bad)
    _one_line(e, bad, says)


# --------------------------------------------------------------------------- workload report


@pytest.fixture(scope="module")
def report_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real report: the engine with its null I/O backend, two databases, one second,
    through workload/report.py and the JSON `--report` writes."""
    from workload import engine, report

    if not engine.ENGINE.exists():
        pytest.skip(f"the workload engine is not built at {engine.ENGINE} (make setup)")
    d = tmp_path_factory.mktemp("workload")
    (d / "db").mkdir()
    (d / "log").mkdir()
    cfg = engine.WorkloadConfig(
        db_paths=[str(d / "db")], log_paths=[str(d / "log")], mailboxes=4,
        mailbox_size_mb=1, databases=2, duration=1.0, ioengine="null",
    )  # fmt: skip
    rep = report.build(engine.run(cfg))
    path = d / "report.json"
    path.write_text(workload_report.text(rep))
    return path


def test_a_written_workload_report_validates_and_reads_back_to_its_bytes(report_json) -> None:
    rep = workload_report.load(report_json)
    assert rep.format == WORKLOAD_REPORT.id and rep.version == WORKLOAD_REPORT.version
    assert len(rep.databases) == 2 and rep.databases[0].stream("db-read") is not None
    assert list(rep.databases[0].data())[-1] == "shape"  # after the streams, as written
    assert workload_report.text(rep) == report_json.read_text()


def test_a_workload_report_of_another_version_is_refused(report_json, tmp_path) -> None:
    bad = _edit(shutil.copy(report_json, tmp_path / "r.json"), lambda d: d.update(version=0))
    with pytest.raises(IotapeError) as e:
        workload_report.load(bad)
    _one_line(e, bad, "field 'version': 0; this iotape reads workload reports of version 2")


def test_a_version_1_soft_recovery_report_still_reads(report_json, tmp_path) -> None:
    """Version 1 had a soft recovery's pages_redone only: it reads, the page
    figures it did not have are None."""
    old = {"log_stream": 3, "logs_replayed": 5, "records": 997, "runs": 1614,
           "pages_redone": 236, "replay_s": 0.02}  # fmt: skip

    def v1(d: dict) -> None:
        d.update(version=1, mode="soft-recovery")
        d["databases"][0]["recovery"] = old

    rep = workload_report.load(_edit(shutil.copy(report_json, tmp_path / "r.json"), v1))
    rec = rep.databases[0].recovery
    assert rep.version == WORKLOAD_REPORT.version == 2
    assert rec is not None and rec.pages_redone == 236 and rec.logs_replayed == 5
    assert rec.pages_named is None and rec.pages_written is None


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (
            lambda d: d["databases"][1]["db-write"].update(count=-3),
            "field 'databases.1.db-write.count': expected a whole number >= 0, got -3",
        ),
        (lambda d: d["databases"][0].pop("log-write"), "field 'databases.0.log-write': missing"),
        (lambda d: d.update(interrupted="no"), "field 'interrupted': expected true or false"),
        (lambda d: d["verdict"].pop("checks"), "field 'verdict.checks': missing"),
        (lambda d: d.update(format="iotape-esrp-report", phases=[]), "an ESRP sequence report"),
    ],
)
def test_a_malformed_workload_report_names_file_and_field(
    report_json, tmp_path, damage, says
) -> None:
    bad = _edit(shutil.copy(report_json, tmp_path / "r.json"), damage)
    with pytest.raises(IotapeError) as e:
        workload_report.load(bad)
    _one_line(e, bad, says)
