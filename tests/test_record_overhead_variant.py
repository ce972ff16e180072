"""bench/record_overhead.py --variant: another loader as a capture of its own, and a
capture without records (a floor build's) summarized without failing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import record_overhead
from record_overhead import add_variant, known_median


def test_a_variant_becomes_a_traced_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loader = tmp_path / "iotape-rec.floor1"
    loader.write_bytes(b"")
    monkeypatch.setattr(record_overhead, "CAPTURES", dict(record_overhead.CAPTURES))
    monkeypatch.setattr(record_overhead, "TRACED", list(record_overhead.TRACED))
    add_variant(f"floor1={loader}")
    assert "iotape_floor1" in record_overhead.TRACED
    assert record_overhead.CAPTURES["iotape_floor1"].keywords == {"loader": loader}


@pytest.mark.parametrize("spec", ["floor1", "=/bin/sh", "floor-1=/bin/sh", "floor1=/no/such"])
def test_a_bad_variant_is_refused_by_name(spec: str) -> None:
    with pytest.raises(SystemExit, match=r"--variant .*expected NAME=PATH"):
        add_variant(spec)


def test_a_capture_without_records_has_no_median() -> None:
    runs: list[dict] = [{"bytes_per_request": None}, {"bytes_per_request": None}]
    assert known_median(runs, "bytes_per_request") is None
    runs.append({"bytes_per_request": 9.0})
    runs.append({"bytes_per_request": 10.0})
    assert known_median(runs, "bytes_per_request") == 9.5
