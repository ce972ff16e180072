"""HostsRunner: `iotape replay run` of a multi-host plan: check every host, then one
`fio --client`.

Before any I/O (HostsRunner.check), each host is asked, all at once, through fio's client:
- first (`results/HOST/probe.fio`, a job that touches nothing) that a fio server
  answers at ADDRESS:PORT (else: unreachable), and which fio it runs (the probe fio
  prints; client and servers must be the same version). Only when every host
  answered does any host look at its devices: an unreachable host stops the run
  before even a check reads a device (blkid does);
- then, with a job file of its own (`results/HOST/preflight.fio`):
- `check`: a job that does no I/O (create_only on /dev/zero) whose exec_prerun runs
  `iotape replay check-host` on the host (hosts/check.py: the safety checks, size,
  iologs), which writes its verdict file;
- `verdict`: reads that file, whose size is the verdict (fio returns a job's byte
  count, not a command's output), and unlinks it; a missing file means iotape did
  not run there;
- `target.K`: fio's own view of each target (create_only: set-up, no I/O): it
  exists, and a written one is not mounted (fio's allow_mounted_write=0).
Then (HostsRunner.replay) one controller,
`fio --client=A1,P1 hosts/h1.fio --client=A2,P2 hosts/h2.fio`, starts every host's
part; fio writes the logs each host returns as `results/LOG.ADDRESS`, moved here to
`results/HOST/LOG`, and each host's jobs of the client's JSON go to
`results/HOST/fio.json`.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from base.errors import IotapeError
from replayer.hosts import check as hostcheck
from replayer.hosts import fidelity as hostfid
from replayer.plan.model import HostEntry, Manifest
from replayer.run.interface import Say
from replayer.run.results import HostRun, JobRow, RunSummary
from replayer.run.summarize import summarize

PREFLIGHT_TIMEOUT_S = 30
PROBE = re.compile(r"^hostname=.*\bfio=(?P<version>\S+?),")


def _fio() -> str:
    fio = shutil.which("fio")
    if fio is None:
        raise IotapeError("fio not found: install fio")
    return fio


def local_version() -> str:
    out = subprocess.run([_fio(), "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def _destroy_for(host: str, destroy: list[str]) -> list[str]:
    """--destroy-data-on HOST:PATH entries of one host, as its own paths."""
    out = []
    for d in destroy:
        name, sep, path = d.partition(":")
        if sep and name == host:
            out.append(path)
    return out


def preflight_text(
    jobdir: Path, host: HostEntry, man: Manifest, iotape: str, destroy: list[str]
) -> str:
    verdict = f"/tmp/iotape-verdict.{host.name}.{uuid.uuid4().hex[:12]}"
    cmd = [iotape, "replay", "check-host", str(jobdir), host.name, "--verdict", verdict]
    for d in _destroy_for(host.name, destroy):
        cmd += ["--destroy-data-on", d]
    writes = {t.path: t.writes for t in man.targets}
    lines = [
        "; iotape replay run: checks host "
        f"{host.name} before the replay; reads nothing but its own verdict file\n",
        "[global]\nthread=1\nallow_file_create=0\nallow_mounted_write=0\n",
        "\n[check]\nfilename=/dev/zero\nrw=read\nsize=4k\ncreate_only=1\n",
        f"exec_prerun={shlex.join(cmd)}\n",
        f"\n[verdict]\nstonewall\nfilename={verdict}\nrw=read\nbs=512\ncreate_serialize=0\n",
        "unlink=1\n",
    ]
    for k, path in enumerate(host.targets):
        rw = "write" if writes.get(f"{host.name}:{path}") else "read"
        lines.append(
            f"\n[target.{k}]\nstonewall\nfilename={path}\nrw={rw}\ncreate_only=1\n"
            "create_serialize=0\n"
        )
    return "".join(lines)


def _client_json(text: str) -> dict | None:
    at = text.find("\n{\n")
    start = 0 if text.startswith("{") else at + 1 if at >= 0 else -1
    if start < 0:
        return None
    try:
        return json.loads(text[start:])
    except ValueError:
        return None


def _fio_says(text: str) -> str:
    """fio's first error line, without the host prefix."""
    for line in text.splitlines():
        line = re.sub(r"^<[^>]*>\s*", "", line).strip()
        if line.startswith("fio:") or "error" in line.lower():
            return line
    return ""


PROBE_JOB = (
    "; iotape replay run: is a fio server there, and which fio? (touches nothing)\n"
    "[probe]\nthread=1\nfilename=/dev/zero\nrw=read\nsize=4k\ncreate_only=1\n"
)


def _ask(
    jobdir: Path, host: HostEntry, stem: str, text: str, want: str
) -> str | tuple[str, str, int]:
    """Run job file `text` on the host through fio's client: (stdout, whole output,
    rc), or the one line saying the host cannot run it (unreachable, other fio)."""
    name, where = host.name, f"{host.address}:{host.port}"
    hdir = jobdir / "results" / name
    hdir.mkdir(parents=True, exist_ok=True)
    job = hdir / f"{stem}.fio"
    job.write_text(text)
    cmd = [
        _fio(),
        "--output-format=normal,json",
        "--eta=never",
        f"--client={host.address},{host.port}",
        str(job),
    ]
    try:
        p = subprocess.run(
            cmd, capture_output=True, text=True, timeout=PREFLIGHT_TIMEOUT_S, cwd=hdir
        )
    except subprocess.TimeoutExpired:
        return (
            f"host {name} ({where}): unreachable: no fio server answered in "
            f"{PREFLIGHT_TIMEOUT_S} s (run `fio --server=ip:{host.address},{host.port}` "
            f"there; open TCP port {host.port})"
        )
    text = p.stdout + p.stderr
    (hdir / f"{stem}.out").write_text(text)
    probe = next((m for line in text.splitlines() if (m := PROBE.match(line))), None)
    if probe is None:
        return (
            f"host {name} ({where}): unreachable: {_fio_says(text) or 'no fio server answered'} "
            f"(run `fio --server=ip:{host.address},{host.port}` there; open TCP port "
            f"{host.port})"
        )
    if probe.group("version") != want:
        return (
            f"host {name} ({where}): runs {probe.group('version')}, this controller {want}: "
            "install the same fio version on every host"
        )
    return p.stdout, text, p.returncode


def probe(jobdir: Path, host: HostEntry, want: str) -> str | None:
    """None when the host's fio server answers and runs fio `want`, else why not."""
    got = _ask(jobdir, host, "probe", PROBE_JOB, want)
    return got if isinstance(got, str) else None


def preflight(
    jobdir: Path, host: HostEntry, man: Manifest, iotape: str, destroy: list[str], want: str
) -> str | None:
    """None when host `host` may run its part, else the one line saying why not."""
    name = host.name
    got = _ask(jobdir, host, "preflight", preflight_text(jobdir, host, man, iotape, destroy), want)
    if isinstance(got, str):
        return got
    stdout, text, rc = got
    doc = _client_json(stdout) or {}
    jobs = {j.get("jobname"): j for j in doc.get("client_stats") or []}
    verdict = jobs.get("verdict")
    if verdict is None or verdict.get("error") or "read" not in verdict:
        said = _fio_says(text)
        if "mounted" in said:
            return f"host {name}: fio refused a target there: {said}"
        return (
            f"host {name}: iotape's target check did not run there (`{iotape} replay "
            "check-host` failed: is iotape installed on the host? give its path with "
            "--host-iotape; fio writes its output to check.prerun.txt in fio --server's "
            "directory there)"
        )
    why = hostcheck.explain(name, host.targets, int(verdict["read"].get("io_bytes") or 0))
    if why:
        return why
    if rc != 0:
        return f"host {name}: fio refused the targets there: {_fio_says(text) or rc}"
    return None


def _split_results(jobdir: Path, man: Manifest, doc: dict) -> dict[str, dict]:
    """The client's JSON as one fio.json per host, the logs moved under results/HOST."""
    results = jobdir / "results"
    per: dict[str, dict] = {}
    for host in man.hosts:
        jobs = [
            j
            for j in doc.get("client_stats") or []
            if j.get("hostname") == host.address
            and j.get("port") == host.port
            and j.get("jobname") != "All clients"
        ]
        one = {k: doc[k] for k in ("fio version", "timestamp", "time") if k in doc}
        one["hostname"] = host.address
        one["jobs"] = jobs
        hdir = results / host.name
        (hdir / "fio.json").write_text(json.dumps(one, indent=2) + "\n")
        suffix = "." + host.address
        for p in results.iterdir():
            if p.is_file() and p.name.endswith(suffix):
                p.replace(hdir / p.name[: -len(suffix)])
        per[host.name] = one
    return per


class HostsRunner:
    """Every host's part of the plan at once, through one `fio --client`: each host
    checked first (probe, then preflight), each host's results apart."""

    no_record: str | None = (
        "--record/--anchor-record: a multi-host plan is measured from fio's per-I/O "
        "logs of each host (record on a host with `iotape record` there)"
    )

    def __init__(
        self, jobdir: Path, man: Manifest, destroy: list[str], iotape: str = "iotape"
    ) -> None:
        self.jobdir, self.man, self.destroy, self.iotape = jobdir, man, destroy, iotape
        self.want = ""

    def check(self, say: Say) -> None:
        jobdir, man = self.jobdir, self.man
        self.want = want = local_version()
        results = jobdir / "results"
        results.mkdir(exist_ok=True)
        for host in man.hosts:
            # Logs of an earlier run would be taken for this one's.
            shutil.rmtree(results / host.name, ignore_errors=True)
        say(f"checking {len(man.hosts)} hosts")
        with ThreadPoolExecutor(len(man.hosts)) as pool:
            for step in (
                lambda h: probe(jobdir, h, want),
                lambda h: preflight(jobdir, h, man, self.iotape, self.destroy, want),
            ):
                why = next((w for w in pool.map(step, man.hosts) if w), None)
                if why:
                    raise IotapeError(why)

    def prepare(self) -> None:
        pass

    def replay(self, record_to: Path | None, say: Say) -> RunSummary:
        assert record_to is None  # no_record
        jobdir, man = self.jobdir, self.man
        results = jobdir / "results"
        cmd = [_fio(), "--output-format=json", "--eta=never"]
        for host in man.hosts:
            cmd += [f"--client={host.address},{host.port}", host.jobfile]
        say(f"replaying {man.mode} plan on {len(man.hosts)} hosts, about {man.duration_s:.1f} s")
        launch_ns = time.time_ns()
        with (results / "client.json").open("w") as out, (results / "client.err").open("w") as err:
            rc = subprocess.run(cmd, cwd=jobdir, stdout=out, stderr=err, check=False).returncode
        text = (results / "client.json").read_text()
        doc = _client_json(text)
        if rc != 0 or doc is None:
            said = _fio_says(text + (results / "client.err").read_text())
            raise IotapeError(
                f"{jobdir}: fio --client exited with status {rc}: "
                f"{said or 'see results/client.json'}"
            )
        per = _split_results(jobdir, man, doc)
        failed = [
            f"{h}/{j['jobname']}: error {j['error']}"
            for h, one in per.items()
            for j in one["jobs"]
            if j.get("error")
        ]
        if failed:
            raise IotapeError(
                f"{jobdir}: fio reported errors on the hosts: {'; '.join(failed[:3])}"
            )
        starts = hostfid.starts(jobdir, man, launch_ns)
        return RunSummary(
            jobdir=str(jobdir),
            mode=man.mode,
            runner="fio",
            hosts={h: HostRun(jobs=summarize(one), start=starts.get(h)) for h, one in per.items()},
            launch_epoch_ns=launch_ns,
            jobs=[
                row.model_copy(update={"job": f"{h}/{row.job}"})
                for h, one in per.items()
                for row in summarize(one)
            ],
        )

    def anchor(self, record_to: Path, say: Say) -> list[JobRow]:
        raise IotapeError(self.no_record or "")
