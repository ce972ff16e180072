"""iotape-lanes' record of each dependent request (IOTAPE_LANES_HOPS=FILE,
replayer/src/hops.c) and bench/lanes_hop_split.py's reading of it: the times are
the runner's own (a request's ready time is exactly its predecessor's completion,
its due time that plus its think), and the run's critical path adds up to its
span. Structural: orders and sums of the run's own clock, no timing. No root: the
target is a file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from test_demand_thinks import _lanes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from lanes_hop_split import read_hops, split  # noqa: E402

N = 120
THINK_US = 30


def _turns() -> dict[str, list[str]]:
    """Two sessions taking turns (each request THINK_US after the other's last),
    the first at 1 ms after the start."""
    logs: dict[str, list[str]] = {"db0.db-read.a": [], "db0.db-read.b": []}
    for i in range(N):
        way = "- @1000" if i == 0 else f"{i - 1} {THINK_US}"
        logs[f"db0.db-read.{'ab'[i % 2]}"].append(f"{i} {way} read {i % 64 * 4096} 4096\n")
    return logs


def _run(tmp_path: Path, **env: str) -> Path:
    base = {k: v for k, v in os.environ.items() if not k.startswith("IOTAPE_LANES_")}
    p = _lanes(tmp_path, _turns(), {**base, "IOTAPE_LANES_OWN_FLOOR_US": "0", **env})
    assert p.returncode == 0, p.stderr
    return tmp_path


def test_each_request_is_recorded_with_its_predecessors_completion(tmp_path: Path) -> None:
    hops = tmp_path / "hops.txt"
    _run(tmp_path, IOTAPE_LANES_HOPS=str(hops))
    jobs, reqs = read_hops(hops)
    assert sorted(jobs.values()) == ["db0.db-read.a", "db0.db-read.b"]
    assert sorted(reqs) == list(range(N))
    for i, (job, _tid, ready, noticed, due, at, done, _how) in reqs.items():
        assert jobs[job] == f"db0.db-read.{'ab'[i % 2]}"
        assert at >= due and done >= at
        if i == 0:  # an absolute time: 1 ms after the start, ready at none
            assert (ready, due) == (0, 1_000_000)
            continue
        # exactly its predecessor's completion, as that thread wrote it, plus its think
        assert ready == reqs[i - 1][6]
        assert due == ready + THINK_US * 1000
        assert noticed >= ready and at >= reqs[i - 1][6]
    line = hops.read_text().splitlines()[1].split()
    assert line[0] == "job" and int(line[3]) == 1  # one thread; its schedstat sums
    assert int(line[4]) > 0 and int(line[6]) > 0


def test_the_runs_critical_path_adds_up_to_its_span(tmp_path: Path) -> None:
    hops = tmp_path / "hops.txt"
    _run(tmp_path, IOTAPE_LANES_HOPS=str(hops))
    s = split(tmp_path, hops)
    # every request is on the path: each waits for the other lane's last
    assert s["path_hops"] == N and s["path_hops_after_own_thread"] == 0
    assert abs(sum(s["path_ms"].values()) - s["tx_span_ms"]) <= 0.05
    # the thinks as replayed: N - 1 of THINK_US (the first is at its absolute time)
    assert abs(s["path_ms"]["think"] - (N - 1) * THINK_US / 1e3) <= 0.01
    assert s["sched_by_job"]["db0.db-read.a"]["threads"] == 1


def test_nothing_is_written_without_the_variable(tmp_path: Path) -> None:
    _run(tmp_path)
    assert not (tmp_path / "hops.txt").exists()


def test_a_file_it_cannot_write_fails_the_run_by_name(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("IOTAPE_LANES_")}
    bad = tmp_path / "no-such-dir" / "hops.txt"
    p = _lanes(tmp_path, _turns(), {**base, "IOTAPE_LANES_HOPS": str(bad)})
    assert p.returncode == 1
    assert f"IOTAPE_LANES_HOPS={bad}: cannot write it" in p.stderr
