"""A replay spread over several hosts: `--host NAME=ADDRESS[:PORT]` and targets `HOST:PATH`.

fio already drives remote hosts: `fio --server` runs on each, and one controller
runs `fio --client=ADDR,PORT JOBFILE --client=…` with a job file per host. The
client sends each host its job file's text; everything that file names (the
target, `read_iolog` files) is opened on the host. So the plan writes, per host,
`hosts/NAME.fio` holding only that host's jobs, their targets as the host's own
paths and their iologs by JOBDIR's absolute path: JOBDIR is copied to the same
path on every host (docs/replay-hosts.md). A remote target cannot be opened here,
so it is planned like the dry-run placeholder: sized to what the trace needs and
aligned to 4 KiB (a multiple of every logical block size); the host checks it is
that large before the replay (hosts/check.py).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from pathlib import Path

from base.errors import IotapeError
from replayer.plan import targetmap
from replayer.plan.model import HostAddress, HostEntry, Job

DEFAULT_PORT = 8765  # fio's own default for --server and --client
REMOTE_BLOCK = 4096
# Added to the plan's start (plan.START_S) on a multi-host plan. A fio server's
# clock starts when it parses its job file (clocksource=cpu, recalibrated in the
# server's child for each run), and the RUN command comes later: a fio 3.33 server's
# connection loop checks its socket, then sleeps up to 1 s on a semaphore that no
# network input wakes (server.c handle_connection), so each command may wait up
# to 1 s. With the plain 0.5 s, a host's jobs began after their absolute start
# and each started on its own (measured: 3-16 ms apart within a host).
START_S = 1.5
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")


def parse(specs: list[str]) -> dict[str, HostAddress]:
    """`--host NAME=ADDRESS[:PORT]` -> {name: (address, port)}."""
    out: dict[str, HostAddress] = {}
    seen: dict[str, str] = {}
    for spec in specs:
        name, sep, rest = spec.partition("=")
        addr, colon, port = rest.partition(":")
        if not sep or not NAME.match(name) or not ADDRESS.match(addr):
            raise IotapeError(
                f"--host {spec}: expected NAME=ADDRESS[:PORT] (e.g. h1=10.0.0.5:8765), "
                "NAME of letters, digits, '.', '_' or '-'"
            )
        if colon and not (port.isdigit() and 0 < int(port) < 65536):
            raise IotapeError(f"--host {spec}: port {port!r} is not a TCP port number")
        if name in out:
            raise IotapeError(f"--host {spec}: host {name} is named twice")
        if addr in seen:
            # fio's client names the logs it brings back by address alone.
            raise IotapeError(
                f"--host {spec}: {addr} is also host {seen[addr]}; one fio server per address "
                "(fio names the logs it returns by address)"
            )
        seen[addr] = name
        out[name] = HostAddress(addr, int(port) if colon else DEFAULT_PORT)
    return out


def split(target: str) -> tuple[str, str] | None:
    """("host", "/path") for a target `HOST:/path`, else None."""
    host, sep, path = target.partition(":")
    if sep and path.startswith("/") and NAME.match(host):
        return host, path
    return None


def local_path(target: str) -> str:
    """The path a target has on its own host (the target itself when local)."""
    s = split(target)
    return s[1] if s else target


def check_mapping(mapping: dict[str, str], hosts: dict[str, HostAddress]) -> None:
    """With --host, every target names one of the hosts; without, none may."""
    for key, value in mapping.items():
        s = split(value)
        if not hosts:
            if s:
                raise IotapeError(
                    f"--target {key}={value}: names host {s[0]}; give --host {s[0]}=ADDRESS[:PORT]"
                )
            continue
        if s is None:
            raise IotapeError(
                f"--target {key}={value}: with --host every target is HOST:PATH "
                f"(e.g. {key}={next(iter(hosts))}:{value})"
            )
        if s[0] not in hosts:
            raise IotapeError(
                f"--target {key}={value}: host {s[0]} is not named by --host "
                f"(named: {', '.join(hosts)})"
            )


def remote_target(path: str) -> targetmap.Target:
    """A target on another host: unknown size, planned to what the trace needs."""
    return targetmap.Target(path, "remote", None, REMOTE_BLOCK)


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def host_jobs(jobs: list[Job], host: str) -> list[Job]:
    """The jobs of one host, their targets (and a synthetic job's filename) as the
    host's own paths."""
    out = []
    for j in jobs:
        s = split(j.target)
        if s is None or s[0] != host:
            continue
        opts = dict(j.options)
        if "filename" in opts:
            opts["filename"] = s[1]
        out.append(replace(j, target=s[1], options=opts))
    return out


def jobfile(text: str, jobdir: Path) -> str:
    """A host's job file from the plan's: iologs by JOBDIR's absolute path (the host
    opens them), and log times in Unix ms, the one clock the hosts' logs share, from
    which `replay run` measures each host's start (hosts/fidelity.py).

    Without log_offset: a fio 3.33 server does not tell its client that a log
    carries offsets (fio_send_iolog leaves the pdu's log_offset 0), so the client
    sizes the inflated log for entries without them and keeps the first 4/5 of the
    samples (measured: 14 of 18, 24 of 31). Without offsets every sample arrives;
    a synchronous job's samples pair with its iolog in order (hosts/fidelity.py)."""
    text = text.replace("read_iolog=iologs/", f"read_iolog={jobdir}/iologs/")
    text = text.replace("\nlog_offset=1\n", "\nlog_offset=0\n", 1)
    return text.replace("\n[global]\n", "\n[global]\nlog_unix_epoch=1\n", 1)


def write_parts(
    tmp: Path,
    jobdir: Path,
    hosts: dict[str, HostAddress],
    texts: dict[str, str],
    plan_jobs: list[Job],
) -> list[HostEntry]:
    """Write hosts/NAME.fio for each host; the manifest's `hosts` entries."""
    (tmp / "hosts").mkdir()
    out: list[HostEntry] = []
    for name, (addr, port) in hosts.items():
        jobs = host_jobs(plan_jobs, name)
        if not jobs:
            raise IotapeError(f"--host {name}: no --target names it; every host needs a target")
        (tmp / "hosts" / f"{name}.fio").write_text(jobfile(texts[name], jobdir))
        names = [j.name for j in jobs if j.entries is not None]
        logs = [tmp / "iologs" / f"{n}.log" for n in names]
        paths = sorted({j.target for j in jobs})
        out.append(
            HostEntry(
                name=name,
                address=addr,
                port=port,
                jobfile=f"hosts/{name}.fio",
                jobs=[j.name for j in jobs],
                targets=paths,
                iologs=names,
                iologs_sha256=_digest(logs) if logs else None,
            )
        )
    return out


def iologs_digest(jobdir: Path, host: HostEntry) -> str | None:
    """What `write_parts` recorded, recomputed from the iologs in `jobdir`
    (FileNotFoundError names a missing one)."""
    logs = [jobdir / "iologs" / f"{n}.log" for n in host.iologs]
    return _digest(logs) if logs else None
