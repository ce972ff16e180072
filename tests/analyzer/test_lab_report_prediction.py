"""Which prediction the lab's report gives as THE prediction (the model's), the
replay's beside it, and which of the two came closer to the measured gain, per
configuration (analyzer/lab/report.py, `_versus`, issue 38)."""

from __future__ import annotations

from typing import Any

import pytest

from analyzer.lab import report


def _prediction(gain: float, replayed: float | None, host: dict[str, Any] | None = None) -> dict:
    return {
        "read_throughput_gain": gain,
        "read_latency_ms": {"projected": 3.0},
        "read_hit_ratio": 0.7,
        "littles_law": {"read_throughput_gain": gain},
        "utilization_bound": None,
        "migrated_bytes": 1 << 20,
        "replayed": None if replayed is None else {"read_throughput_gain": replayed},
        "host_cpu": host,
    }


def _row(measured: float) -> dict[str, Any]:
    return {
        "read_hit_ratio": 0.7,
        "db_read_latency_ms_avg": 3.0,
        "migrated_bytes": 1 << 20,
        "gain": {"db_reads_per_s": measured},
    }


def test_the_model_is_the_prediction_and_the_closer_one_is_named() -> None:
    v = report._versus(_prediction(3.3, 4.0), _row(3.0))
    assert v["prediction_by"] == "model"
    assert v["read_throughput_gain_error"] == pytest.approx(0.1)
    assert v["replayed_gain_error"] == pytest.approx(1 / 3)
    assert v["closer"] == "model"
    v = report._versus(_prediction(3.9, 2.9), _row(3.0))
    assert v["closer"] == "replay"
    assert report._versus(_prediction(3.0, None), _row(3.0))["closer"] is None


def test_the_host_cores_gain_is_reported_beside() -> None:
    host = {"read_throughput_gain": 8.1, "utilization": 0.62}
    v = report._versus(_prediction(8.1, None, host), _row(9.0))
    assert v["host_cores_gain"] == pytest.approx(8.1)
    assert v["host_cpu_utilization"] == pytest.approx(0.62)
    assert report._versus(_prediction(3.0, None), _row(3.0))["host_cores_gain"] is None
