"""`replay run` picks its runner (run/interface.py): HostsRunner for a plan with
hosts, LocalRunner otherwise; what the runners share lives in modules of its own,
so neither reaches the other through a function-level import."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from base.errors import IotapeError
from replayer.hosts.run import HostsRunner
from replayer.plan import build as planmod
from replayer.plan.model import Manifest
from replayer.run import execute
from replayer.run.local import LocalRunner

ROOT = Path(__file__).resolve().parents[2]


# A host's entry in plan.json (schemas/documents/plan.py HostEntry).
HOST = {
    "name": "h1",
    "address": "127.0.0.1",
    "port": 8765,
    "jobfile": "hosts/h1.fio",
    "jobs": [],
    "targets": [],
    "iologs": [],
    "iologs_sha256": None,
}


def _plan(tmp_path: Path, **extra: object) -> Manifest:
    man = {
        "format": planmod.PLAN_FORMAT,
        "version": planmod.PLAN_VERSION,
        "trace": str(tmp_path / "t.iot"),
        "mode": "exact",
        "mode_reason": None,
        "jobfile": "replay.fio",
        "anchor": None,
        "duration_s": 1.0,
        "time_scale": 1.0,
        "requests_per_job": None,
        "remap": "fit",
        "scaling": None,
        "targets": [],
        "windows": None,
        "jobs": [],
        **extra,
    }
    (tmp_path / "plan.json").write_text(json.dumps(man))
    return execute.load_manifest(tmp_path)


def test_a_plan_with_hosts_runs_on_the_hosts_else_here(tmp_path: Path) -> None:
    assert isinstance(execute.pick(tmp_path, _plan(tmp_path), []), LocalRunner)
    host = HOST
    runner = execute.pick(tmp_path, _plan(tmp_path, hosts=[host]), [], runner="lanes")
    assert isinstance(runner, HostsRunner)  # --runner is a one-host choice


def test_hosts_runner_refuses_a_recording_before_anything(tmp_path: Path) -> None:
    host = HOST
    _plan(tmp_path, hosts=[host])
    with pytest.raises(IotapeError, match="multi-host plan is measured from fio's per-I/O"):
        execute.run(tmp_path, record_to=tmp_path / "rep.iot")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("package", ["replayer/run", "replayer/hosts"])
def test_no_function_level_imports(package: str) -> None:
    late = [
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in sorted((ROOT / package).glob("*.py"))
        for f in ast.walk(ast.parse(p.read_text()))
        if isinstance(f, ast.FunctionDef)
        for n in ast.walk(f)
        if isinstance(n, ast.Import | ast.ImportFrom)
    ]
    assert not late, f"function-level imports: {late}"
