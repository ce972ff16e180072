"""Check a tiering projection against a measurement on two real devices.

Two replays of one trace, each recorded at the device:
- profile: every request goes to the slow device and, at the same moment, to the
  fast one. Each device's latency per op and size class is measured while the
  other is busy, as it is in a tiered array (devices sharing a host, its CPUs and
  interrupts do not serve I/O alone; measured apart, the projection came out 10-20 %
  optimistic on the 2-core test machine);
- tiered: the trace split by the simulated placement (`split.py`) across both,
  the hybrid array emulated on the user's own hardware.
The projection (`analyzer.tiering.projection.project`) mixes the profile's two latency distributions
per request by its simulated tier; the tiered replay is what it should predict.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.tiering.events import Events, load_trace
from analyzer.tiering.params import Params
from analyzer.tiering.simulate import simulate
from base.atomic import replacing
from base.errors import IotapeError
from devices import targets
from devices.naming import rdev_of
from devices.safety import check_target
from recorder.tracefile import open_trace
from replayer.plan import build as planmod
from replayer.plan import split as splitmod
from replayer.run import execute as runmod
from replayer.run.results import RunSummary

REPLAYS = ("profile", "tiered")


def _one_device(trace: Path) -> None:
    with open_trace(trace) as t:
        devs = np.unique(t.read_all()["dev"])
    if len(devs) != 1:
        raise IotapeError(
            f"{trace}: holds {len(devs)} devices; a tiering check replays one device's "
            "requests (record or import one device)"
        )


def _prepare_dir(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()):
        if not force:
            raise IotapeError(f"{out}: exists and is not empty; give --force to replace it")
        if not (out / "result.json").exists() and not (out / "split.iot").exists():
            raise IotapeError(f"{out}: not a tiering-check directory; refusing to empty it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def _on(ev: Events, dev: int) -> Events:
    """The events of one device."""
    keep = ev.dev == dev
    if not keep.any():
        raise IotapeError(
            f"the profile replay recorded nothing on device {dev >> 20}:{dev & 0xFFFFF}"
        )
    return Events(*(getattr(ev, f.name)[keep] for f in dataclasses.fields(Events)))


def _accounting(planned: Path, summary: RunSummary, recorded: Path) -> dict[str, Any]:
    """Where every planned request went: issued by fio, then recorded or counted lost.

    The kernel does not always report a completion: on a direct-I/O loop device
    over a throttled disk (the test lab's slow device), a few requests in ten
    thousand complete without the block_rq_complete tracepoint firing (an
    independent bpftrace counter misses the same ones). The recorder keeps each
    when its tag is reused, flagged `complete_unseen` with that moment as its
    completion (an upper bound): `completion_unseen` says how many."""
    with open_trace(planned) as t:
        n_planned = int(t.footer["events"]) if t.footer else len(t.read_all())
    with open_trace(recorded) as t:
        footer = dict(t.footer or {})
    issued = sum(
        (row.read.ios if row.read else 0) + (row.write.ios if row.write else 0)
        for row in summary.jobs
    )
    lost = {k: int(v) for k, v in (footer.get("lost") or {}).items() if v}
    return {
        "planned": n_planned,
        "issued": int(issued),
        "recorded": int(footer.get("events", 0)),
        "lost": lost,
        "completion_unseen": int(footer.get("completion_unseen", 0)),
        "pre_start": int(footer.get("pre_start", 0)),
        "in_flight_at_stop": int(footer.get("in_flight_at_stop", 0)),
    }


def _device_numbers(fast: str, slow: str) -> dict[str, int]:
    """The device number of --fast and --slow: two different block devices."""
    devs = {}
    for what, path in (("--fast", fast), ("--slow", slow)):
        targets.check_system_path(os.path.abspath(path), what)
        rdev = rdev_of(path)
        if rdev is None:
            raise IotapeError(
                f"{what} {path}: not a block device (the check records at the device)"
            )
        devs[what] = (os.major(rdev) << 20) | os.minor(rdev)
    if devs["--fast"] == devs["--slow"]:
        raise IotapeError(f"--fast and --slow are the same device ({fast})")
    return devs


def _replay(
    name: str,
    src: Path,
    out: Path,
    targets_: list[str],
    recorded: Path,
    destroy: list[str],
    say: Callable[[str], None],
) -> RunSummary:
    """Plan SRC onto the targets in OUT/NAME.jobs and replay it, recording RECORDED."""
    jobdir = out / f"{name}.jobs"
    say(f"{name}: planning")
    planmod.plan(
        planmod.PlanOptions(trace=src, jobdir=jobdir, targets=targets_, force=True, destroy=destroy)
    )
    return runmod.run(jobdir, recorded, destroy, None, True, say=lambda s: say(f"{name}: {s}"))


def check(
    trace: Path,
    fast: str,
    slow: str,
    p: Params,
    out: Path,
    destroy: list[str] | None = None,
    force: bool = False,
    say: Callable[[str], None] = lambda _s: None,
) -> dict[str, Any]:
    """Run the three replays into OUT and compare measured with projected latency.
    Writes OUT/result.json; returns the same dict."""
    trace, out = Path(trace), Path(out)
    devs = _device_numbers(fast, slow)
    # Both are written; refuse them before anything is simulated or written to OUT.
    for path in (fast, slow):
        check_target(path, destroy or [])
    _one_device(trace)
    _prepare_dir(out, force)
    placed = splitmod.place(trace, p)
    splitmod.write(placed, out / "profile.iot", force=True, both=True)
    split_info = splitmod.write(placed, out / "split.iot", force=True)
    recorded: dict[str, Path] = {}
    accounting: dict[str, dict[str, Any]] = {}
    for name, src in (("profile", out / "profile.iot"), ("tiered", out / "split.iot")):
        recorded[name] = out / f"{name}-replay.iot"
        targets_ = [f"fast={fast}", f"slow={slow}"]
        summary = _replay(name, src, out, targets_, recorded[name], destroy or [], say)
        accounting[name] = _accounting(src, summary, recorded[name])
    prof = load_trace(str(recorded["profile"]))
    res = simulate(
        load_trace(str(trace)),
        p,
        fast=_on(prof, devs["--fast"]),
        slow=_on(prof, devs["--slow"]),
        measured=load_trace(str(recorded["tiered"])),
    )
    result = {
        "trace": str(trace),
        "fast": fast,
        "slow": slow,
        "split": split_info,
        "replays": {k: str(v) for k, v in recorded.items()},
        "params": res["params"],
        "hit_ratio": res["hit_ratio"],
        "latency": res["latency"],
        "accounting": accounting,
    }
    with replacing(out / "result.json") as tmp:
        Path(tmp).write_text(json.dumps(result, indent=2, default=str))
    return result
