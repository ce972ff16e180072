"""`iotape ingest`'s plain lines read without typer (iotape/ingest_command.py, entered
through iotape/launch.py): each line read there gets the parameters typer gives the
command, every other line goes to typer, and the command does and prints the same
either way, errors included, without importing typer."""

from __future__ import annotations

import errno
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from trace_helpers import make_trace, workload_records

from iotape import cli, ingest_command

cli._register()
INGEST = typer.main.get_command(cli.app).commands["ingest"]

PLAIN = [
    ["a.iot"],
    ["a.iot", "b.iot"],
    ["a.iot", "--db", "x.duckdb"],
    ["--db", "duckdb:///tmp/x.duckdb", "a.iot"],
    ["a.iot", "--name", "n", "--tag", "k=v", "--tag", "j=w", "--json"],
    ["--json", "a b.iot", "dir/é.iot"],
    ["a.iot", "--tag", "no-equals"],  # the command's own error, either way
]
OTHERS = [
    [],
    [""],
    ["-"],
    ["--help"],
    ["a.iot", "-h"],
    ["a.iot", "--db"],
    ["a.iot", "--db", ""],
    ["a.iot", "--db", "--json"],
    ["a.iot", "--db=x.duckdb"],
    ["a.iot", "--name", "x", "--name", "y"],
    ["a.iot", "--json", "--json"],
    ["--", "-a.iot"],
    ["a.iot", "--bogus"],
    ["a.iot", "--tag"],
]


def _typers(args: list[str]) -> dict | None:
    try:
        ctx = INGEST.make_context("ingest", list(args))
    except Exception:  # typer's usage errors, and its help's exit
        return None
    p = ctx.params
    return {
        "files": [Path(f) for f in p["files"] or ()],
        "db": p["db"],
        "name": p["name"],
        "tag": list(p["tag"]) if p["tag"] else None,
        "as_json": p["as_json"],
    }


@pytest.mark.parametrize("args", PLAIN + OTHERS, ids=lambda a: " ".join(a) or "(none)")
def test_a_line_read_here_is_typers_reading(args: list[str]) -> None:
    got = ingest_command.parse(args)
    if args in PLAIN:
        assert got is not None  # the plain forms do not go to typer
    if got is None:
        return
    assert vars(got) == _typers(args)


def test_lines_left_to_typer_are_those_it_reads_otherwise_or_refuses() -> None:
    for args in OTHERS:
        assert ingest_command.parse(args) is None, args


def _run(entry: str, *args: str, importtime: bool = False) -> subprocess.CompletedProcess:
    """`iotape ingest ARGS` through launch.py (what users run), or through
    iotape.cli.main, which reads every line with typer."""
    code = {"launch": "from iotape.launch import main", "typer": "from iotape.cli import main"}
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else [])]
    cmd += ["-c", f"{code[entry]}; main()", "ingest", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _same(p: subprocess.CompletedProcess) -> tuple:
    # The rate and the seconds an ingest took are the only words that differ.
    out = re.sub(r", [\d,]+ events/s", "", p.stdout)
    out = re.sub(r'"seconds": [\d.e-]+', '"seconds": S', out)
    return p.returncode, out, p.stderr


def test_the_command_is_the_same_without_typer(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t.iot", workload_records(5_000, seed=2), chunk_records=700)
    stores = {}
    for entry in ("typer", "launch"):
        db = str(tmp_path / f"{entry}.duckdb")
        first = _run(entry, str(trace), "--db", db, "--tag", "k=v", "--name", "one")
        assert first.returncode == 0, first.stderr
        again = _run(entry, "--json", str(trace), "--db", db)
        errors = [
            _run(entry, str(tmp_path / "missing.iot"), "--db", db),
            _run(entry, str(trace), str(trace), "--name", "x", "--db", db),
            _run(entry, str(trace), "--tag", "no-equals", "--db", db),
            _run(entry, str(trace), "--bogus"),
        ]
        stores[entry] = [_same(p) for p in (first, again, *errors)]
        assert json.loads(again.stdout)[0]["skipped"] is True
        assert all(p.returncode != 0 and p.stderr for p in errors)
    want = [tuple(s.replace("typer.duckdb", "DB") for s in map(str, r)) for r in stores["typer"]]
    got = [tuple(s.replace("launch.duckdb", "DB") for s in map(str, r)) for r in stores["launch"]]
    assert got == want


def test_a_plain_ingest_imports_no_typer(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t.iot", workload_records(1_000, seed=3), chunk_records=500)
    db = str(tmp_path / "s.duckdb")
    p = _run("launch", str(trace), "--db", db, "--json", importtime=True)
    assert p.returncode == 0 and json.loads(p.stdout)[0]["events"] == 1_000
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if "|" in line}
    assert "analyzer.store.ingest" in imported and "typer" not in imported
    # Help is typer's, as before.
    p = _run("launch", "--help", importtime=True)
    assert p.returncode == 0 and "Usage" in p.stdout and "typer" in p.stderr


@pytest.mark.parametrize("fails", [None, KeyboardInterrupt, BrokenPipeError])
def test_the_command_ends_as_under_typer(fails, monkeypatch: pytest.MonkeyPatch) -> None:
    """Done, interrupted, or its reader gone: the exit typer's command gives."""

    def run(*args: object) -> None:
        if fails is not None:
            raise fails(errno.EPIPE, "Broken pipe") if fails is BrokenPipeError else fails()

    monkeypatch.setattr(ingest_command, "run", run)
    monkeypatch.setattr(ingest_command.os, "dup2", lambda *a: None)  # keep pytest's stdout
    codes = []
    for main in (
        lambda: INGEST.main(args=["a.iot"], prog_name="iotape ingest", standalone_mode=True),
        lambda: ingest_command.main(ingest_command.Line(files=[Path("a.iot")])),
    ):
        with pytest.raises(SystemExit) as e:
            main()
        codes.append(e.value.code or 0)
    assert codes[0] == codes[1] == {None: 0, KeyboardInterrupt: 130, BrokenPipeError: 1}[fails]
