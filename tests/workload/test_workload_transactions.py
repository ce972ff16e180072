"""`iotape workload run --transactions N`: a fixed amount of work, the same
operations for the same seed on any device (a loop device and a directory
here), the load's time covering exactly that work."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from iotape.commands.workload import app
from schemas.documents.workload_report import WorkloadReport, load

runner = CliRunner()
pytestmark = pytest.mark.kernel

PER_SESSION = 300
RUN = [
    "--profile", "exchange2013", "--mode", "throughput", "--threads", "2",
    "--mailboxes", "20", "--mailbox-size-mb", "2", "--copies", "1", "--cache-max-mb", "8",
    "--transactions", str(PER_SESSION),
]  # fmt: skip


def _run(target: str, tmp: Path, name: str, *extra: str) -> WorkloadReport:
    out = tmp / f"{name}.json"
    dest = ["--destroy-data-on", target] if target.startswith("/dev/") else []
    res = runner.invoke(
        app,
        ["run", "--db-path", target, "--log-path", target, *dest, *RUN, *extra,
         "--report", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return load(out)


def test_the_same_work_on_two_devices(loop, tmp_path: Path) -> None:
    d = tmp_path / "dir"
    d.mkdir()
    on_loop = _run(loop.path, tmp_path, "loop")
    on_dir = _run(str(d), tmp_path, "dir")
    other_seed = _run(str(d), tmp_path, "seed2", "--seed", "2")
    for rep in (on_loop, on_dir, other_seed):
        db = rep.databases[0]
        assert db.operations == 2 * PER_SESSION, "each session stops after its share"
        kinds = db.operations_by_kind or {}
        assert sum(kinds.values()) == db.operations
        assert 0 < rep.load_s <= rep.elapsed_s
        assert rep.config["transactions"] == PER_SESSION
        assert not rep.interrupted
    a, b = on_loop.databases[0], on_dir.databases[0]
    assert a.operations_by_kind == b.operations_by_kind
    assert a.operations_digest == b.operations_digest, "the same sequence, whatever the device"
    assert other_seed.databases[0].operations_digest != a.operations_digest
    # The I/O differs with the device (group commits, cache timing), the work does not;
    # reads follow the operations closely: within a third of each other.
    ra, rb = (r.databases[0].stream("db-read") for r in (on_loop, on_dir))
    assert ra and rb and 0.67 < ra.count / rb.count < 1.5
