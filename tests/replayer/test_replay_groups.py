"""Replay planning with storage groups: a group's databases share one log, which
the plan replays once per group at the sum of its databases' shares (no root needed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import DT, SDA, header
from typer.testing import CliRunner

import schemas
from base.errors import IotapeError
from iotape.commands.replay import app
from recorder.tracefile import write_trace
from replayer.plan import scale
from replayer.plan.build import PlanOptions, plan

STREAM = schemas.enum("stream")
OP = schemas.enum("op")
# Requests of each stream in the trace (4 s): what one replay at x1 issues.
COUNTS = {"db-read": 600, "db-write": 400, "log-write": 500, "log-preformat": 40, "bdm-read": 80}
LOGS = ("log-write", "log-preformat")
GROUPED = {"mailboxes": 100, "databases": 4, "storage_groups": 2}


def _trace(path: Path, meta: dict) -> Path:
    """4 s of a workload-like trace on one device, one submitter per stream."""
    rng = np.random.default_rng(2)
    r = np.zeros(sum(COUNTS.values()), dtype=DT)
    at = 0
    for name, n in COUNTS.items():
        size = 4096 if name.startswith("log") else 32768
        part = slice(at, at + n)
        r["ts_issue_ns"][part] = np.sort(rng.integers(1_000_000, 4 * 10**9, n))
        r["offset"][part] = rng.integers(0, (32 << 20) // size, n) * size
        r["bytes"][part] = size
        r["op"][part] = OP["read"] if name.endswith("read") else OP["write"]
        r["stream"][part] = STREAM[name]
        r["pid"][part] = r["tid"][part] = 100 + STREAM[name]
        at += n
    r["ts_queue_ns"] = r["ts_issue_ns"] - 1000
    r["ts_complete_ns"] = r["ts_issue_ns"] + 200_000
    r["dev"] = SDA
    r = r[np.argsort(r["ts_complete_ns"], kind="stable")]
    h = header(metadata=meta)
    h["devices"] = h["devices"][:1]
    h["streams"] = {str(v): k for k, v in STREAM.items()}
    return write_trace(path, h, r)


def _targets(tmp: Path, names: list[str]) -> list[str]:
    out = []
    for name in names:
        p = tmp / f"{name}.img"
        p.write_bytes(b"")
        os.truncate(p, 64 << 20)
        out.append(f"{name}={p}")
    return out


def _names(k: int, g: int = 0) -> list[str]:
    return [f"db{i}" for i in range(k)] + [f"sg{j}" for j in range(g)]


def _plan(tmp: Path, meta: dict, targets: list[str], out: str = "jobs", **kw) -> dict:
    t = _trace(tmp / "t.iot", meta)
    return dict(plan(PlanOptions(t, tmp / out, mode="exact", targets=targets, **kw)))


def _requests(man: dict) -> Counter:
    """Requests replayed per (owner, stream), owner "dbK" or "sgJ"."""
    out: Counter = Counter()
    for j in man["jobs"]:
        owner = f"db{j['db']}" if j["db"] is not None else f"sg{j['group']}"
        out[(owner, j["stream"])] += j["requests"]
    return out


def test_each_group_replays_its_databases_logs_on_its_own_target(tmp_path: Path) -> None:
    # 400 mailboxes on 4 databases: each database x1 of the trace's rate per
    # database (the trace is 4 databases' worth: x 1/4, times 4 for the load).
    man = _plan(tmp_path, GROUPED, _targets(tmp_path, _names(4, 2)), mailboxes=400)
    got = _requests(man)
    for d in range(4):
        assert got[(f"db{d}", "db-read")] == COUNTS["db-read"]
        assert not any(got[(f"db{d}", s)] for s in LOGS)
    # A group's log carries its two databases' logs: twice one database's share.
    for g in range(2):
        for s in LOGS:
            assert got[(f"sg{g}", s)] == 2 * COUNTS[s]
    log_targets = {j["target"] for j in man["jobs"] if j["stream"] in LOGS}
    assert log_targets == {str(tmp_path / "sg0.img"), str(tmp_path / "sg1.img")}
    assert {j["group"] for j in man["jobs"] if j["stream"] in LOGS} == {0, 1}
    assert all(j["group"] == j["db"] % 2 for j in man["jobs"] if j["db"] is not None)
    assert man["layout"] == {
        "databases": 4,
        "storage_groups": 2,
        "groups": [{"group": 0, "databases": [0, 2]}, {"group": 1, "databases": [1, 3]}],
    }
    assert man["scaling"]["storage_groups"] == 2 and man["scaling"]["from_storage_groups"] == 2
    assert len(man["targets"]) == 6


def test_fractional_group_share_is_the_sum_of_its_databases(tmp_path: Path) -> None:
    # 150 mailboxes on 6 databases in 3 groups of 2: one database x 1/4 of the
    # trace's rate (0.25 x (25/25)), its group x 1/2 (seeded thinning).
    man = _plan(
        tmp_path,
        GROUPED,
        [f"all={_targets(tmp_path, ['a'])[0][2:]}"],
        mailboxes=150,
        databases=6,
        remap="wrap",
    )
    assert man["layout"]["storage_groups"] == 3
    got = _requests(man)
    for g in range(3):
        assert got[(f"sg{g}", "log-write")] == pytest.approx(COUNTS["log-write"] / 2, rel=0.15)
    total = sum(got[(f"sg{g}", "log-write")] for g in range(3))
    assert total == pytest.approx(6 * COUNTS["log-write"] / 4, rel=0.08)


def test_db_streams_are_what_they_are_without_groups(tmp_path: Path) -> None:
    """Groups move the logs only: each database's db-read and db-write requests
    (offsets, sizes, order) are those of the same plan without groups."""
    kw = dict(mailboxes=200, databases=8, remap="wrap")
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir(), b.mkdir()
    _plan(a, GROUPED, _targets(a, _names(8, 4)), **kw)
    _plan(b, {"mailboxes": 100, "databases": 4}, _targets(b, _names(8)), **kw)

    def body(jobdir: Path, stream: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for log in sorted((jobdir / "iologs").glob(f"db*.{stream}.*log")):
            lines = [ln.split(" ", 2)[2] for ln in log.read_text().splitlines()[2:]]
            out.setdefault(log.name.split(".")[0], []).extend(
                ln for ln in lines if re.match(r"(read|write) ", ln)
            )
        return out

    for s in ("db-read", "db-write", "bdm-read"):
        ga, gb = body(a / "jobs", s), body(b / "jobs", s)
        assert set(ga) == {f"db{i}" for i in range(8)}
        assert ga == gb, s


def test_no_groups_in_the_trace_means_one_log_per_database(tmp_path: Path) -> None:
    """storage_groups absent or equal to databases: the plan of before groups, byte for byte."""
    tg = _targets(tmp_path, ["all"])
    kw = dict(mailboxes=200, databases=3, remap="wrap")
    m1 = _plan(tmp_path, {"mailboxes": 100, "databases": 2}, tg, "absent", **kw)
    m2 = _plan(tmp_path, {"mailboxes": 100, "databases": 2, "storage_groups": 2}, tg, "equal", **kw)
    assert "layout" not in m1 and "storage_groups" not in m1["scaling"]
    assert all("group" not in j for j in m1["jobs"])
    assert {j["name"].split(".")[0] for j in m1["jobs"] if j["stream"] in LOGS} == set(_names(3))
    assert "storage groups" not in m1["jobfile_text"]
    files = sorted(p.relative_to(tmp_path / "absent") for p in (tmp_path / "absent").rglob("*"))
    assert files == sorted(
        p.relative_to(tmp_path / "equal") for p in (tmp_path / "equal").rglob("*")
    )
    for f in files:
        if (tmp_path / "absent" / f).is_file():
            assert (tmp_path / "absent" / f).read_bytes() == (
                tmp_path / "equal" / f
            ).read_bytes(), f
    assert m2["jobs"] == m1["jobs"]


@pytest.mark.parametrize(
    ("meta", "k", "g", "want"),
    [
        (GROUPED, None, None, 2),  # the trace's layout
        (GROUPED, 8, None, 4),  # 2 databases per group kept
        (GROUPED, 5, None, 3),  # the last group holds one
        (GROUPED, 8, 1, 1),  # --storage-groups
        ({"mailboxes": 100, "databases": 4}, 8, None, 8),  # no groups: one log per database
        ({"mailboxes": 100, "databases": "6", "storage_groups": "2"}, 9, None, 3),  # strings
    ],
)
def test_groups_grow_with_the_databases(meta, k, g, want) -> None:
    sc = scale.resolve(meta, 200, k, None, storage_groups=g)
    assert sc is not None and sc.storage_groups == want


def test_scaling_adds_groups_and_their_log_jobs(tmp_path: Path) -> None:
    man = _plan(
        tmp_path,
        GROUPED,
        [f"all={_targets(tmp_path, ['a'])[0][2:]}"],
        mailboxes=200,
        databases=8,
        remap="wrap",
    )
    log_jobs = [j for j in man["jobs"] if j["stream"] in LOGS]
    assert {j["group"] for j in log_jobs} == {0, 1, 2, 3}
    assert all(j["db"] is None and j["name"].startswith(f"sg{j['group']}.") for j in log_jobs)
    # Each group's log has a range of the shared target of its own.
    assert len(re.findall(r"^; target sg\d: ", man["jobfile_text"], re.M)) == 4
    assert len(re.findall(r"^; target db\d: ", man["jobfile_text"], re.M)) == 8


def test_a_group_of_one_database_takes_an_sg_target(tmp_path: Path) -> None:
    tg = _targets(tmp_path, ["all", "sg1"])
    man = _plan(tmp_path, GROUPED, tg, storage_groups=4, remap="wrap", mailboxes=100)
    assert man["layout"]["groups"][1] == {"group": 1, "databases": [1]}
    sg1 = {j["name"].split(".")[0] for j in man["jobs"] if j["target"].endswith("sg1.img")}
    assert sg1 == {"db1"}
    assert {j["stream"] for j in man["jobs"] if j["target"].endswith("sg1.img")} == set(LOGS)


def test_dry_run_shows_the_layout(tmp_path: Path) -> None:
    t = _trace(tmp_path / "t.iot", GROUPED)
    res = CliRunner().invoke(
        app, ["plan", str(t), "--dry-run", "--mailboxes", "300", "--databases", "6"]
    )
    assert res.exit_code == 0, res.output
    assert "in 3 storage group(s)" in res.output
    for line in ("; storage groups: 3 ", ";   sg0: db0, db3\n", ";   sg2: db2, db5\n"):
        assert line in res.output
    assert re.search(r"^;   log-write: x 1 per group of 2$", res.output, re.M)


@pytest.mark.parametrize(
    ("args", "meta", "message"),
    [
        (["--storage-groups", "0"], GROUPED, "--storage-groups 0: must be between 1 and the 4"),
        (["--storage-groups", "5"], GROUPED, "--storage-groups 5: must be between 1 and the 4"),
        (["--target", "sg2=X"], GROUPED, "--target sg2: no storage group sg2; the plan has 2"),
        (["--target", "sg0:db-read=X"], GROUPED, "a storage group holds only its log streams"),
        (["--target", "db2:log-write=X"], GROUPED, "db2's log is storage group sg0's"),
        ([], {"databases": 2, "storage_groups": 3}, "trace storage_groups 3: must be between"),
        ([], {"databases": 2, "storage_groups": "two"}, "storage_groups='two': not a number"),
        (["--from-storage-groups", "9"], GROUPED, "--from-storage-groups 9: must be between"),
    ],
)
def test_bad_groups_give_one_line_errors(tmp_path: Path, args, meta, message) -> None:
    t = _trace(tmp_path / "t.iot", meta)
    cmd = ["plan", str(t), "-o", str(tmp_path / "j"), "--databases", "4", "--target", "all=Y"]
    res = CliRunner().invoke(app, cmd + args)
    assert isinstance(res.exception, IotapeError), res.output
    assert message in str(res.exception) and "\n" not in str(res.exception)
    assert not (tmp_path / "j").exists()


@pytest.mark.skipif(shutil.which("fio") is None, reason="needs fio")
@pytest.mark.parametrize("mode", ["exact", "synthetic"])
def test_grouped_jobs_parse_with_fio(tmp_path: Path, mode: str) -> None:
    t = _trace(tmp_path / "t.iot", GROUPED)
    jobdir = tmp_path / "jobs"
    tg = _targets(tmp_path, _names(6, 3))
    plan(PlanOptions(t, jobdir, mode=mode, mailboxes=150, databases=6, targets=tg))
    p = subprocess.run(["fio", "--parse-only", "replay.fio"], cwd=jobdir, capture_output=True)
    assert p.returncode == 0, p.stderr
    assert re.search(rb"^\[sg2\.log-write", (jobdir / "replay.fio").read_bytes(), re.M)
