"""`iotape lab hybrid --rounds N` (analyzer/lab/rounds.py): a small real run of two
rounds on the emulated array, each round a whole lab of its own in OUT/round-K (its
baseline on the array without SSDs again, its own prediction, tier and cache), and the
spread's arithmetic over the rounds' own reports (not their speeds); the arithmetic
alone on made-up reports."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest
from test_lab_hybrid import IOTAPE, _run_released

from analyzer.lab import rounds


def test_spread_is_median_and_range_keeping_every_round() -> None:
    s = rounds.spread([3.0, None, 1.0, 2.5, 2.0])
    assert s == {"median": 2.25, "min": 1.0, "max": 3.0, "range": 2.0,
                 "values": [3.0, None, 1.0, 2.5, 2.0]}  # fmt: skip
    assert rounds.spread([4.0])["range"] == 0.0  # type: ignore[index]
    assert rounds.spread([None, None]) is None


def _report(read: float, gain: float, model: float | None, replay: float | None) -> dict:
    figures = dict.fromkeys(rounds.FIGURES, read)
    row = {**figures, "jetstress_verdict": "pass", "gain": dict.fromkeys(rounds.GAINS, gain),
           "predicted": {"read_throughput_gain": gain * (1 + model) if model is not None else None,
                         "read_throughput_gain_error": model, "replayed_gain": None,
                         "replayed_gain_error": replay}}  # fmt: skip
    base = {**figures, "jetstress_verdict": "fail"}
    return {"configs": {"baseline": base, "tier": row}}


def test_summarize_made_up_rounds() -> None:
    """A configuration missing from a round is left out; a prediction missing in a
    round (None) is kept in its values and left out of its median and range."""
    reps = [_report(10, 3.0, 0.1, None), _report(20, 2.0, -0.2, 0.05), _report(12, 4.0, 0.0, 0.15)]
    sp = rounds.summarize(reps)
    assert sp["rounds"] == 3 and set(sp["configs"]) == {"baseline", "tier"}
    t = sp["configs"]["tier"]
    assert (
        t["figures"]["db_read_mb_s"]["median"] == 12 and t["figures"]["db_read_mb_s"]["range"] == 10
    )
    assert t["gain"]["db_reads_per_s"] == rounds.spread([3.0, 2.0, 4.0])
    assert t["predicted"]["model"]["error"]["values"] == [0.1, -0.2, 0.0]
    assert t["predicted"]["model"]["error"]["median"] == 0.0
    assert t["predicted"]["replay"]["error"]["median"] == pytest.approx(0.1)
    assert t["predicted"]["replay"]["gain"] is None
    assert sp["configs"]["baseline"]["jetstress_verdict"] == ["fail"] * 3
    assert "gain" not in sp["configs"]["baseline"]
    text = rounds.render({"spread": sp})
    assert "3 rounds" in text and "+10%, -20%, +0%" in text and "-, +5%, +15%" in text


@pytest.mark.kernel
def test_two_rounds_on_the_array(kernel: None, tmp_path: Path) -> None:
    out = tmp_path / "lab"
    argv = [
        IOTAPE, "lab", "hybrid", "--out", str(out), "--db-mb", "48", "--mailboxes", "24",
        "--seconds", "2", "--unit-kb", "1024", "--stats-s", "0.5", "--migrate-s", "1",
        "--json", "--db", str(tmp_path / "store.duckdb"), "--device", "array", "--rounds", "2",
    ]  # fmt: skip
    r = _run_released(argv, 600)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert json.loads((out / "report.json").read_text()) == rep
    assert "configs" not in rep and [x["round"] for x in rep["rounds"]] == [1, 2]
    each = [json.loads((out / f"round-{k}" / "report.json").read_text()) for k in (1, 2)]
    names = set()
    for k, one in enumerate(each, start=1):
        d = out / f"round-{k}"
        assert rep["rounds"][k - 1]["configs"] == one["configs"]
        assert rep["rounds"][k - 1]["prediction"] == json.loads((d / "prediction.json").read_text())
        # Each round's prediction from its own baseline, written before its tier ran.
        assert (d / "prediction.json").stat().st_mtime <= (d / "tier.iot").stat().st_mtime
        assert (d / "report.txt").read_text().count("every byte accounted") == 1
        c = one["configs"]
        names |= {row["run"] for row in c.values()}
        assert all(row["checks"]["every_request_accounted"] for row in c.values())
        # The baseline on the array without SSDs: in round 2 too, after round 1's cache.
        assert c["baseline"]["array"]["promoted"] == 0 and c["baseline"]["array"]["fills"] == 0
        assert c["tier"]["array"]["promoted"] > 0 and c["cache"]["array"]["fills"] > 0
    assert len(names) == 6  # every run stored under a name of its own
    sp = rep["spread"]
    assert sp["rounds"] == 2 and set(sp["configs"]) == {"baseline", "tier", "cache"}
    for key, s in sp["configs"].items():
        rows = [one["configs"][key] for one in each]
        assert s["jetstress_verdict"] == [row["jetstress_verdict"] for row in rows]
        for f in rounds.FIGURES:
            vals = [row[f] for row in rows]
            assert s["figures"][f]["values"] == vals
            assert s["figures"][f]["median"] == pytest.approx(statistics.median(vals))
            assert s["figures"][f]["min"] == min(vals) and s["figures"][f]["max"] == max(vals)
        if key == "baseline":
            continue
        assert s["gain"]["db_reads_per_s"]["values"] == [r["gain"]["db_reads_per_s"] for r in rows]
        for who, (_, error) in rounds.PREDICTIONS.items():
            errs = [row["predicted"][error] for row in rows]
            assert None not in errs and s["predicted"][who]["error"]["values"] == errs, who
    text = (out / "report.txt").read_text()
    assert text.startswith("2 rounds") and "model: error, per round" in text
    # The lab's devices and files are gone.
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert not [f for f in rep["devices"]["files"] if Path(f).exists() or f in loops]
