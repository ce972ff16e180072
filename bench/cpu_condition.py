"""The state of this VM's CPUs around a timed run, and a way to hold it (issue 34's
truth). The engine and the replay hand every synchronous request from one
thread to another (the loop device's worker, the log writer, the session
waiting for it); on a vCPU with nothing else to run, the cpuidle driver
(haltpoll here, booted with `haltpoll.guest_halt_poll_ns=0`: no guest polling)
halts it, and its next wake-up is an IPI through the hypervisor. So how idle
the rest of the VM is moves the run.

Conditions a bench can give a run (`hold`):
- `idle`: as the VM is (halting idle vCPUs, whatever the other work leaves);
- `awake`: /dev/cpu_dma_latency held at 0 for the run: the cpuidle governors
  then pick only state0 (POLL: the idle vCPU spins in the guest, its
  TIF_POLLING flag set so a wake-up needs no IPI). The kernel drops the request
  when the file is closed, also when this process dies: nothing to restore;
- `haltpoll`: haltpoll's own guest polling turned on for the run
  (guest_halt_poll_ns HALT_POLL_NS, the kernel's default, where the boot line
  set 0), set back to what it was on leaving, also on failure or SIGTERM (a
  SIGKILL would leave it: the bench says so before it writes);
- `spin`: a nice-19 busy loop beside the run (a busy vCPU does not halt, but
  the loop is a task the scheduler shares the vCPU with).

`sample()` before and `delta()` after a run say what the condition was: idle
entries and time per idle state, rescheduling and function-call IPIs, all
CPUs' busy time (and steal) from /proc/stat. `others()` samples the CPUs busy
just before a run: the other work on the VM. `wake_us()` times a pipe
ping-pong between two processes pinned to different vCPUs: the round trip of
two wake-ups across vCPUs, in the condition held.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CPUIDLE = Path("/sys/devices/system/cpu/cpuidle")
CPUS = Path("/sys/devices/system/cpu")
HALTPOLL = Path("/sys/module/haltpoll/parameters")
DMA_LATENCY = "/dev/cpu_dma_latency"
CONDITIONS = ("idle", "awake", "haltpoll", "spin")
HALT_POLL_NS = 200_000
TICK = os.sysconf("SC_CLK_TCK")
SPIN = ["nice", "-n", "19", "python3", "-c", "while True: pass"]
IPIS = ("RES", "CAL")  # rescheduling, function call (remote wake-up lists)


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def config() -> dict:
    """The cpuidle driver, governor, states and haltpoll's parameters."""
    states = sorted((CPUS / "cpu0" / "cpuidle").glob("state*"))
    return {
        "driver": _read(CPUIDLE / "current_driver"),
        "governor": _read(CPUIDLE / "current_governor"),
        "states": {
            s.name: {"name": _read(s / "name"), "exit_latency_us": _read(s / "latency")}
            for s in states
        },
        "haltpoll": {p.name: _read(p) for p in sorted(HALTPOLL.glob("*"))},
    }


@dataclass(frozen=True)
class Sample:
    t: float
    busy_s: float  # all CPUs, /proc/stat user+nice+system+irq+softirq
    steal_s: float
    idle: dict[str, tuple[int, int]]  # state name -> (entries, microseconds), all CPUs
    ipis: dict[str, int]


def _idle() -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for s in CPUS.glob("cpu[0-9]*/cpuidle/state*"):
        name = _read(s / "name") or s.name
        usage, us = int(_read(s / "usage") or 0), int(_read(s / "time") or 0)
        n, t = out.get(name, (0, 0))
        out[name] = (n + usage, t + us)
    return out


def _ipis() -> dict[str, int]:
    out = dict.fromkeys(IPIS, 0)
    for line in Path("/proc/interrupts").read_text().splitlines():
        head, _, rest = line.strip().partition(":")
        if head in out:
            out[head] = sum(int(x) for x in rest.split() if x.isdigit())
    return out


def _stat() -> tuple[float, float]:
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle_t, _iowait, irq, softirq, steal = f[:8]
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


def sample() -> Sample:
    busy, steal = _stat()
    return Sample(time.monotonic(), busy, steal, _idle(), _ipis())


def delta(a: Sample, b: Sample, requests: int | None = None) -> dict:
    """What the CPUs did between two samples: busy CPUs, idle entries and the share
    of the wall time in each idle state, IPIs; per request where given."""
    wall = b.t - a.t
    idle = {
        k: {
            "entries": b.idle[k][0] - a.idle.get(k, (0, 0))[0],
            "cpus": round((b.idle[k][1] - a.idle.get(k, (0, 0))[1]) / 1e6 / wall, 3),
        }
        for k in b.idle
    }
    ipis = {k: b.ipis[k] - a.ipis[k] for k in IPIS}
    out: dict = {
        "wall_s": round(wall, 3),
        "host_cpus": round((b.busy_s - a.busy_s) / wall, 2),
        "steal_s": round(b.steal_s - a.steal_s, 3),
        "idle": idle,
        "ipis": ipis,
    }
    if requests:
        entries = sum(v["entries"] for v in idle.values())
        halts = sum(v["entries"] for k, v in idle.items() if k != "POLL")
        out["idle_entries_per_request"] = round(entries / requests, 3)
        # the entries that halt the vCPU (every state but POLL): a wake-up exit each
        out["halts_per_request"] = round(halts / requests, 3)
        out["ipis_per_request"] = round(sum(ipis.values()) / requests, 3)
    return out


def others(quiet_s: float = 0.5) -> float:
    """All CPUs busy over `quiet_s` before a run: the other work on the VM."""
    a = _stat()[0]
    time.sleep(quiet_s)
    return round((_stat()[0] - a) / quiet_s, 2)


@contextlib.contextmanager
def hold(condition: str) -> Iterator[None]:
    """Run the body in `condition` (CONDITIONS); undone on leaving, also on failure."""
    if condition == "idle":
        yield
    elif condition == "awake":
        fd = os.open(DMA_LATENCY, os.O_WRONLY)
        try:
            os.write(fd, struct.pack("i", 0))  # microseconds of exit latency allowed
            yield
        finally:
            os.close(fd)  # the kernel drops the request with the file
    elif condition == "haltpoll":
        with _haltpoll(HALT_POLL_NS):
            yield
    elif condition == "spin":
        proc = subprocess.Popen(SPIN)
        try:
            time.sleep(0.1)  # the interpreter is up and spinning
            yield
        finally:
            proc.kill()
            proc.wait()
    else:
        raise ValueError(f"condition {condition!r}: one of {', '.join(CONDITIONS)}")


@dataclass
class Held:
    """One run in a condition: the other work before it, the wake-up probe in the
    condition, and samples around the run itself."""

    condition: str
    others_cpus: float
    wake: dict = field(default_factory=dict)
    start: Sample | None = None
    end: Sample | None = None

    def report(self, requests: int | None = None) -> dict:
        out = {"condition": self.condition, "others_cpus_before": self.others_cpus,
               "wake_p50_us": self.wake.get("p50_us")}  # fmt: skip
        if self.start is not None and self.end is not None:
            out |= delta(self.start, self.end, requests)
        return out


@contextlib.contextmanager
def held(condition: str, quiet_s: float = 0.5) -> Iterator[Held]:
    """The body (one timed run) in `condition`, measured: `Held.report()` after it."""
    h = Held(condition, others(quiet_s))
    with hold(condition):
        h.wake = wake_us()
        h.start = sample()
        yield h
        h.end = sample()


@contextlib.contextmanager
def _haltpoll(ns: int, knob: Path = HALTPOLL / "guest_halt_poll_ns") -> Iterator[None]:
    """guest_halt_poll_ns at `ns`, then back; SIGTERM ends the body by SystemExit so
    that the value is set back then too."""
    was = knob.read_text().strip()
    print(f"cpu_condition: {knob} {was} -> {ns} for the run (write {was} back if killed)",
          file=sys.stderr)  # fmt: skip

    def _term(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, _term)
    try:
        knob.write_text(str(ns))
        yield
    finally:
        knob.write_text(was)
        signal.signal(signal.SIGTERM, old)


def wake_us(rounds: int = 2000) -> dict:
    """Round trips of one byte through two pipes between this process (pinned to
    one vCPU) and a child (pinned to another): each a wake-up on each side.
    Median and 90th percentile in microseconds."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"p50_us": None, "p90_us": None}
    mine = os.sched_getaffinity(0)
    ping_r, ping_w = os.pipe()
    pong_r, pong_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the echo, on the second vCPU
        try:
            os.sched_setaffinity(0, {cpus[1]})
            while os.read(ping_r, 1) == b"x":
                os.write(pong_w, b"x")
        finally:
            os._exit(0)
    try:
        os.sched_setaffinity(0, {cpus[0]})
        times = []
        for _ in range(rounds):
            t = time.perf_counter_ns()
            os.write(ping_w, b"x")
            os.read(pong_r, 1)
            times.append(time.perf_counter_ns() - t)
    finally:
        os.write(ping_w, b"q")
        os.waitpid(pid, 0)
        os.sched_setaffinity(0, mine)
        for fd in (ping_r, ping_w, pong_r, pong_w):
            os.close(fd)
    q = statistics.quantiles(times, n=10)
    return {"p50_us": round(statistics.median(times) / 1e3, 1), "p90_us": round(q[8] / 1e3, 1)}
