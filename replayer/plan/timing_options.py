"""Which options a plan's `--timing` takes: the closed-loop timings (dependent,
afap) are iotape-lanes' jobs over the trace's own requests, and every option that
shapes fio's plans is refused with them rather than ignored."""

from __future__ import annotations

from base.errors import IotapeError
from replayer.plan import clockjobs, cpucycle, demand, groupcommit, schedsplit, timerwrites
from replayer.plan.options import PlanOptions

TIMINGS = ("recorded", "dependent", "afap")


def check(opts: PlanOptions) -> None:
    if opts.timing not in TIMINGS:
        raise IotapeError(f"--timing {opts.timing}: not {', '.join(TIMINGS)}")
    if not (opts.think_scale >= 0):
        raise IotapeError(f"--think-scale {opts.think_scale}: must be 0 or more")
    if opts.long_thinks not in demand.MODES:
        raise IotapeError(f"--long-thinks {opts.long_thinks}: not {' or '.join(demand.MODES)}")
    if opts.timing != "dependent" and opts.long_thinks != "demand":
        raise IotapeError("--long-thinks: only with --timing dependent")
    if opts.run_queue not in schedsplit.MODES:
        raise IotapeError(f"--run-queue {opts.run_queue}: not {' or '.join(schedsplit.MODES)}")
    if opts.timing != "dependent" and opts.run_queue != "net":
        raise IotapeError("--run-queue: only with --timing dependent")
    if opts.group_commit not in groupcommit.MODES:
        raise IotapeError(
            f"--group-commit {opts.group_commit}: not {' or '.join(groupcommit.MODES)}"
        )
    if opts.timing != "dependent" and opts.group_commit != "join":
        raise IotapeError("--group-commit: only with --timing dependent")
    if opts.think_calibrate is not None and opts.timing != "dependent":
        raise IotapeError("--think-calibrate: only with --timing dependent")
    # each one's default is what a plan without the target's recording does
    for name, v, modes, dflt in (
        ("--timer-writes", opts.timer_writes, timerwrites.MODES, "target"),
        ("--clock-jobs", opts.clock_jobs, clockjobs.MODES, "target"),
        ("--cycle-cpu", opts.cycle_cpu, cpucycle.MODES, "recorded"),
    ):
        if v not in modes:
            raise IotapeError(f"{name} {v}: not {' or '.join(modes)}")
        if opts.think_calibrate is None and v != dflt:
            raise IotapeError(f"{name}: only with --think-calibrate (the target's recording)")
    if opts.timing == "recorded":
        if opts.think_scale != 1.0:
            raise IotapeError("--think-scale: only with --timing dependent")
        return
    # A closed-loop plan is iotape-lanes' jobs, one per submitter, over the trace's
    # own requests: the options that shape fio's plans have no meaning there, and
    # each one given is refused rather than ignored.
    t = f"--timing {opts.timing}"
    if opts.mode == "synthetic":
        raise IotapeError(
            f"{t} with --mode synthetic: a closed-loop plan replays the trace's own "
            "requests (--mode exact or auto)"
        )
    if opts.hosts:
        raise IotapeError(
            f"{t} with --host: a closed-loop plan runs on this host (iotape-lanes; "
            "fio --server cannot wait for a completion)"
        )
    if opts.layout != "auto":
        raise IotapeError(
            f"{t} with --layout {opts.layout}: a closed-loop plan has one job per "
            "submitter (leave --layout auto)"
        )
    if opts.windows:
        raise IotapeError(f"{t} with --windows: a closed-loop plan runs one iotape-lanes")
    if opts.timing == "afap" and opts.think_scale != 1.0:
        raise IotapeError("--think-scale with --timing afap: afap has no think time")
