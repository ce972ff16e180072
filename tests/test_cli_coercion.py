"""iotape/coercion.py: every parameter of every command gets the value (or the
error) that typer's own pydantic coercion gives it, and plain values need no
pydantic (tests/test_arrow_probe.py: `iotape ingest` runs without it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer import _coercion
from typer._click import Context

from iotape import cli, coercion

cli._register()
ROOT = typer.main.get_command(cli.app)


def _params() -> list[tuple[str, typer.core.TyperCommand, object]]:
    out = []

    def walk(cmd, path: str) -> None:
        for p in cmd.params:
            if hasattr(p, "type_descriptor"):
                out.append((f"{path} {p.name}", cmd, p))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(ROOT, "")
    return out


PARAMS = _params()


def _values(tmp: Path, default: object) -> list[object]:
    f = tmp / "a file"
    f.write_text("x")
    text = ["x", "", "-", " 7 ", "5", "1.5", "-3", "1e3", "nan", "yes", str(f), str(tmp)]
    text += [str(tmp / "missing" / "p"), "é/ü", "all=/dev/x"]
    return [default, *text, (str(f), "y"), ("5",), 3, 0.25, True, Path(f)]


def _outcome(build, desc, param, ctx, value) -> tuple[str, object]:
    try:
        got = build(desc).coerce(value, param=param, ctx=ctx)
    except Exception as e:  # the same error, type and words, is the point
        return ("error", f"{type(e).__name__}: {getattr(e, 'message', e)}")
    return ("value", (type(got).__name__, repr(got)))  # repr: nan == nan


@pytest.mark.parametrize("where,cmd,param", PARAMS, ids=[p[0] for p in PARAMS])
def test_same_value_as_typers_own(tmp_path: Path, where, cmd, param) -> None:
    desc = param.type_descriptor
    ctx = Context(cmd)
    for value in _values(tmp_path, param.default):
        want = _outcome(_coercion.build_runtime_param, desc, param, ctx, value)
        got = _outcome(coercion.build, desc, param, ctx, value)
        assert got == want, (where, value)


def test_plain_values_do_not_need_typers_own(tmp_path: Path) -> None:
    """The cases this module is for are done by it (typer's own is never built)."""
    by_name = {p.name: p for p in ROOT.commands["ingest"].params}
    ctx = Context(ROOT.commands["ingest"])
    for name, value in (("files", ("a.iot", "b.iot")), ("db", "s.duckdb"), ("tag", ("k=v",))):
        rp = coercion.build(by_name[name].type_descriptor)
        rp.coerce(value, param=by_name[name], ctx=ctx)
        assert "_real" not in rp.__dict__, name


def test_a_bad_number_is_still_typers_error() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "iotape", "analyze", "latency", "RUN", "--min-bytes", "many"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "valid integer" in p.stderr, p.stderr
