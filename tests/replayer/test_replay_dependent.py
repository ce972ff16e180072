"""Closed-loop replay (`replay plan --timing dependent|afap`): dependency inference
from a trace (replayer/plan/deps.py), the plan's job directory (dependent.py) and
iotape-lanes running it (replayer/src/deps.c). No root: the target is a file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import DT, SDA, header
from typer.testing import CliRunner

import schemas
from base.errors import IotapeError
from iotape.commands.replay import app
from recorder.tracefile import open_trace, write_trace
from replayer.plan import deps
from replayer.plan.build import PlanOptions, plan
from replayer.run import runner
from replayer.run.local import LocalRunner
from replayer.run.relabel import relabel_in_memory
from schemas.documents.plan import load as load_plan

OP = schemas.enum("op")
FUA = 1 << schemas.bits("flag")["fua"]
MIB = 1 << 20


def _closed_loop(threads: int = 2, n: int = 50, think_ns: int = 1_000_000, lat_ns: int = 200_000):
    """Synchronous submitters: each request issued `think_ns` after the previous
    one of its thread completed; reads and writes of 8 KiB."""
    rng = np.random.default_rng(3)
    r = np.zeros(threads * n, dtype=DT)
    for t in range(threads):
        q = 1_000_000 + t * 37_000 + np.arange(n) * (lat_ns + think_ns)
        s = slice(t * n, (t + 1) * n)
        r["ts_queue_ns"][s] = q
        r["ts_issue_ns"][s] = q + 2_000
        r["ts_complete_ns"][s] = q + lat_ns
        r["tid"][s] = 500 + t
        r["pid"][s] = 400
    r["offset"] = rng.integers(0, 64, len(r)) * 8192
    r["bytes"] = 8192
    r["op"] = np.where(rng.random(len(r)) < 0.7, OP["read"], OP["write"])
    r["dev"] = SDA
    return r[np.argsort(r["ts_issue_ns"], kind="stable")]


def _write(path: Path, r: np.ndarray) -> Path:
    h = header()
    h["devices"] = h["devices"][:1]
    return write_trace(path, h, r)


def test_a_sync_submitter_chains_each_request_to_its_previous_completion() -> None:
    r = _closed_loop()
    d = deps.infer(r)
    assert d.key == "tid" and d.depth == {500: 1, 501: 1}
    has = d.pred >= 0
    # Each thread's first request has none; every other one its own thread's previous.
    assert int((~has).sum()) == 2
    assert (d.submitter[d.pred[has]] == d.submitter[has]).all()
    assert (d.think_ns[has] == 1_000_000).all()
    s = deps.summary(d)
    assert s["with_predecessor"] == 98 and s["depth"] == 1
    assert s["think_us"]["p50"] == 1000.0


def test_one_late_completion_does_not_make_a_sync_submitter_async() -> None:
    r = _closed_loop(threads=1, n=50)
    r["ts_complete_ns"][10] = r["ts_queue_ns"][11] + 5  # stamped late
    assert deps.infer(r).depth == {500: 1}
    r["ts_complete_ns"][20] = r["ts_queue_ns"][21] + 5  # twice: a window of two
    assert deps.infer(r).depth == {500: 2}


def test_a_threads_chain_across_streams_is_counted_as_lost() -> None:
    r = _closed_loop(threads=1, n=40)
    r["stream"] = np.arange(40) % 2 + 1  # db-read, db-write, db-read, ...
    lost = deps.other_stream_predecessors(r, lambda s: f"s{s}")
    assert lost == {"s1": 19, "s2": 20}


def test_a_completion_the_kernel_never_reported_ends_before_the_next_issue() -> None:
    r = _closed_loop(threads=1, n=50)
    r["ts_complete_ns"][10:13] = r["ts_queue_ns"][11:14] + 90_000_000  # stamped late
    r["flags"][10:13] = 1 << schemas.bits("flag")["complete_unseen"]
    d = deps.infer(r)
    assert d.depth == {500: 1}
    # Its successor's think time is the submitter's median, 1 ms.
    assert d.pred[11] == 10 and d.think_ns[11] == 1_000_000


def test_without_threads_the_pid_then_the_stream_is_the_submitter() -> None:
    r = _closed_loop()
    r["tid"] = 0
    assert deps.infer(r).key == "pid"
    r["pid"] = 0
    d = deps.infer(r)
    # One submitter of two interleaved threads: its depth is what it had in flight.
    assert d.key == "stream" and d.depth == {0: 2}


def test_an_async_submitter_shows_its_window_and_a_fua_write_waits_for_writes() -> None:
    r = np.zeros(5, dtype=DT)
    r["ts_queue_ns"] = [1000, 1000, 1000, 1000, 9000]
    r["ts_issue_ns"] = r["ts_queue_ns"]
    r["ts_complete_ns"] = [5000, 6000, 7000, 8000, 9500]
    r["tid"] = [1, 1, 1, 1, 2]
    r["op"] = [OP["write"]] * 4 + [OP["write"]]
    r["flags"] = [0, 0, 0, 0, FUA]
    r["bytes"] = 4096
    d = deps.infer(r)
    assert d.depth == {1: 4, 2: 1}
    assert d.pred.tolist() == [-1, -1, -1, -1, -1]
    # The FUA write of thread 2 waits for thread 1's latest write completed before it.
    assert d.covers == [(4, 3)]
    assert d.cross is not None and d.cross[0] == 1  # 1 us after thread 1's, none of its own


def _plan(tmp_path: Path, timing: str, **kw) -> tuple[Path, dict]:
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    trace = _write(tmp_path / "t.iot", _closed_loop())
    jobdir = tmp_path / f"jobs-{timing}"
    opts = PlanOptions(trace=trace, jobdir=jobdir, targets=[f"all={target}"], timing=timing, **kw)
    return jobdir, plan(opts)


def test_a_dependent_plan_says_what_each_request_waits_for(tmp_path: Path) -> None:
    jobdir, man = _plan(tmp_path, "dependent", think_scale=0.5)
    assert man["timing"] == "dependent" and man["runner"] == "iotape-lanes"
    assert [j["name"] for j in man["jobs"]] == ["db0.other.t500", "db0.other.t501"]
    (d,) = man["dependencies"]
    assert d["with_predecessor"] == 98 and d["depth"] == 1 and d["submitter"] == "tid"
    lines = (jobdir / "iologs" / "db0.other.t500.log").read_text().splitlines()
    assert lines[0] == "iotape dependent log 1" and lines[1].startswith("open ")
    first, second = lines[2].split(), lines[3].split()
    assert first[1] == "-" and first[2].startswith("@")
    # Its predecessor, and half the recorded 1 ms think time.
    assert second[1] == first[0] and second[2] == "500"
    assert "iodepth=1" in (jobdir / "replay.fio").read_text()
    assert load_plan(jobdir / "plan.json").closed_loop


def test_afap_drops_think_time_and_recorded_plans_say_nothing_of_timing(tmp_path: Path) -> None:
    jobdir, _ = _plan(tmp_path, "afap")
    body = [
        ln.split() for ln in (jobdir / "iologs" / "db0.other.t501.log").read_text().splitlines()[2:]
    ]
    assert {b[2] for b in body} == {"@0", "0"}
    _, man = _plan(tmp_path, "recorded")
    assert "timing" not in man and "dependencies" not in man
    with pytest.raises(IotapeError, match="think-scale"):
        _plan(tmp_path, "recorded", think_scale=2.0)
    with pytest.raises(IotapeError, match="--timing"):
        _plan(tmp_path, "later")


def test_iotape_lanes_issues_each_request_after_its_predecessor(tmp_path: Path) -> None:
    assert runner.LANES.exists(), f"{runner.LANES}: run `make native`"
    jobdir, _ = _plan(tmp_path, "dependent", think_scale=0.1)
    out = subprocess.run(
        [str(runner.LANES), "replay.fio"], cwd=jobdir, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["dependencies"] == {**res["dependencies"], "requests": 100, "with_predecessor": 98}
    assert res["dependencies"]["issued_before_predecessor"] == 0
    ios = sum(j[d]["total_ios"] for j in res["jobs"] for d in ("read", "write"))
    assert ios == 100


def test_iotape_lanes_wakes_each_waiting_thread_for_its_own_predecessor(tmp_path: Path) -> None:
    """Two jobs whose requests alternate, each waiting for the other job's last
    one, one of them with 8 threads (thinks of 300 us: slept, so on threads, not
    the event loop): every wait is for another thread's
    completion (each on its own futex word in deps.c), and every request is
    issued after it and done."""
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    (tmp_path / "iologs").mkdir()
    logs: dict[str, list[str]] = {"a": [], "b": []}
    for k in range(2000):
        after, think = (str(k - 1), "300" if k % 2 == 0 else "0") if k else ("-", "@0")
        logs["ab"[k % 2]].append(f"{k} {after} {think} read {(k % 128) * 8192} 8192\n")
    fio = "[global]\nioengine=psync\n"
    for name, depth in (("a", 8), ("b", 1)):
        head = f"iotape dependent log 1\nopen {target}\n"
        (tmp_path / "iologs" / f"{name}.log").write_text(head + "".join(logs[name]))
        fio += f"[{name}]\nread_iolog=iologs/{name}.log\niodepth={depth}\n"
    (tmp_path / "replay.fio").write_text(fio)
    # Job b runs in the event loop (zero thinks), a on threads: every hop
    # crosses them. Three runs, as the loop once went deaf to the threads' eventfd
    # in about one run in five (its re-armed read left unsubmitted: 200 ms a hop,
    # 200 s a run; evloop.c wait_next) and a slow run is the symptom.
    for _ in range(3):
        out = subprocess.run(
            [str(runner.LANES), "replay.fio"], cwd=tmp_path, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        assert res["dependencies"]["issued_before_predecessor"] == 0
        assert sum(j["read"]["total_ios"] for j in res["jobs"]) == 2000
        assert res["evloop"]["names"] == ["b"]


def test_requests_issued_just_before_another_threads_completion_are_the_mirror_count() -> None:
    """Thread 2 issues 3 us before each of thread 1's completions (woken with it,
    not by it): no candidate, 10 in mirror (crossedges.ordered's other side)."""
    n = 10
    r = np.zeros(2 * n, dtype=DT)
    one = 1_000_000 + np.arange(n) * 200_000
    r["ts_queue_ns"] = np.concatenate([one, one + 47_000])
    r["ts_issue_ns"] = r["ts_queue_ns"]
    r["ts_complete_ns"] = np.concatenate([one + 50_000, one + 52_000])
    r["tid"] = [1] * n + [2] * n
    r["op"] = OP["read"]
    r["bytes"] = 4096
    r = r[np.argsort(r["ts_issue_ns"], kind="stable")]
    d = deps.infer(r)
    assert d.cross is not None and (d.cross[0], d.cross[2]) == (0, n)
    t = deps.Tally()
    t.add(d)
    s = t.summary()
    assert (s["cross_candidates"], s["cross_mirror"]) == (0, n)


def test_replay_plan_prints_each_streams_dependencies(tmp_path: Path) -> None:
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    trace = _write(tmp_path / "t.iot", _closed_loop())
    args = ["plan", str(trace), "-o", str(tmp_path / "j"), "--target", f"all={target}"]
    out = CliRunner().invoke(app, [*args, "--timing", "dependent"])
    assert out.exit_code == 0, out.output
    assert "timing dependent (runs with iotape-lanes)" in out.output
    assert "db0.other: 98/100 requests after a predecessor (2 submitter(s) by tid)" in out.output
    assert "think us p10/p50/p90/p99 1000.0/1000.0/1000.0/1000.0" in out.output
    assert "cross-thread candidates (by chance " in out.output and ", in mirror " in out.output


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--mode", "synthetic"], "--timing dependent with --mode synthetic: "),
        (["--host", "b=10.0.0.2"], "--timing dependent with --host: "),
        (["--layout", "pieces"], "--timing dependent with --layout pieces: "),
        (["--windows"], "--timing dependent with --windows: "),
        (["--timing", "afap", "--think-scale", "2"], "--think-scale with --timing afap: "),
    ],
)
def test_options_a_closed_loop_plan_cannot_honour_are_refused(
    tmp_path: Path, extra: list[str], says: str
) -> None:
    """One line naming the pair, a non-zero exit and no job directory."""
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    trace = _write(tmp_path / "t.iot", _closed_loop())
    jobdir = tmp_path / "j"
    args = ["plan", str(trace), "-o", str(jobdir), "--target", f"all={target}"]
    cmd = [sys.executable, "-m", "iotape", "replay", *args, "--timing", "dependent", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and not out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"iotape: error: {says}"), out.stderr
    assert not jobdir.exists()


def test_a_dependent_plan_runs_with_iotape_lanes_only_and_can_be_recorded(tmp_path: Path) -> None:
    jobdir, _ = _plan(tmp_path, "dependent")
    man = load_plan(jobdir / "plan.json")
    assert runner.choose("auto", man, jobdir) == "lanes"
    with pytest.raises(IotapeError, match="iotape-lanes runs"):
        runner.choose("fio", man, jobdir)
    assert LocalRunner(jobdir, man, [], False).no_record is None


def test_a_closed_loop_replay_runs_without_the_wakeup_probe(tmp_path: Path) -> None:
    """The wake-up probe's floor is set beside open-loop issue times only; beside a
    closed-loop replay its 2,000 wake-ups a second would take the CPU the
    dependency hops run on. The same trace recorded-timed keeps its probe."""
    for timing, probed in (("dependent", False), ("recorded", True)):
        jobdir, _ = _plan(tmp_path, timing)
        man = load_plan(jobdir / "plan.json")
        summary = LocalRunner(jobdir, man, [], False).replay(None, lambda _: None)
        ios = [s.ios for j in summary.jobs for s in (j.read, j.write) if s is not None]
        assert sum(ios) == 100, timing
        assert (jobdir / "results" / "fio.wakeup.json").exists() is probed, timing


def test_a_recorded_dependent_replay_gets_its_plan_jobs_streams(tmp_path: Path) -> None:
    """The recording of a dependent replay, three times slower than the trace (a
    slow target), its requests labelled `other` by the recorder: relabelled by
    (op, offset, size) in plan order, each thread by most of its requests (offsets
    repeat across the two streams here), its flush by its thread."""
    ids = schemas.enum("stream")
    r = _closed_loop()
    r["stream"] = np.where(r["tid"] == 500, ids["db-read"], ids["log-write"])
    target = tmp_path / "target.img"
    target.write_bytes(b"\0" * MIB)
    jobdir = tmp_path / "jobs"
    opts = PlanOptions(
        trace=_write(tmp_path / "t.iot", r), jobdir=jobdir, targets=[f"all={target}"],
        timing="dependent",
    )  # fmt: skip
    plan(opts)
    rec = r.copy()
    rec["stream"] = ids["other"]
    rec["tid"] = np.where(r["tid"] == 500, 9000, 9001)
    for k in ("ts_queue_ns", "ts_issue_ns", "ts_complete_ns"):
        rec[k] = 7_000_000 + r[k] * 3
    both = np.zeros(len(rec) + 1, rec.dtype)  # (concatenate would drop the padding)
    both[:-1], both[-1] = rec, rec[-1]
    both["op"][-1], both["offset"][-1], both["bytes"][-1] = OP["flush"], 0, 0
    recorded = _write(tmp_path / "rec.iot", both)
    got = relabel_in_memory(recorded, jobdir, load_plan(jobdir / "plan.json"), by_thread=True)
    assert (got.relabelled, got.requests) == (101, 101)
    with open_trace(recorded) as t:
        out, names = t.read_all(), t.header["streams"]
    by_tid = {
        int(tid): {names[str(s)] for s in out["stream"][out["tid"] == tid]} for tid in (9000, 9001)
    }
    assert by_tid == {9000: {"db-read"}, 9001: {"log-write"}}


def test_scaling_keeps_working_each_copy_its_own_chains(tmp_path: Path) -> None:
    r = _closed_loop()
    r["stream"] = schemas.enum("stream")["db-read"]
    h = header(metadata={"mailboxes": "100", "databases": "1"})
    h["devices"] = h["devices"][:1]
    trace = write_trace(tmp_path / "t.iot", h, r)
    targets = []
    for k in range(2):
        (tmp_path / f"db{k}.img").write_bytes(b"\0" * MIB)
        targets.append(f"db{k}={tmp_path / f'db{k}.img'}")
    jobdir = tmp_path / "jobs"
    man = plan(
        PlanOptions(trace, jobdir, targets=targets, timing="dependent", think_scale=0.05,
                    mailboxes=400, databases=2)
    )  # fmt: skip
    # 400 mailboxes on 2 databases: each database's db-read twice the trace's.
    assert sum(j["requests"] for j in man["jobs"]) == 400
    assert {j["db"] for j in man["jobs"]} == {0, 1}
    assert {d["with_predecessor"] for d in man["dependencies"]} == {98}
    ids = [ln.split()[0] for log in (jobdir / "iologs").glob("*.log")
           for ln in log.read_text().splitlines()[2:]]  # fmt: skip
    assert len(ids) == len(set(ids)) == 400
    out = subprocess.run(
        [str(runner.LANES), "replay.fio"], cwd=jobdir, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["dependencies"]["issued_before_predecessor"] == 0
