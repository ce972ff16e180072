"""bench/workload_log_flushes.py: the figures it takes from the engine's result
(its log writer's flushes by reason, commits, log writes), wherever the result
puts them (a real run is the bench's, not a test's: root and both devices)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from workload_log_flushes import _figures


def test_figures_from_the_run_and_its_database() -> None:
    res = {
        "elapsed_s": 21.6,
        "log_flushes": [{"durable": 430, "lazy": 373, "capacity": 0, "stop": 0}],
        "total": {"log-write": {"count": 1100.0}},
        "databases": [{"operations_digest": "4ae6", "commits": 1568, "durable_commits": 444}],
    }
    got = _figures(res)
    assert got == {
        "elapsed_s": 21.6,
        "log_flushes": {"durable": 430, "lazy": 373, "capacity": 0, "stop": 0},
        "commits": 1568,
        "durable_commits": 444,
        "log_writes": 1100,
        "operations_digest": "4ae6",
    }
    # a figure the result does not have reads as None, not as another's
    del res["databases"][0]["durable_commits"]
    assert _figures(res)["durable_commits"] is None
