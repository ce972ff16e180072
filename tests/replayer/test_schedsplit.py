"""Sched records (docs/trace-format.md "Sched records") and the dependent plan's
thinks net of the run-queue wait (replayer/plan/schedsplit.py, `replay plan
--timing dependent --run-queue net|recorded`). No root: synthetic traces, a file
target."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_wakeedges import FLUSHER, SESSION, _req, _wake
from trace_helpers import DT, header

from base.errors import IotapeError
from iotape.commands.replay.plan import _demand_line, _run_queue_line
from recorder.tracefile import open_trace
from recorder.tracefile.convert import convert
from recorder.tracefile.format import SCHED_FIELDS, SCHED_OP, SCHED_VERSION, WAKE_OP
from recorder.tracefile.info import summarize
from recorder.tracefile.writer import write_trace
from replayer.plan import schedsplit
from replayer.plan.build import PlanOptions, plan

MIB = 1 << 20
N = 20
THINK = 200_000  # the session's think between a read's completion and its next read
SERVICE = 500_000
WAIT = 50_000  # the run-queue wait each think holds
LATE = 9  # the request whose run-queue wait since the previous is longer than its think


def _sched(t: int, tid: int, run_delay: int, on_cpu: int) -> np.ndarray:
    x = np.zeros(1, DT)
    x["ts_queue_ns"] = x["ts_issue_ns"] = x["ts_complete_ns"] = t
    x["tid"], x["pid"], x["op"] = tid, 400, SCHED_OP
    x[SCHED_FIELDS["run_delay_ns"]] = run_delay
    x[SCHED_FIELDS["on_cpu_ns"]] = on_cpu
    x[SCHED_FIELDS["runs"]] = 1
    return x


def _session(sched: bool = True) -> np.ndarray:
    """A synchronous session (SESSION): N reads, THINK after each completion, each
    with a sched record whose run-queue wait grew WAIT since the previous read
    (request LATE: 2 x THINK, more than its think), and a flusher (FLUSHER) the
    session wakes, writing 100 us after each wake; wake records throughout."""
    parts, rd = [], 1_000_000
    t = 1_000_000
    for k in range(N):
        parts.append(_req(t, SERVICE, SESSION, "db-read", "read", 2 * k))
        if sched:
            parts.append(_sched(t, SESSION, rd, 10_000 * k))
        parts.append(_wake(t + SERVICE + 10_000, SESSION, FLUSHER))
        parts.append(_req(t + SERVICE + 110_000, 100_000, FLUSHER, "db-write", "write", 2 * k + 1))
        t += SERVICE + THINK
        rd += 2 * THINK if k + 1 == LATE else WAIT
    r = np.zeros(len(parts), DT)  # not np.concatenate: it packs the dtype
    for i, x in enumerate(parts):
        r[i] = x[0]
    return r[np.argsort(r["ts_complete_ns"], kind="stable")]


def _write(path: Path, r: np.ndarray) -> Path:
    h = header()
    h["devices"] = h["devices"][:1]
    sched = bool((r["op"] == SCHED_OP).any())
    return write_trace(path, h, r, wakes=True, sched=sched)


def _plan(tmp_path: Path, trace: Path, name: str, **kw) -> tuple[Path, dict]:
    target = tmp_path / "target.img"
    if not target.exists():
        target.write_bytes(b"\0" * (4 * MIB))
    jobdir = tmp_path / name
    opts = PlanOptions(trace=trace, jobdir=jobdir, targets=[f"all={target}"],
                       timing="dependent", **kw)  # fmt: skip
    return jobdir, plan(opts)


def _thinks(jobdir: Path) -> list[str]:
    """The session's requests' THINK, in their order."""
    log = jobdir / "iologs" / f"db0.db-read.t{SESSION}.log"
    return [x.split()[2] for x in log.read_text().splitlines()[2:]]


def _files(jobdir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(jobdir)): p.read_text()
        for p in sorted(jobdir.rglob("*"))
        if p.is_file() and p.name != "plan.json"
    }


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_sched_records_are_read_apart(tmp_path: Path, compression: str) -> None:
    r = _session()
    h = header()
    h["devices"] = h["devices"][:1]
    path = write_trace(tmp_path / "t.iot", h, r, compression=compression, wakes=True, sched=True)
    with open_trace(path) as t:
        assert t.header["version"] == SCHED_VERSION and t.has_sched and t.has_wakes
        reqs = t.read_all()
        sched = np.concatenate(list(t.iter_sched()))
        wakes = np.concatenate(list(t.iter_wakes()))
        cols = list(t.iter_columns(7))
        assert t.footer is not None
        assert (t.footer["sched"], t.footer["wakes"], t.footer["events"]) == (N, N, 4 * N)
    assert len(reqs) == 2 * N and not np.isin(reqs["op"], [WAKE_OP, SCHED_OP]).any()
    assert (sched["op"] == SCHED_OP).all() and len(wakes) == N
    assert len(np.concatenate([c["op"] for c in cols])) == 2 * N
    split = schedsplit.SchedSplit.of(sched)
    assert split.pairs(reqs) == N  # the session's reads; the flusher has none
    waits = split.run_queue_ns(reqs[reqs["tid"] == SESSION])
    assert waits[0] == 0 and waits[1] == WAIT and waits[LATE] == 2 * THINK


def test_a_version_3_file_gives_op_254_no_meaning(tmp_path: Path) -> None:
    # Before version 4 no sched record exists: a record with op 254 is read back as
    # it was written, among the requests.
    r = _session()
    h = header()
    h["devices"] = h["devices"][:1]
    path = write_trace(tmp_path / "t.iot", h, r, wakes=True)
    with open_trace(path) as t:
        assert not t.has_sched and list(t.iter_sched()) == []
        assert int((t.read_all()["op"] == SCHED_OP).sum()) == N
    assert schedsplit.read_split(str(path)) is None
    with pytest.raises(ValueError, match="only with wake records"):
        write_trace(tmp_path / "u.iot", h, r, sched=True)


def test_thinks_are_replayed_less_their_run_queue_wait(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.iot", _session())
    jobdir, man = _plan(tmp_path, trace, "net")
    d = {x["stream"]: x for x in man["dependencies"]}["db0.db-read"]
    thinks = _thinks(jobdir)
    assert thinks[0].startswith("@")  # the first read: its recorded time, untouched
    for k in range(1, N):
        # LATE's wait is longer than its think: not all inside it, the think kept
        want = THINK // 1000 if k == LATE else (THINK - WAIT) // 1000
        assert thinks[k] == str(want), k
    assert (d["run_queue"], d["sched_recorded"], d["run_queue_thinks"]) == ("net", True, N - 2)
    assert d["run_queue_think_s"] == [
        round((N - 2) * THINK / 1e9, 4),
        round((N - 2) * (THINK - WAIT) / 1e9, 4),
    ]
    # `replay plan` says so per stream
    line = _run_queue_line(d)
    assert f"; {N - 2} thinks less their run-queue wait: 0.004 s of think time -> 0.003 s" in line
    # --run-queue recorded: the thinks as the trace has them
    rec, man = _plan(tmp_path, trace, "recorded", run_queue="recorded")
    assert all(_thinks(rec)[k] == str(THINK // 1000) for k in range(1, N))
    d = {x["stream"]: x for x in man["dependencies"]}["db0.db-read"]
    assert (d["run_queue"], d["run_queue_thinks"]) == ("recorded", 0)


def test_a_trace_without_sched_records_plans_as_before(tmp_path: Path) -> None:
    # The same requests and wakes without sched records (a version 3 capture):
    # every file of the plan byte for byte that of --run-queue recorded on the
    # trace with them, whose sched records the plan then never reads.
    trace = _write(tmp_path / "t.iot", _session(sched=False))
    a, man = _plan(tmp_path, trace, "v3")
    _write(trace, _session())  # the same path: the job file names it
    b, _ = _plan(tmp_path, trace, "v4-recorded", run_queue="recorded")
    assert _files(a) == _files(b)
    d = {x["stream"]: x for x in man["dependencies"]}["db0.db-read"]
    assert (d["sched_recorded"], d["run_queue_thinks"]) == (False, 0)
    assert all(_thinks(a)[k] == str(THINK // 1000) for k in range(1, N))


def test_run_queue_is_refused_where_it_has_no_meaning(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.iot", _session())
    target = [f"all={tmp_path / 'x.img'}"]
    for timing in ("recorded", "afap"):
        with pytest.raises(IotapeError, match="--run-queue: only with --timing dependent"):
            plan(PlanOptions(trace=trace, jobdir=tmp_path / "j", timing=timing,
                             targets=target, run_queue="recorded"))  # fmt: skip
    with pytest.raises(IotapeError, match="--run-queue sometimes: not net or recorded"):
        plan(PlanOptions(trace=trace, jobdir=tmp_path / "j", timing="dependent",
                         targets=target, run_queue="sometimes"))  # fmt: skip


def test_conversions_and_info_see_the_requests_only(tmp_path: Path) -> None:
    # `trace convert` and `trace info` walk the chunks themselves: a --wakes
    # capture's wake and sched records are not requests there either.
    trace = _write(tmp_path / "t.iot", _session())
    assert convert(trace, tmp_path / "t.csv")["rows"] == 2 * N
    ops = summarize(trace)["by_op"]
    assert sum(v["events"] for v in ops.values()) == 2 * N, ops


def test_replay_plan_says_what_each_rule_replaced() -> None:
    d = {"long_thinks": "demand", "wakes_recorded": True, "demand_thinks": 3,
         "demand_woken": 1, "demand_think_s": [0.01, 0.001], "run_queue": "net",
         "sched_recorded": False}  # fmt: skip
    assert _demand_line(d) == (
        "; 3 long thinks on demand (1 after a demand wake): 0.010 s of think time -> "
        "0.001 s (--long-thinks recorded keeps them)"
    )
    assert _run_queue_line(d) == (
        "; thinks as recorded (no sched records to tell the run-queue wait)"
    )
    assert _run_queue_line({**d, "run_queue": "recorded"}) == ""
