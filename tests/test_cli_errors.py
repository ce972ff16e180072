"""What a user sees when a command fails: one line, a non-zero exit, never a traceback;
and for a bug, one line that says where the full report was written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from trace_helpers import chunk_offsets, make_trace, workload_records

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, env: dict | None = None, code: str | None = None):
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "iotape"]
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A trace damaged past the first batch an engine pulls (65,536 records)."""
    d = tmp_path_factory.mktemp("damaged")
    path = make_trace(d / "mid.iot", workload_records(120_000, seed=1), chunk_records=8192)
    at = chunk_offsets(path)[10]
    data = bytearray(path.read_bytes())
    data[at + 4000] ^= 0x40
    path.write_bytes(data)
    return path, at


def _cases(tmp: Path, damaged: Path) -> list[tuple[list[str], str]]:
    junk = tmp / "junk.iot"
    junk.write_bytes(b"not a trace at all, and long enough for a header")
    cut = tmp / "cut.iot"
    cut.write_bytes(damaged.read_bytes()[:100_000])
    empty = tmp / "empty"
    empty.mkdir(exist_ok=True)
    # A new store in directories to be made: a failed ingest leaves none of them.
    db = f"duckdb://{tmp / 'new' / 'dir' / 'store.duckdb'}"
    hint = f"run `iotape trace check --repair {damaged}` to keep every intact chunk"
    return [
        (["trace", "info", str(junk)], "not an iotape trace"),
        (["trace", "info", str(tmp / "missing.iot")], "no such file"),
        (["trace", "info", str(damaged)], hint),
        (["trace", "convert", str(damaged), "-o", str(tmp / "o.parquet")], hint),
        # A directory is a snapshot's files read as one trace: this one has none.
        (["trace", "check", str(empty)], "a directory without trace files"),
        (["ingest", str(damaged), "--db", db], hint),
        (["ingest", str(cut), "--db", db], "byte 100000: the file ends without a footer"),
        (
            ["ingest", str(junk), "--db", db, "--tag", "novalue"],
            "tag 'novalue': expected KEY=VALUE",
        ),
        (["replay", "plan", str(damaged), "-o", str(tmp / "jobs")], hint),
        (["import", "auto", str(junk), "-o", str(tmp / "x.iot")], str(junk)),
    ]


def test_every_bad_input_is_one_line_without_a_traceback(tmp_path: Path, damaged) -> None:
    path, at = damaged
    for args, says in _cases(tmp_path, path):
        res = _run(*args)
        what = f"iotape {' '.join(args)}: {res.stderr!r}"
        assert res.returncode not in (0, 70), what
        assert "Traceback" not in res.stderr and "Python exception" not in res.stderr, what
        errors = [line for line in res.stderr.splitlines() if line.startswith("iotape: error: ")]
        assert len(errors) == 1 and says in errors[0], what
        if "--repair" in says:
            # The damaged chunk and its byte, by name.
            assert f"{path}: byte {at}: chunk 10: payload checksum mismatch" in errors[0], what
    # Nothing half-written is left behind: no output, no store (the damaged trace
    # broke its ingest half-way), nor the store's directories.
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "x.iot").exists()
    assert not (tmp_path / "new").exists()


_BUG = (
    "import sys\n"
    "from iotape import cli\n"
    "def broken() -> None:\n"
    "    raise RuntimeError('boom\\nsecond line')\n"
    "cli.app.command('broken')(broken)\n"
    "sys.argv = ['iotape', 'broken']\n"
    "cli.main()\n"
)


def test_an_internal_error_is_one_line_and_a_report(tmp_path: Path) -> None:
    res = _run(env={"XDG_STATE_HOME": str(tmp_path)}, code=_BUG)
    assert res.returncode == 70
    [line] = res.stderr.splitlines()
    assert line.startswith("iotape: internal error: RuntimeError: boom (the full report is in ")
    [report] = (tmp_path / "iotape" / "crash").iterdir()
    assert line.endswith(f"{report})")
    text = report.read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: boom" in text
    assert "command: iotape broken" in text
