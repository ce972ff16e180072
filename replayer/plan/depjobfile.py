"""The job file (replay.fio) of a dependent or afap plan (dependent.py): readable
by a user and by iotape-lanes, which takes each job's log and iodepth from it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from replayer.plan import fromtarget, thinkcal
from replayer.plan.options import PlanOptions


class Job(Protocol):
    """A dependent plan's job, as the job file names it (dependent.DepJob)."""

    name: str
    stream: str
    requests: int
    depth: int


def jobfile(opts: PlanOptions, jobs: Sequence[Job], summaries: list[dict]) -> str:
    """replay.fio of a dependent or afap plan: what it replays and how, per
    stream its figures, and a job per submitter (its log and iodepth)."""
    what = {
        "dependent": "each request when the requests it waits for have completed, plus its"
        f" think time x {opts.think_scale:g}",
        "afap": "each request as soon as the requests it waits for have completed (no think time)",
    }[opts.timing]
    out = [
        f"; iotape replay plan of {opts.trace}: timing {opts.timing} (closed loop):\n",
        f";   {what}, at each submitter's recorded depth (iodepth threads).\n",
        "; Run with iotape-lanes only (`iotape replay run`): fio 3.33 cannot wait for a\n",
        "; completion. Each log says what every request waits for (replayer/plan/dependent.py).\n",
        *(
            [
                "; --long-thinks demand: a long think that ended on a timer or poll goes at its\n",
                "; demand plus the thread's short think (replayer/plan/demand.py).\n",
            ]
            if opts.timing == "dependent" and opts.long_thinks == "demand"
            else []
        ),
        *(
            [
                "; --group-commit join: a log writer's write takes the writes after it whose\n",
                "; committers have committed (`join IDS`: replayer/plan/groupcommit.py).\n",
            ]
            if opts.timing == "dependent" and opts.group_commit == "join"
            else []
        ),
        ";\n; per stream: requests with a predecessor, depth, think time p50 (us)\n",
    ]
    for d in summaries:
        demand_note = ""
        if d.get("long_thinks") == "demand":
            was, now = d["demand_think_s"]
            demand_note = (
                f", {d['demand_thinks']} long thinks on demand ({was:g} s of think -> {now:g} s)"
            )
        out.append(
            f";   {d['stream']}: {d['with_predecessor']}/{d['requests']} by {d['submitter']},"
            f" depth {d['depth']}, think p50 {d['think_us'].get('p50', '-')}{demand_note}"
            f"{thinkcal.note(d)}{fromtarget.note(d)}\n"
        )
    out += ["\n[global]\n", "ioengine=psync\n", "direct=1\n", "thread=1\n"]
    for j in jobs:
        out.append(f"\n; {j.stream}: {j.requests} requests\n[{j.name}]\n")
        out += [f"read_iolog=iologs/{j.name}.log\n", f"iodepth={j.depth}\n"]
    return "".join(out)
