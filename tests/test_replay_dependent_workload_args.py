"""bench/replay_dependent_workload.py's command line (issue 34): `--calibration PATH`
takes a kept calibration instead of recording one (the calibrated plan judged
first, the file copied where the rounds plan from), and the options that cannot
go together stop it with a one-line error before anything runs."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "replay_dependent_workload.py"
sys.path.insert(0, str(ROOT / "bench"))
from replay_dependent_workload import _calibration  # noqa: E402
from replay_dependent_workload_args import CAL, check, parser, variants  # noqa: E402


def _parse(*argv: str) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    ap = parser("test", Path("out.json"))
    return ap, ap.parse_args(list(argv))


def test_a_kept_calibration_is_judged_first_like_a_recorded_one(tmp_path: Path) -> None:
    kept = tmp_path / "ssd-calibration.iot"
    kept.write_bytes(b"IOTAPE\r\n kept calibration")
    ap, args = _parse("--directions", "hdd-ssd", "--long-thinks", "demand",
                      "--calibration", str(kept))  # fmt: skip
    check(ap, args)
    assert variants(args) == [CAL, "demand"]
    # without a calibration of either kind, no calibrated replay
    _, plain = _parse("--long-thinks", "demand,recorded")
    assert variants(plain) == ["demand", "recorded"]
    _, recorded = _parse("--long-thinks", "demand", "--calibrate-s", "2")
    assert variants(recorded) == [CAL, "demand"]
    # --no-peers: the judged one alone, calibrated or not
    _, alone = _parse("--long-thinks", "demand,recorded", "--calibration", str(kept), "--no-peers")
    assert variants(alone) == [CAL]
    _, alone = _parse("--long-thinks", "recorded,demand", "--no-peers")
    assert variants(alone) == ["recorded"]

    work = tmp_path / "work"
    work.mkdir()
    cal, figures = _calibration("/dev/null", "ssd", "hdd-to-ssd", work, args)
    # the rounds plan from a copy in the bench's work folder, byte for byte the kept one
    assert cal == work / "ssd-calibration.iot"
    assert cal.read_bytes() == kept.read_bytes()
    assert figures is not None and figures["trace"] == str(kept)
    assert figures["elapsed_s"] is None  # its recording's figures are not known


def test_no_calibration_asked_records_none(tmp_path: Path) -> None:
    _, args = _parse("--directions", "hdd-ssd")
    assert _calibration("/dev/null", "ssd", "hdd-to-ssd", tmp_path, args) == (None, None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--directions", "hdd-ssd", "--calibration", "NOPE"], "--calibration: NOPE: no such file"),
        (["--calibration", "KEPT"], "--calibration: give one --directions"),
        (["--directions", "hdd-ssd", "--calibration", "KEPT", "--calibrate-s", "2"],
         "--calibration: give it or --calibrate-s, not both"),
        (["--directions", "hdd-ssd", "--calibration", "KEPT", "--no-wakes"],
         "--calibration: the plan needs the trace's sched records"),
        (["--directions", "hdd-ssd", "--calibrate-s", "2", "--no-wakes"],
         "--calibrate-s: the calibration needs its sched records"),
    ],
)  # fmt: skip
def test_bad_options_stop_before_anything_runs(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    (tmp_path / "KEPT").write_bytes(b"IOTAPE\r\n")
    # paths under tmp_path; run from the repository as `make bench` does
    argv = [str(tmp_path / a) if a in ("KEPT", "NOPE") else a for a in argv]
    out = tmp_path / "out.json"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), *argv, "-o", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert message.replace("NOPE", str(tmp_path / "NOPE")) in last, last
    assert not out.exists()  # nothing written


def test_the_judged_replay_alone_plans_the_first_variant_calibrated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--no-peers: one replay a round, the first --long-thinks' plan with the
    calibration (what a round with its peers judges too)."""
    import replay_dependent_workload as bench

    calls: list[tuple] = []

    def fake(*a: object) -> dict:
        calls.append(a)
        return {"tx_iops": 1.0}

    monkeypatch.setattr(bench, "replay", fake)
    kept = tmp_path / "cal.iot"
    kept.write_bytes(b"IOTAPE\r\n")
    _, args = _parse("--directions", "hdd-ssd", "--long-thinks", "demand,recorded",
                     "--calibration", str(kept), "--no-peers")  # fmt: skip
    args.variants = variants(args)
    got = bench._dependents(Path("t.iot"), "/dev/x", tmp_path, "l", kept, args)
    assert list(got) == [CAL]
    ((_, _, _, _, timing, variant, condition, cal, cycle_cpu),) = calls
    assert (timing, variant, condition, cal) == ("dependent", "demand", "awake", kept)
    assert cycle_cpu is False  # --cycle-cpu not given: the factor's plan
    # with its peers: the same calibrated plan first, then each plain one uncalibrated
    calls.clear()
    _, args = _parse("--directions", "hdd-ssd", "--long-thinks", "demand,recorded",
                     "--calibration", str(kept))  # fmt: skip
    args.variants = variants(args)
    assert list(bench._dependents(Path("t.iot"), "/dev/x", tmp_path, "l", kept, args)) == [
        CAL, "demand", "recorded"
    ]  # fmt: skip
    assert [(c[5], c[7]) for c in calls] == [("demand", kept), ("demand", None), ("recorded", None)]
