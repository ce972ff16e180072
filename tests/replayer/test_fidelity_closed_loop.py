"""`replay fidelity ORIGINAL JOBDIR` of a dependent replay (replayer/run/closedloop.py):
per stream the speed-up, latency beside the original's, the dependencies honoured
and the error against the truth. No root: iotape-lanes replays onto a file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import header
from typer.testing import CliRunner

from base.errors import IotapeError
from iotape.commands.replay import app
from recorder.tracefile import write_trace
from replayer.run import closedloop, execute, fidelity, runner

sys.path.append(str(Path(__file__).parent))
from test_replay_dependent import _closed_loop, _plan, _write


@pytest.fixture
def replayed(tmp_path: Path) -> Path:
    assert runner.LANES.exists(), f"{runner.LANES}: run `make native`"
    jobdir, _ = _plan(tmp_path, "dependent", think_scale=0.1)
    assert execute.run(jobdir).issued_before_predecessor == 0
    return jobdir


def test_the_original_side_is_its_trace_requests_over_their_span(tmp_path: Path) -> None:
    sides = closedloop.trace_sides(_write(tmp_path / "t.iot", _closed_loop()))
    o = sides["other"]
    # Two threads of 50: the first queued at 1 ms, the last completed at
    # 1.037 ms + 49 x 1.2 ms + 0.2 ms; every request 0.2 ms from queue to completion.
    assert o.requests == 100 and o.span_s == pytest.approx(0.059037, abs=1e-4)
    assert o.iops == pytest.approx(100 / 0.059037, rel=1e-3)
    assert (o.latency.p50_ms, o.latency.p99_ms, o.latency.requests) == (0.2, 0.2, 100)
    assert sides["overall"] == o


def test_a_dependent_replay_reports_speed_up_latency_and_dependencies(
    tmp_path: Path, replayed: Path
) -> None:
    rep = closedloop.report(tmp_path / "t.iot", replayed, execute.load_manifest(replayed))
    assert rep.timing == "dependent" and rep.issued_before_predecessor == 0
    f = rep.streams["other"]
    assert (f.original.requests, f.replay.requests, f.replay.latency.requests) == (100, 100, 100)
    assert f.replay.iops is not None and f.original.iops is not None
    assert f.speed_up == pytest.approx(f.replay.iops / f.original.iops, rel=1e-2)
    assert f.replay.latency.p50_ms is not None and f.replay.latency.p50_ms > 0
    assert f.truth is None and f.error is None
    assert "not at its recorded time" in rep.not_reported


def test_the_error_against_the_truth_is_relative_to_the_truth(
    tmp_path: Path, replayed: Path
) -> None:
    r = _closed_loop()
    # The "application on the target": twice the latency, so half the IOPS.
    for k in ("ts_issue_ns", "ts_complete_ns"):
        r[k] = r["ts_queue_ns"] + (r[k] - r["ts_queue_ns"]) * 2
    truth = _write(tmp_path / "truth.iot", r)
    rep = closedloop.report(tmp_path / "t.iot", replayed, execute.load_manifest(replayed), truth)
    f = rep.overall
    assert f.truth is not None and f.error is not None and f.truth.latency.p50_ms == 0.4
    assert f.replay.iops is not None and f.truth.iops is not None
    assert f.error.iops_error_pct == pytest.approx(
        (f.replay.iops - f.truth.iops) / f.truth.iops * 100, abs=0.02
    )
    assert f.error.p50_error_pct == pytest.approx(
        (f.replay.latency.p50_ms - 0.4) / 0.4 * 100, abs=0.02
    )


def test_the_cli_prints_speed_up_and_leaves_the_open_loop_figures_out(
    tmp_path: Path, replayed: Path
) -> None:
    args = ["fidelity", str(tmp_path / "t.iot"), str(replayed)]
    out = CliRunner().invoke(app, [*args, "--truth", str(tmp_path / "t.iot")])
    assert out.exit_code == 0, out.output
    assert "speed-up x" in out.output and "truth" in out.output and "p50" in out.output
    assert "0 requests issued before one they waited for had completed" in out.output
    assert "not reported: issue-time error" in out.output
    assert "drift_ms_per_s" not in out.output
    js = CliRunner().invoke(app, [*args, "--json"])
    assert js.exit_code == 0, js.output
    doc = json.loads(js.output)
    assert doc["streams"]["other"]["replay"]["requests"] == 100 and "truth" not in doc["overall"]


def test_truth_is_refused_for_an_open_loop_replay(tmp_path: Path) -> None:
    t = _write(tmp_path / "t.iot", _closed_loop())
    out = CliRunner().invoke(app, ["fidelity", str(t), str(t), "--truth", str(t)])
    assert out.exit_code != 0
    assert isinstance(out.exception, IotapeError) and "--truth" in str(out.exception)


def test_a_replay_without_iotape_lanes_histograms_is_one_clear_error(
    tmp_path: Path, replayed: Path
) -> None:
    res_path = replayed / "results" / "fio.json"
    res = json.loads(res_path.read_text())
    for j in res["jobs"]:
        for d in ("read", "write"):
            j[d].pop("lat_hist_ns", None)
    res_path.write_text(json.dumps(res))
    with pytest.raises(IotapeError, match="no latency histogram"):
        closedloop.report(tmp_path / "t.iot", replayed, execute.load_manifest(replayed))


def test_merged_histogram_percentiles_take_the_bucket_midpoint() -> None:
    hist = [(100.0, 200.0, 3), (1_000_000.0, 1_062_500.0, 1)]
    assert closedloop._hist_pct(hist, 50) == pytest.approx(150 / 1e6, abs=1e-4)
    assert closedloop._hist_pct(hist, 99) == pytest.approx(1.03125, abs=1e-4)
    assert closedloop._hist_pct([], 50) is None
    assert np.isclose(closedloop._hist_pct(hist, 75) or 0, 150 / 1e6, atol=1e-4)


def test_a_recorded_dependent_replay_leaves_the_open_loop_figures_out(tmp_path: Path) -> None:
    orig = _write(tmp_path / "t.iot", _closed_loop())
    r = _closed_loop()
    for k in ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns"):
        r[k] = r[k] // 2  # twice as fast: its issue times are no error
    h = header(metadata={"replay_of": {"trace": str(orig), "timing": "dependent"}})
    h["devices"] = h["devices"][:1]
    rec = write_trace(tmp_path / "rec.iot", h, r)
    rep = fidelity.report(orig, rec, None, 5.0)["iotape"]
    assert "dependent replay" in rep.get("closed_loop", "")
    for f in [rep["overall"], *rep["streams"].values()]:
        assert not {"issue_error", "drift_ms_per_s", "iops_mape_pct"} & set(f)
    assert "windows" not in rep and rep["overall"]["requests"] == [100, 100]
    out = CliRunner().invoke(app, ["fidelity", str(orig), str(rec)])
    assert out.exit_code == 0, out.output
    assert "not reported: a dependent replay" in out.output
    # An open-loop recording keeps them.
    plain = _write(tmp_path / "plain.iot", r)
    assert "issue_error" in fidelity.report(orig, plain, None, 5.0)["iotape"]["overall"]
