"""LocalRunner: a plan of one host, replayed here with fio or iotape-lanes.

fio runs in JOBDIR (the job files name their iologs relative to it) with JSON
output and per-I/O latency logs into JOBDIR/results; a windowed exact plan runs
one fio per window, all on one clock (launch.py); a plan of lanes may run with
iotape-lanes instead (runner.py), which writes fio's JSON shape. The wake-up probe
runs beside it and, with a record path, the recorder around it (around.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
from pathlib import Path

from base.errors import IotapeError
from devices import targets
from devices.naming import rdev_of
from devices.safety import check_target
from replayer.plan import build as planmod
from replayer.plan.model import Manifest
from replayer.run import around
from replayer.run import launch as launchmod
from replayer.run import runner as runnermod
from replayer.run.interface import Say
from replayer.run.results import JobRow, RunSummary
from replayer.run.summarize import summarize
from schemas.documents.summary import Runner


def check_targets(man: Manifest, destroy: list[str]) -> list[str]:
    """Check every target again, as `replay plan` did: devices come and go between
    the two. Returns the files to create (--create-file); creates nothing."""
    create = []
    for t in man.targets:
        path = t.path
        if path == planmod.PLACEHOLDER:
            raise IotapeError("the plan was made without --target; plan again with one")
        kind = targets.classify(path, t.create_bytes)
        if kind == "create":
            create.append(path)
        elif kind != t.kind:
            raise IotapeError(
                f"--target {path}: was a {'block device' if t.kind == 'block' else 'file'} "
                f"when planned and is now a {'block device' if kind == 'block' else 'file'}; "
                "plan again"
            )
        if kind == "block" and t.writes:
            check_target(path, destroy)
        planned = t.create_bytes
        size = planned if kind == "create" and planned else targets.size_of(path)[0]
        reach = t.reach_bytes or 0
        if size < reach:
            raise IotapeError(
                f"--target {path}: {size} bytes, but the plan reaches byte {reach} "
                f"(planned for {t.size} bytes); plan again for this target"
            )
    return create


def _create(paths: list[str], man: Manifest) -> None:
    """Make the --create-file files, wholly allocated (a full disk shows here, not
    halfway through the replay), or none of them."""
    sizes = {t.path: t.create_bytes or 0 for t in man.targets}
    made: list[str] = []
    for path in paths:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            made.append(path)
            try:
                os.posix_fallocate(fd, 0, sizes[path])
            finally:
                os.close(fd)
        except OSError as e:
            for done in made:
                os.unlink(done)
            raise IotapeError(
                f"--target {path}: cannot create {sizes[path]} bytes: {e.strerror}"
            ) from None


def _fio_cmd(jobdir: Path, jobfile: str, output: str) -> list[str]:
    fio = shutil.which("fio")
    if fio is None:
        raise IotapeError("fio not found: install fio")
    # JSON on stdout, not --output: with --output fio also writes its messages into
    # that file, in the middle of the JSON (exact plans make fio say "ignoring wait
    # command" once per job; iolog.py says why). Messages go beside it.
    # Timer slack 1 ns (children inherit it): fio sleeps before every iolog entry,
    # and the default 50 us slack made each sleep end 50 us late, for good.
    inner = (
        "{ echo 1 >/proc/self/timerslack_ns; } 2>/dev/null; "
        f"cd {shlex.quote(str(jobdir))} && exec {shlex.quote(fio)} --output-format=json "
        f"--eta=never {shlex.quote(jobfile)} >{shlex.quote(output)} "
        f"2>{shlex.quote(str(Path(output).with_suffix('.err')))}"
    )
    return ["sh", "-c", inner]


def _launch_cmd(jobdir: Path) -> list[str]:
    if shutil.which("fio") is None:
        raise IotapeError("fio not found: install fio")
    return [sys.executable, "-m", "replayer.run.launch", str(jobdir)]


def _merge_windows(jobdir: Path, n_windows: int, output: str) -> None:
    """One fio JSON for the whole plan: the windows' jobs, in window order, and the
    run's span across the windows as `elapsed_ms` (what iotape-lanes reports): each
    fio process's jobs' `elapsed` counts from that process's own start, which it
    stamps `timestamp_ms` when it ends."""
    merged: dict = {}
    starts, ends = [], []
    for k in range(n_windows):
        path = jobdir / launchmod.window_output(k)
        try:
            text = path.read_text()
            part = json.loads(text[text.index("{") :])
        except (OSError, ValueError):
            raise IotapeError(f"{path}: fio wrote no JSON result") from None
        end = part.get("timestamp_ms")
        elapsed = [j.get("elapsed") for j in part.get("jobs", [])]
        if isinstance(end, int) and elapsed and all(isinstance(e, int) for e in elapsed):
            ends.append(end)
            starts.append(end - max(elapsed) * 1000)
        if not merged:
            merged = part
        else:
            merged["jobs"] += part.get("jobs", [])
    if merged and len(ends) == n_windows:
        merged["elapsed_ms"] = max(ends) - min(starts)
    (jobdir / output).write_text(json.dumps(merged) + "\n")


def _one(
    jobdir: Path,
    jobfile: str,
    output: str,
    devs: list[str],
    record_to: Path | None,
    force: bool,
    windows: list | None = None,
    program: str = "fio",
    ahead: int = 0,
    probe: bool = True,
) -> dict:
    """Run one job file (a windowed plan: all its windows) and read its JSON. `probe`:
    the wake-up probe beside it (around.py), for an open-loop plan's floor."""
    windowed = bool(windows)
    if program == "lanes":
        cmd = runnermod.lanes_cmd(jobdir, jobfile, output, ahead)
    else:
        cmd = _launch_cmd(jobdir) if windowed else _fio_cmd(jobdir, jobfile, output)
    wakeup = jobdir / "results" / (Path(output).stem + ".wakeup.json") if probe else None
    with around.wakeup_probe(wakeup) if wakeup else contextlib.nullcontext():
        rc = around.command(cmd, jobdir, jobfile, devs, record_to, force, wakeup)
    if rc == 0 and windows:
        _merge_windows(jobdir, len(windows), output)
    out = jobdir / output
    if rc != 0:
        where = "results/fio.wNNNN.err" if windowed else out.with_suffix(".err")
        name = "iotape-lanes" if program == "lanes" else "fio"
        raise IotapeError(f"{jobdir / jobfile}: {name} exited with status {rc}; see {where}")
    try:
        text = out.read_text()
        # fio may print notes before its JSON in the same file.
        return json.loads(text[text.index("{") :])
    except (OSError, ValueError):
        raise IotapeError(f"{out}: {program} wrote no JSON result") from None


class LocalRunner:
    """The plan's jobs on this host, with `runner` (runner.py: fio, or iotape-lanes
    for a plan of lanes)."""

    no_record: str | None = None

    def __init__(
        self, jobdir: Path, man: Manifest, destroy: list[str], force: bool, runner: str = "auto"
    ) -> None:
        self.jobdir, self.man, self.destroy, self.force = jobdir, man, destroy, force
        self.program = runnermod.choose(runner, man, jobdir)
        self.name: Runner = "iotape-lanes" if self.program == "lanes" else "fio"
        self.create: list[str] = []

    def check(self, say: Say) -> None:
        self.create = check_targets(self.man, self.destroy)

    def prepare(self) -> None:
        _create(self.create, self.man)

    def _devs(self) -> list[str]:
        return [t.path for t in self.man.targets if rdev_of(t.path) is not None]

    def replay(self, record_to: Path | None, say: Say) -> RunSummary:
        man = self.man
        ahead = runnermod.ahead_us(man) if self.program == "lanes" else 0
        about = man.duration_s - ahead / 1e6  # iotape-lanes starts sooner than fio
        say(f"replaying {man.mode} plan with {self.name}, about {about:.1f} s")
        jobfile = man.jobfile
        assert jobfile is not None  # only a multi-host plan has none
        # iotape-lanes writes fio's JSON shape, its "fio version" naming it (runner.py).
        result = _one(
            self.jobdir,
            jobfile,
            "results/fio.json",
            self._devs(),
            record_to,
            self.force,
            man.windows or [],
            self.program,
            ahead,
            # A closed-loop replay's fidelity has no floor to set beside its issue
            # times, and the probe's 2,000 wake-ups a second take the CPU its
            # dependency hops run on.
            probe=not man.closed_loop,
        )
        summary = RunSummary(
            jobdir=str(self.jobdir), mode=man.mode, runner=self.name, jobs=summarize(result)
        )
        if "issue_late_ns" in result:
            summary.issue_late_ms = {
                k: round(v / 1e6, 4) for k, v in result["issue_late_ns"].items() if k != "requests"
            }
        if "dependencies" in result:
            summary.issued_before_predecessor = int(
                result["dependencies"]["issued_before_predecessor"]
            )
            gc = result["dependencies"].get("group_commit")
            summary.group_commit_taken = int(gc["taken"]) if gc else None
            lz = result["dependencies"].get("lazy_writes")
            summary.timer_writes = [int(lz["writes"]), int(lz["took"])] if lz else None
            ck = result["dependencies"].get("clock_jobs")
            summary.clock_requests = int(ck["requests"]) if ck else None
        return summary

    def anchor(self, record_to: Path, say: Say) -> list[JobRow]:
        anchor_job = self.man.anchor
        if not anchor_job:
            kind = f"a {self.man.timing} plan" if self.man.closed_loop else "synthetic mode"
            raise IotapeError(f"{self.jobdir}: the plan has no anchor job ({kind})")
        say("replaying with fio's plain read_iolog (anchor)")
        out = "results/anchor.json"
        anchor = _one(self.jobdir, anchor_job, out, self._devs(), record_to, self.force)
        return summarize(anchor)
