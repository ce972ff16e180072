"""Which program replays a plan: stock fio, or iotape-lanes for a plan of lanes.

fio 3.33 times a lane's request to the millisecond (a v2 `wait` wakes at the
millisecond plus the phase the job had reached), so a lane's request goes out
within ~1 ms after its time. iotape-lanes (replayer/src/lanes.c) reads the same
job file and iologs and sleeps to each request's microsecond, which the lanes'
wait lines carry in the field fio ignores. The job file stays stock fio's: `fio
replay.fio` in the plan's directory replays it, at fio's precision.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from base.errors import IotapeError
from replayer.plan.model import Manifest

RUNNERS = ("auto", "fio", "lanes")
LANES = Path(__file__).resolve().parent.parent / "build" / "iotape-lanes"


def choose(runner: str, man: Manifest, jobdir: Path) -> str:
    """ "fio" or "lanes": auto takes iotape-lanes for a plan of lanes."""
    if runner not in RUNNERS:
        raise IotapeError(f"--runner {runner}: expected one of {', '.join(RUNNERS)}")
    if man.closed_loop:
        if runner == "fio":
            raise IotapeError(
                f"--runner fio: {jobdir} is a {man.timing} plan, which iotape-lanes runs "
                "(fio 3.33 cannot wait for a completion)"
            )
        runner = "lanes"
    lanes = man.exact_layout == "lanes" or man.closed_loop
    if runner == "lanes" and not lanes:
        raise IotapeError(
            f"--runner lanes: {jobdir} is not a plan of lanes "
            "(plan with --mode exact --layout lanes)"
        )
    chosen = "lanes" if runner == "lanes" or (runner == "auto" and lanes) else "fio"
    if chosen == "lanes" and not LANES.exists():
        raise IotapeError(f"{LANES} is not built: run `make native` (or replay with --runner fio)")
    return chosen


def ahead_us(man: Manifest) -> int:
    """How far ahead of its logs' times iotape-lanes runs a plan: fio's set-up
    budget less its own (plan.json's start_us, lanes_start_us); 0 for a plan
    without them (a closed-loop plan, or one from before them)."""
    if man.start_us is None or man.lanes_start_us is None:
        return 0
    return max(0, man.start_us - man.lanes_start_us)


def lanes_cmd(jobdir: Path, jobfile: str, output: str, ahead: int = 0) -> list[str]:
    """iotape-lanes in the plan's directory, `ahead` us ahead of its logs' times
    (ahead_us): JSON to `output`, messages beside it."""
    err = str(Path(output).with_suffix(".err"))
    opt = f"--ahead-us {ahead} " if ahead else ""
    inner = (
        f"cd {shlex.quote(str(jobdir))} && exec {shlex.quote(str(LANES))} {opt}"
        f"{shlex.quote(jobfile)} >{shlex.quote(output)} 2>{shlex.quote(err)}"
    )
    return ["sh", "-c", inner]
