"""`iotape replay run`: check the targets, run fio on the plan, record it, keep the results.

fio runs in JOBDIR (the job files name their iologs relative to it) with JSON
output and per-I/O latency logs into JOBDIR/results. With a record path, the
eBPF recorder captures the targets while fio runs, so original and replay are
measured the same way, at the device.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from iotape.errors import IotapeError
from iotape.recorder import record as rec
from iotape.replayer import plan as planmod
from iotape.replayer.safety import check_target, rdev_of


def load_manifest(jobdir: Path) -> dict:
    path = Path(jobdir) / "plan.json"
    try:
        man = json.loads(path.read_text())
    except FileNotFoundError:
        raise IotapeError(f"{jobdir}: no plan.json; make one with `iotape replay plan`") from None
    except json.JSONDecodeError as e:
        raise IotapeError(f"{path}: line {e.lineno}: not JSON: {e.msg}") from None
    if man.get("format") != planmod.PLAN_FORMAT or man.get("version") != planmod.PLAN_VERSION:
        raise IotapeError(f"{path}: not an iotape replay plan of version {planmod.PLAN_VERSION}")
    return man


def check_targets(man: dict, destroy: list[str]) -> None:
    for t in man["targets"]:
        if t["path"] == planmod.PLACEHOLDER:
            raise IotapeError("the plan was made without --target; plan again with one")
        if t["writes"]:
            check_target(t["path"], destroy)


def _fio_cmd(jobdir: Path, jobfile: str, output: str) -> list[str]:
    fio = shutil.which("fio")
    if fio is None:
        raise IotapeError("fio not found: install fio")
    inner = (
        f"cd {shlex.quote(str(jobdir))} && exec {shlex.quote(fio)} --output-format=json "
        f"--output={shlex.quote(output)} --eta=never {shlex.quote(jobfile)}"
    )
    return ["sh", "-c", inner]


def _one(
    jobdir: Path, jobfile: str, output: str, devs: list[str], record_to: Path | None, force: bool
) -> dict:
    cmd = _fio_cmd(jobdir, jobfile, output)
    if record_to is not None:
        if not devs:
            raise IotapeError("--record: the plan has no block-device target to record")
        res = rec.record(
            rec.RecordOptions(
                devices=devs,
                output=record_to,
                command=cmd,
                force=force,
                metadata={"replay_of": str(jobdir), "jobfile": jobfile},
            )
        )
        rc = res.command_exit
    else:
        rc = subprocess.run(cmd, check=False).returncode
    out = jobdir / output
    if rc != 0:
        raise IotapeError(f"{jobdir / jobfile}: fio exited with status {rc}; see {out}")
    try:
        text = out.read_text()
        # fio may print notes before its JSON in the same file.
        return json.loads(text[text.index("{") :])
    except (OSError, ValueError):
        raise IotapeError(f"{out}: fio wrote no JSON result") from None


def summarize(fio_json: dict) -> list[dict]:
    rows = []
    for j in fio_json.get("jobs", []):
        row = {"job": j["jobname"], "runtime_ms": j.get("job_runtime")}
        for d in ("read", "write", "trim", "sync"):
            s = j.get(d) or {}
            if s.get("total_ios"):
                lat = s.get("lat_ns") or s.get("clat_ns") or {}
                row[d] = {
                    "ios": s["total_ios"],
                    "iops": round(s.get("iops", 0.0), 1),
                    "mean_ms": round(lat.get("mean", 0.0) / 1e6, 3),
                    "p99_ms": round((lat.get("percentile") or {}).get("99.000000", 0) / 1e6, 3),
                }
        rows.append(row)
    return rows


def run(
    jobdir: Path,
    record_to: Path | None = None,
    destroy: list[str] | None = None,
    anchor_record_to: Path | None = None,
    force: bool = False,
    say: Callable[[str], None] = lambda s: None,
) -> dict:
    """Run the plan (and fio's plain anchor replay when `anchor_record_to` is given)."""
    jobdir = Path(jobdir).resolve()
    record_to = Path(record_to) if record_to is not None else None
    anchor_record_to = Path(anchor_record_to) if anchor_record_to is not None else None
    man = load_manifest(jobdir)
    check_targets(man, destroy or [])
    for p in (record_to, anchor_record_to):
        if p is not None:
            rec.check_output(Path(p), force)
    (jobdir / "results").mkdir(exist_ok=True)
    devs = [t["path"] for t in man["targets"] if rdev_of(t["path"]) is not None]
    say(f"replaying {man['mode']} plan, about {man['duration_s']:.1f} s")
    result = _one(jobdir, man["jobfile"], "results/fio.json", devs, record_to, force)
    summary = {"jobdir": str(jobdir), "mode": man["mode"], "jobs": summarize(result)}
    if record_to is not None:
        summary["record"] = str(record_to)
    if anchor_record_to is not None:
        if not man.get("anchor"):
            raise IotapeError(f"{jobdir}: the plan has no anchor job (synthetic mode)")
        say("replaying with fio's plain read_iolog (anchor)")
        anchor = _one(jobdir, man["anchor"], "results/anchor.json", devs, anchor_record_to, force)
        summary["anchor"] = {"record": str(anchor_record_to), "jobs": summarize(anchor)}
    (jobdir / "results" / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
