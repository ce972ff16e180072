"""iotape-lanes' event loop (replayer/src/evloop.c): the jobs whose thinks are
mostly short run in one io_uring loop (a lane for each of a job's iodepth, as its
threads), the others on threads, and every
edge between them is honoured both ways. Structural: which jobs the loop drove,
every request issued once, none before what it waited for completed (the runner's
count, and each request's issue against its predecessors' completions in its own
record, IOTAPE_LANES_HOPS), the switch. No timing thresholds. No root: the target
is a file."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from replayer.run import runner

MIB = 1 << 20
HOP_LOOP = 64  # replayer/src/lanes.h


def _plan(tmp_path: Path, jobs: dict[str, tuple[int, list[str]]]) -> None:
    """A dependent plan of hand-written logs: job -> (iodepth, lines)."""
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    (tmp_path / "iologs").mkdir()
    fio = "[global]\nioengine=psync\n"
    for name, (depth, lines) in jobs.items():
        head = f"iotape dependent log 1\nopen {target}\n"
        (tmp_path / "iologs" / f"{name}.log").write_text(head + "".join(lines))
        fio += f"[{name}]\nread_iolog=iologs/{name}.log\niodepth={depth}\n"
    (tmp_path / "replay.fio").write_text(fio)


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("IOTAPE_LANES_")}
    return subprocess.run([str(runner.LANES), "replay.fio"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**base, **env})  # fmt: skip


def _mix(n: int = 400) -> tuple[dict[str, tuple[int, list[str]]], dict[int, list[int]]]:
    """Two sessions (depth 1, thinks of 5-40 us: the loop's), a log writer (depth 1,
    thinks of 2.5 ms: asleep, a thread) and a flusher (depth 2, the loop's). Each
    request waits for its own job's previous one and, every third, for another
    job's latest request before it: edges loop -> loop, loop -> thread, thread ->
    loop. Also the waits by id."""
    rng = random.Random(34)
    kinds = {"s1": (1, "read"), "s2": (1, "read"), "log": (1, "write"), "flush": (2, "write")}
    jobs: dict[str, tuple[int, list[str]]] = {k: (d, []) for k, (d, _) in kinds.items()}
    last: dict[str, int] = {}
    preds: dict[int, list[int]] = {}
    for i in range(n):
        name = rng.choices(list(kinds), weights=[4, 4, 1, 2])[0]
        way = [last[name]] if name in last else []
        others = [j for o, j in last.items() if o != name]
        if i % 3 == 0 and others:
            way.append(rng.choice(others))
        think = 2500 if name == "log" else rng.randrange(5, 40)
        after = ",".join(map(str, sorted(set(way)))) if way else "-"
        spec = f"{after} {think}" if way else "- @0"
        jobs[name][1].append(f"{i} {spec} {kinds[name][1]} {(i % 128) * 4096} 4096\n")
        preds[i] = way
        last[name] = i
    return jobs, preds


def _hops(path: Path) -> dict[int, list[int]]:
    """IOTAPE_LANES_HOPS: by id, JOB TID READY NOTICED DUE AT DONE HOW."""
    out = {}
    for ln in path.read_text().splitlines()[1:]:
        f = ln.split()
        if f[0] != "job":
            out[int(f[0])] = [int(x) for x in f[1:]]
    return out


def test_loop_and_threads_honour_every_edge_between_them(tmp_path: Path) -> None:
    jobs, preds = _mix()
    _plan(tmp_path, jobs)
    hops = tmp_path / "hops.txt"
    p = _run(tmp_path, IOTAPE_LANES_OWN_FLOOR_US="0", IOTAPE_LANES_HOPS=str(hops),
             IOTAPE_LANES_EVLOOP="1")  # fmt: skip
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    # the sessions and the flusher (two lanes) in the loop; the log writer (long thinks) not
    looped = ("flush", "s1", "s2")
    assert sorted(res["evloop"]["names"]) == list(looped)
    assert res["evloop"]["requests"] == sum(len(jobs[k][1]) for k in looped)
    assert res["dependencies"]["issued_before_predecessor"] == 0
    per_job = {j["jobname"]: j["read"]["total_ios"] + j["write"]["total_ios"] for j in res["jobs"]}
    assert per_job == {k: len(v[1]) for k, v in jobs.items()}
    rec = _hops(hops)
    assert sorted(rec) == sorted(preds)  # every request issued, once
    names = list(jobs)
    for i, (job, tid, _ready, _noticed, due, at, done, how) in rec.items():
        in_loop = names[job] in looped
        assert bool(how & HOP_LOOP) == in_loop
        assert (tid < 0) == in_loop  # a loop lane's record names it, not a thread
        assert done >= at >= due
        for q in preds[i]:  # its issue after each predecessor's completion
            assert at >= rec[q][6], (i, q)


def test_writes_syncs_and_trims_go_through_the_loop_in_order(tmp_path: Path) -> None:
    """FUA, PREFLUSH, sync and trim in a loop lane: each issued, in order."""
    lines = ["0 - @0 write 0 4096\n", "1 0 5 write+fua 4096 4096\n",
             "2 1 5 write+preflush 8192 4096\n", "3 2 5 sync 0 0\n", "4 3 5 trim 0 4096\n",
             "5 4 5 read 0 4096\n"]  # fmt: skip
    _plan(tmp_path, {"a": (1, lines)})
    hops = tmp_path / "hops.txt"
    p = _run(tmp_path, IOTAPE_LANES_OWN_FLOOR_US="0", IOTAPE_LANES_HOPS=str(hops))
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["evloop"]["names"] == ["a"]
    job = res["jobs"][0]
    counts = {d: job[d]["total_ios"] for d in ("read", "write", "trim", "sync")}
    assert counts == {"read": 1, "write": 3, "trim": 1, "sync": 1}
    rec = _hops(hops)
    assert all(rec[i][5] >= rec[i - 1][6] for i in range(1, 6))
    assert res["dependencies"]["issued_before_predecessor"] == 0


def test_a_deeper_job_takes_its_requests_in_order_at_most_iodepth_at_once(
    tmp_path: Path,
) -> None:
    """A job of iodepth 4 in the loop, every request after the first due at its
    completion: four lanes, each taking the job's next request when its own
    completed, as its four threads would (deps.c): issued in order, never more
    than 4 in flight, and 4 at once (the first's three, then one submit each)."""
    lines = ["0 - @0 read 0 4096\n"]
    lines += [f"{i} 0 0 read {(i % 64) * 4096} 4096\n" for i in range(1, 200)]
    _plan(tmp_path, {"w": (4, lines)})
    hops = tmp_path / "hops.txt"
    p = _run(tmp_path, IOTAPE_LANES_OWN_FLOOR_US="0", IOTAPE_LANES_HOPS=str(hops))
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["evloop"]["names"] == ["w"] and res["evloop"]["requests"] == 200
    rec = _hops(hops)
    assert sorted(rec) == list(range(200))
    assert len({r[1] for r in rec.values()}) == 4  # four lanes named in the records
    ats = [rec[i][5] for i in range(200)]
    assert ats == sorted(ats)  # taken in order, each issued when taken (all due)
    edges = sorted([(r[5], 1) for r in rec.values()] + [(r[6], -1) for r in rec.values()],
                   key=lambda e: (e[0], e[1]))  # fmt: skip
    depth, most = 0, 0
    for _t, d in edges:
        depth += d
        most = max(most, depth)
    assert most == 4


@pytest.mark.parametrize(("value", "loop_jobs"), [("0", 0), ("1", 2), (None, 2)])
def test_the_switch_chooses_loop_or_threads(
    tmp_path: Path, value: str | None, loop_jobs: int
) -> None:
    """Two lanes taking turns, every request once, none early, whichever runs them
    (unset: the default, the loop)."""
    logs: dict[str, tuple[int, list[str]]] = {"a": (1, []), "b": (1, [])}
    for i in range(600):
        way = "- @0" if i == 0 else f"{i - 1} {3 * (i % 3)}"
        logs["ab"[i % 2]][1].append(f"{i} {way} read {(i % 64) * 4096} 4096\n")
    _plan(tmp_path, logs)
    env = {"IOTAPE_LANES_OWN_FLOOR_US": "0"} | ({"IOTAPE_LANES_EVLOOP": value} if value else {})
    p = _run(tmp_path, **env)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["evloop"]["jobs"] == loop_jobs
    assert res["evloop"]["on"] is (value != "0")
    assert sum(j["read"]["total_ios"] for j in res["jobs"]) == 600
    assert res["dependencies"]["issued_before_predecessor"] == 0


def test_nothing_awake_leaves_every_job_on_threads(tmp_path: Path) -> None:
    """IOTAPE_LANES_SPIN_US=0 (sleep only): no think is short by the spin rule, so
    the loop drives nothing: the runner of before."""
    _plan(tmp_path, {"a": (1, ["0 - @0 read 0 4096\n", "1 0 5 read 4096 4096\n"])})
    p = _run(tmp_path, IOTAPE_LANES_OWN_FLOOR_US="0", IOTAPE_LANES_SPIN_US="0")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["evloop"]["jobs"] == 0


def test_a_switch_that_is_neither_is_refused_by_name(tmp_path: Path) -> None:
    _plan(tmp_path, {"a": (1, ["0 - @0 read 0 4096\n"])})
    p = _run(tmp_path, IOTAPE_LANES_EVLOOP="yes")
    assert p.returncode == 2 and not p.stdout
    assert p.stderr.strip() == (
        "iotape-lanes: IOTAPE_LANES_EVLOOP=yes: 1 (one event loop drives the short-think "
        "jobs) or 0 (a thread each)"
    )
