"""`iotape replay run`: check the targets, run fio on the plan, record it, keep the results.

fio runs in JOBDIR (the job files name their iologs relative to it) with JSON
output and per-I/O latency logs into JOBDIR/results. With a record path, the
eBPF recorder captures the targets while fio runs, so original and replay are
measured the same way, at the device.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from base.errors import IotapeError
from recorder.capture import record as rec
from replayer.plan import build as planmod
from replayer.plan.model import Manifest
from replayer.run import launch as launchmod
from replayer.run import runner as runnermod
from replayer.run import targets
from replayer.run.relabel import relabel
from replayer.run.results import AnchorRun, IoStats, JobRow, RunSummary
from replayer.run.safety import check_target, rdev_of
from schemas.documents import plan as plan_document
from schemas.documents.summary import Runner


def load_manifest(jobdir: Path) -> Manifest:
    path = Path(jobdir) / "plan.json"
    if not path.exists():
        raise IotapeError(f"{jobdir}: no plan.json; make one with `iotape replay plan`")
    return plan_document.load(path)


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
    """One fio JSON for the whole plan: the windows' jobs, in window order."""
    merged: dict = {}
    for k in range(n_windows):
        path = jobdir / launchmod.window_output(k)
        try:
            text = path.read_text()
            part = json.loads(text[text.index("{") :])
        except (OSError, ValueError):
            raise IotapeError(f"{path}: fio wrote no JSON result") from None
        if not merged:
            merged = part
        else:
            merged["jobs"] += part.get("jobs", [])
    (jobdir / output).write_text(json.dumps(merged) + "\n")


def _start_probe(out: Path) -> subprocess.Popen:
    """The wake-up floor, measured beside fio for the whole run (wakeup.py)."""
    return subprocess.Popen([sys.executable, "-m", "replayer.run.wakeup", str(out)])


def _stop_probe(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _one(
    jobdir: Path,
    jobfile: str,
    output: str,
    devs: list[str],
    record_to: Path | None,
    force: bool,
    man: Manifest | None = None,
    program: str = "fio",
) -> dict:
    windows = (man.windows if man else None) or []
    windowed = bool(windows)
    if program == "lanes":
        cmd = runnermod.lanes_cmd(jobdir, jobfile, output)
    else:
        cmd = _launch_cmd(jobdir) if windowed else _fio_cmd(jobdir, jobfile, output)
    wakeup = jobdir / "results" / (Path(output).stem + ".wakeup.json")
    probe = _start_probe(wakeup)
    try:
        rc = _command(cmd, jobdir, jobfile, devs, record_to, force, wakeup)
    finally:
        _stop_probe(probe)
    if rc == 0 and windowed:
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


def _command(
    cmd: list[str],
    jobdir: Path,
    jobfile: str,
    devs: list[str],
    record_to: Path | None,
    force: bool,
    wakeup: Path,
) -> int | None:
    """fio's exit status (None: the recorder ran no command)."""
    if record_to is not None:
        if not devs:
            raise IotapeError("--record: the plan has no block-device target to record")
        res = rec.record(
            rec.RecordOptions(
                devices=devs,
                output=record_to,
                command=cmd,
                force=force,
                metadata={"replay_of": str(jobdir), "jobfile": jobfile, "wakeup": str(wakeup)},
            )
        )
        return res.command_exit
    return subprocess.run(cmd, check=False).returncode


DIRECTIONS: tuple[Literal["read", "write", "trim", "sync"], ...] = ("read", "write", "trim", "sync")


def summarize(fio_json: dict) -> list[JobRow]:
    rows = []
    for j in fio_json.get("jobs", []):
        row = JobRow(job=j["jobname"], runtime_ms=j.get("job_runtime"))
        for d in DIRECTIONS:
            s = j.get(d) or {}
            if s.get("total_ios"):
                lat = s.get("lat_ns") or s.get("clat_ns") or {}
                stats = IoStats(
                    ios=s["total_ios"],
                    iops=round(s.get("iops", 0.0), 1),
                    mean_ms=round(lat.get("mean", 0.0) / 1e6, 3),
                    p99_ms=round((lat.get("percentile") or {}).get("99.000000", 0) / 1e6, 3),
                )
                setattr(row, d, stats)
        rows.append(row)
    return rows


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
    with `runner` (runner.py: fio, or iotape-lanes for a plan of lanes)."""
    jobdir = Path(jobdir).resolve()
    record_to = Path(record_to) if record_to is not None else None
    anchor_record_to = Path(anchor_record_to) if anchor_record_to is not None else None
    man = load_manifest(jobdir)
    if man.hosts:
        from replayer.hosts import run as hostrun

        if record_to is not None or anchor_record_to is not None:
            raise IotapeError(
                "--record/--anchor-record: a multi-host plan is measured from fio's per-I/O "
                "logs of each host (record on a host with `iotape record` there)"
            )
        return hostrun.run(jobdir, man, destroy or [], host_iotape, say)
    program = runnermod.choose(runner, man, jobdir)
    create = check_targets(man, destroy or [])
    for p in (record_to, anchor_record_to):
        if p is not None:
            rec.check_output(Path(p), force)
    _create(create, man)
    (jobdir / "results").mkdir(exist_ok=True)
    devs = [t.path for t in man.targets if rdev_of(t.path) is not None]
    name: Runner = "iotape-lanes" if program == "lanes" else "fio"
    say(f"replaying {man.mode} plan with {name}, about {man.duration_s:.1f} s")
    jobfile = man.jobfile
    assert jobfile is not None  # only a multi-host plan has none
    # iotape-lanes writes fio's JSON shape, its "fio version" naming it (runner.py).
    result = _one(jobdir, jobfile, "results/fio.json", devs, record_to, force, man, program)
    summary = RunSummary(jobdir=str(jobdir), mode=man.mode, runner=name, jobs=summarize(result))
    if "issue_late_ns" in result:
        summary.issue_late_ms = {
            k: round(v / 1e6, 4) for k, v in result["issue_late_ns"].items() if k != "requests"
        }
    if record_to is not None:
        summary.record = str(record_to)
        summary.relabel = relabel(record_to, jobdir, man)
    if anchor_record_to is not None:
        anchor_job = man.anchor
        if not anchor_job:
            raise IotapeError(f"{jobdir}: the plan has no anchor job (synthetic mode)")
        say("replaying with fio's plain read_iolog (anchor)")
        anchor = _one(jobdir, anchor_job, "results/anchor.json", devs, anchor_record_to, force)
        summary.anchor = AnchorRun(record=str(anchor_record_to), jobs=summarize(anchor))
    summary.write(jobdir / "results" / "summary.json")
    return summary
