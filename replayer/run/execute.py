"""`iotape replay run`: load the plan, pick its runner, and do what is common around it.

A runner (interface.py) replays a plan: LocalRunner (local.py) on this host with
fio or iotape-lanes, HostsRunner (hosts/run.py) on every host of a multi-host plan
through fio's client. Around either, `run` keeps the order: the runner's checks
(targets, or hosts) before anything is made, the recording's outputs, then the
replay, relabelling the recording by plan job, fio's plain anchor replay, and
JOBDIR/results/summary.json.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from base.errors import IotapeError
from replayer.hosts.run import HostsRunner
from replayer.plan.model import Manifest
from replayer.run import around
from replayer.run.interface import Runner
from replayer.run.local import LocalRunner
from replayer.run.relabel import relabel, relabel_in_memory
from replayer.run.results import AnchorRun, RunSummary
from replayer.run.summarize import write_summary
from schemas.documents import plan as plan_document


def load_manifest(jobdir: Path) -> Manifest:
    path = Path(jobdir) / "plan.json"
    if not path.exists():
        raise IotapeError(f"{jobdir}: no plan.json; make one with `iotape replay plan`")
    return plan_document.load(path)


def pick(
    jobdir: Path,
    man: Manifest,
    destroy: list[str],
    force: bool = False,
    host_iotape: str = "iotape",
    runner: str = "auto",
) -> Runner:
    """HostsRunner for a plan with hosts, else LocalRunner with `runner`."""
    if man.hosts:
        return HostsRunner(jobdir, man, destroy, host_iotape)
    return LocalRunner(jobdir, man, destroy, force, runner)


def run(
    jobdir: Path,
    record_to: Path | None = None,
    destroy: list[str] | None = None,
    anchor_record_to: Path | None = None,
    force: bool = False,
    say: Callable[[str], None] = lambda s: None,
    host_iotape: str = "iotape",
    runner: str = "auto",
) -> RunSummary:
    """Run the plan (and fio's plain anchor replay when `anchor_record_to` is given)
    with `runner` (runner.py: fio, or iotape-lanes for a plan of lanes; a multi-host
    plan: fio's client, whatever `runner` says)."""
    jobdir = Path(jobdir).resolve()
    record_to = Path(record_to) if record_to is not None else None
    anchor_record_to = Path(anchor_record_to) if anchor_record_to is not None else None
    man = load_manifest(jobdir)
    r = pick(jobdir, man, destroy or [], force, host_iotape, runner)
    recording = record_to is not None or anchor_record_to is not None
    if recording and r.no_record:
        raise IotapeError(r.no_record)
    r.check(say)
    around.check_outputs([record_to, anchor_record_to], force)
    r.prepare()
    (jobdir / "results").mkdir(exist_ok=True)
    summary = r.replay(record_to, say)
    if record_to is not None:
        summary.record = str(record_to)
        # A closed-loop plan's requests have no times to pair by within a horizon
        # (its replay on a slow target runs far behind the trace): matched by
        # (op, offset, size) in plan order, held whole, as its planning held them.
        if man.closed_loop:
            summary.relabel = relabel_in_memory(record_to, jobdir, man, by_thread=True)
        else:
            summary.relabel = relabel(record_to, jobdir, man)
    if anchor_record_to is not None:
        summary.anchor = AnchorRun(
            record=str(anchor_record_to), jobs=r.anchor(anchor_record_to, say)
        )
    write_summary(jobdir, summary)
    return summary
