"""Exchange 2000 under LoadSim MMB2: the exchange2000 preset's report says MMB2
(its criterion, client response time, is not measured; the Jetstress checks are
information only), and a short recorded run on a loop device has the published
shape (docs/workload.md, "Exchange 2000 / MMB2")."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from rich.console import Console

from workload import engine, html, mmb2, profiles, report


def _null_run(tmp_path: Path, profile: str) -> dict:
    """A second of the preset on the null backend: a report without a device."""
    db, log = tmp_path / "db", tmp_path / "log"
    db.mkdir()
    log.mkdir()
    cfg = engine.WorkloadConfig(
        db_paths=[str(db)], log_paths=[str(log)], profile=profile, mailboxes=20,
        mailbox_size_mb=2, iops_per_mailbox=2, duration=1, ioengine="null",
        **profiles.RUN_DEFAULTS.get(profile, {}),
    )  # fmt: skip
    return report.build(engine.run(cfg))


def test_mmb2_report_names_its_criterion_and_no_jetstress_verdict(tmp_path: Path) -> None:
    rep = _null_run(tmp_path, "exchange2000")
    v = rep.verdict
    assert v.benchmark == "MMB2" and v.result == "not measured"
    assert "response time" in (v.criterion or "")
    # The Jetstress checks are still there, as information, and judge nothing.
    assert v.checks and all(c.information for c in v.checks)
    assert v.jetstress_information in ("pass", "fail")
    assert rep.config["page_bytes"] == 4096 and rep.config["storage_groups"] == 1
    rows = {r.figure: r for r in rep.shape.rows}
    assert rep.shape.published_profile == profiles.MMB2_ID
    assert rows["db_iops_per_user"].published == pytest.approx(0.2217, abs=1e-4)
    assert rows["db_read_avg_bytes"].published is None  # not published

    con = Console(record=True, width=200)
    report.render(rep, con)
    text = con.export_text()
    assert "verdict: NOT MEASURED" in text and "MMB2" in text
    assert "verdict: PASS" not in text and "verdict: FAIL" not in text
    page = html.render(rep)
    assert "MMB2" in page and "NOT MEASURED" in page
    assert "class=pass>pass<" not in page and "class=fail>fail<" not in page


def test_the_preset_sets_its_run_settings_unless_given() -> None:
    from iotape.commands import workload as cli

    def cfg(**given: object) -> engine.WorkloadConfig:
        opts: dict = {"page_kb": None, "copies": None, "no_bdm": None, "recreate": False,
                      "destroy_data_on": None, "set_": None, **given}  # fmt: skip
        return cli._config(["/tmp/db"], ["/tmp/log"], **opts)

    c = cfg(profile="exchange2000")
    assert (c.page_kb, c.copies, c.bdm) == (4, 1, False)
    c = cfg(profile="exchange2000", page_kb=8, copies=2, no_bdm=False)
    assert (c.page_kb, c.copies, c.bdm) == (8, 2, True)
    c = cfg(profile="exchange2013")
    assert (c.page_kb, c.copies, c.bdm) == (32, 2, True)


def test_esrp_refuses_the_mmb2_preset(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "iotape", "workload", "esrp", "--db-path",
                        str(tmp_path), "--log-path", str(tmp_path), "--profile", "exchange2000"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and "LoadSim MMB2 has no such sequence" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_jetstress_presets_keep_their_verdict(tmp_path: Path) -> None:
    rep = _null_run(tmp_path, "exchange2010")
    assert rep.verdict.result in ("pass", "fail")
    assert "benchmark" not in rep.verdict.data()
    assert [r.figure for r in rep.shape.rows] == list(profiles.SHAPE_KEYS)
    assert "MMB2" not in html.render(rep)


def _margin(counts: dict[str, tuple[int, int]], figure: str) -> float:
    """The calibration's 15 % plus twice the window's counting noise (the
    relative standard error of a ratio of Poisson counts), which a 15 s window
    of ~1,300 db I/Os puts at ~5 % for reads per write: three seeds of this run
    gave 1.41-1.61 against the published 1.48."""
    r, w = counts.get("db-read", (0, 0))[0], counts.get("db-write", (0, 0))[0]
    log = counts.get("log-write", (0, 0))[0]
    parts = {
        "db_read_write_ratio": (r, w),
        "log_writes_per_tx_io": (log, r + w),
        "db_iops_per_user": (r + w,),
    }[figure]
    return 0.15 + 2 * math.sqrt(sum(1 / max(1, n) for n in parts))


@pytest.mark.kernel
def test_mmb2_shape_from_the_trace(loop_factory, tmp_path: Path) -> None:
    """400 users over 4 mailbox databases and a public-folder one in 2 storage
    groups, 30 s: the steady window (after 15 s, a checkpoint depth's worth of
    log) has the published ratios within the calibration's 15 % and the noise."""
    users, dbs = 400, 5
    loop = loop_factory(mmb2.device_mb(users, dbs))
    res = mmb2.calibrate(loop.path, users, 30, 15, tmp_path, databases=dbs)
    assert res["config"]["storage_groups"] == 2 and res["config"]["page_bytes"] == 4096
    assert res["config"]["copies"] == 1 and not res["config"]["bdm"]
    counts = res["window_counts"]
    assert counts["db-read"][0] > 500 and "bdm-read" not in counts
    assert "log-replication-read" not in counts
    for row in res["rows"]:
        fig = row["figure"]
        assert row["measured"] == pytest.approx(row["published"], rel=_margin(counts, fig)), fig
