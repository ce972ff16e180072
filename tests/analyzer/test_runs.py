"""`iotape ingest`, `runs list|show|delete|tag`, `export`, `db init` through the CLI (issue 5).

The commands are registered on a root app here exactly as iotape/cli.py does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import typer
from trace_helpers import make_trace, workload_records
from typer.testing import CliRunner

import schemas
from base.errors import IotapeError
from iotape.commands import db, export, ingest, runs
from recorder.tracefile import open_trace

app = typer.Typer(pretty_exceptions_enable=False)
app.command("ingest")(ingest.ingest)
app.command("export")(export.export)
app.add_typer(runs.runs_app, name="runs")
app.add_typer(db.db_app, name="db")
runner = CliRunner()


def iotape(*args: str) -> str:
    r = runner.invoke(app, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"duckdb://{tmp_path}/store.duckdb"


@pytest.fixture
def traces(tmp_path: Path) -> list[Path]:
    return [make_trace(tmp_path / f"run{i}.iot", workload_records(2_000, seed=i)) for i in range(2)]


def test_every_command_has_help_with_an_example() -> None:
    root = typer.main.get_command(app)
    paths = [("ingest",), ("export",), ("runs", "list"), ("runs", "show"), ("runs", "delete")]
    paths += [("runs", "tag"), ("db", "init")]
    for path in paths:
        cmd = root
        for name in path:
            cmd = cmd.commands[name]
        assert f"Example: iotape {' '.join(path)}" in cmd.help


def test_ingest_list_show_tag_delete(db: str, traces: list[Path]) -> None:
    out = iotape("ingest", *map(str, traces), "--db", db, "--tag", "array=A9000")
    assert "run0.iot: run" in out and "2,000 events" in out
    again = json.loads(iotape("ingest", str(traces[0]), "--db", db, "--json"))
    assert again[0]["skipped"] is True

    runs = json.loads(iotape("runs", "list", "--db", db, "--json"))
    assert [r["name"] for r in runs] == ["run0", "run1"]
    assert all(r["tags"] == {"array": "A9000"} and r["events"] == 2_000 for r in runs)

    shown = json.loads(iotape("runs", "show", "run1", "--db", db, "--json"))
    assert shown["id"] == runs[1]["id"]
    assert {d["firmware"] for d in shown["devices"]} == {"SN05", "GDC5"}
    assert sum(x["ios"] for x in shown["streams"]) == 2_000
    assert "device latency by op" in iotape("runs", "show", runs[0]["id"], "--db", db)

    iotape("runs", "tag", "run1", "fw=GDC5", "--remove", "array", "--db", db)
    tagged = json.loads(iotape("runs", "list", "--db", db, "--tag", "fw=GDC5", "--json"))
    assert [(r["name"], r["tags"]) for r in tagged] == [("run1", {"fw": "GDC5"})]

    assert "deleted run" in iotape("runs", "delete", "run0", "--yes", "--db", db)
    assert [r["name"] for r in json.loads(iotape("runs", "list", "--db", db, "--json"))] == ["run1"]
    assert "1 runs" in iotape("runs", "list", "--db", db)


def test_export_round_trips_the_events(db: str, traces: list[Path], tmp_path: Path) -> None:
    iotape("ingest", str(traces[0]), "--db", db, "--name", "base")
    out = tmp_path / "base.parquet"
    assert "2,000 events" in iotape("export", "base", "-o", str(out), "--db", db)
    table = pq.read_table(out)
    assert table.schema.names == schemas.column_names()
    assert table.schema.metadata[b"iotape.header"]
    with open_trace(traces[0]) as t:
        want = t.read_all()
    got = table.sort_by([("ts_complete_ns", "ascending")])
    order = want["ts_complete_ns"].argsort(kind="stable")
    assert got.column("offset").to_pylist() == want["offset"][order].tolist()
    # The export is itself ingestible Parquet.
    assert "2,000 events" in iotape("ingest", str(out), "--db", db)


def test_errors_are_one_line(db: str, traces: list[Path], tmp_path: Path) -> None:
    cases = [
        (["runs", "list", "--db", f"{tmp_path}/none.duckdb"], "no store here yet"),
        (["runs", "list", "--db", "nosuch://x"], "unknown scheme 'nosuch'"),
        (["runs", "show", "ghost", "--db", db], "no such run"),
        (["ingest", str(traces[0]), str(traces[1]), "--name", "x", "--db", db], "--name names"),
        (["ingest", str(traces[0]), "--tag", "novalue", "--db", db], "expected KEY=VALUE"),
        (["db", "init", "--db", db, "--cluster", "lab"], "--cluster needs a ClickHouse server"),
        (["db", "init", "--print", "--cluster", "a b"], "not a plain identifier"),
    ]
    iotape("db", "init", "--db", db)
    for args, says in cases:
        with pytest.raises(IotapeError, match=says) as e:
            runner.invoke(app, args, catch_exceptions=False)
        assert "\n" not in str(e.value)


def test_db_init_and_print(db: str) -> None:
    assert "tables and views ready" in iotape("db", "init", "--db", db)
    assert "tables and views ready" in iotape("db", "init", "--db", db)
    sql = iotape("db", "init", "--print", "--cluster", "lab")
    assert "ReplicatedMergeTree" in sql and 'ENGINE = Distributed("lab"' in sql
    assert 'CREATE TABLE IF NOT EXISTS "events"' in iotape("db", "init", "--print")


def test_workload_and_replay_runs_through_the_cli(db: str, tmp_path: Path) -> None:
    import shutil

    from conftest import need
    from test_ingest_parts import _source_trace, built_report, write_report

    from replayer.plan.build import PlanOptions, plan
    from replayer.run import execute as replay_run

    need(shutil.which("fio") is not None, "fio")
    trace = _source_trace(tmp_path / "src.iot")
    target = tmp_path / "target.img"
    with target.open("wb") as f:
        f.truncate(64 << 20)
    plan(PlanOptions(trace, tmp_path / "jobs", mode="exact", targets=[f"all={target}"]))
    replay_run.run(tmp_path / "jobs")
    rep = write_report(tmp_path / "ex.json", built_report())

    out = iotape("ingest", str(trace), str(tmp_path / "jobs"), str(rep), "--db", db)
    assert "fio jobs" in out and "workload report, 2 databases" in out
    assert "events/s" not in out.splitlines()[2], "a report has no events to rate"
    assert "nothing to do" in iotape("ingest", str(tmp_path / "jobs"), "--db", db)

    runs = json.loads(iotape("runs", "list", "--db", db, "--json"))
    assert sorted(r["kind"] for r in runs) == ["capture", "replay", "workload"]
    (replay,) = json.loads(iotape("runs", "list", "--kind", "replay", "--db", db, "--json"))
    (src,) = json.loads(iotape("runs", "list", "--kind", "capture", "--db", db, "--json"))
    assert replay["parent_id"] == src["id"]

    shown = json.loads(iotape("runs", "show", "jobs", "--db", db, "--json"))
    assert shown["parent"]["id"] == src["id"]
    assert shown["fio"]["jobs"] and shown["fio"]["latency"] and shown["fio"]["summary"]
    text = iotape("runs", "show", "jobs", "--db", db)
    assert "fio per-I/O latency by op" in text and "replays" in text
    assert "replayed by" in iotape("runs", "show", "src", "--db", db)
    text = iotape("runs", "show", "ex", "--db", db)
    assert "per database and stream" in text and "FAIL" in text
    shown = json.loads(iotape("runs", "show", "ex", "--db", db, "--json"))
    assert [d["database"] for d in shown["workload"]["databases"]] == ["0", "1", "total"]

    # Exporting a trace run still works beside the new kinds; deleting a replay
    # removes its fio rows.
    assert "300 events" in iotape("export", "src", "-o", str(tmp_path / "s.parquet"), "--db", db)
    iotape("runs", "delete", "jobs", "--yes", "--db", db)
    assert json.loads(iotape("runs", "list", "--kind", "replay", "--db", db, "--json")) == []
    with pytest.raises(IotapeError, match="--kind 'bogus': one of capture, import"):
        runner.invoke(app, ["runs", "list", "--kind", "bogus", "--db", db], catch_exceptions=False)
