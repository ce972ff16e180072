"""A configuration's gain predicted by replaying the baseline's recording on it (issue
38): `replay plan --timing dependent` (each thread's requests issued as their
predecessors complete, with the recorded think times) of the baseline's trace, run by
`replay run` onto the slow device as the baseline had it (the reference) and as the
configuration has it. The predicted gain is the closed loop's (Little's law for the
engine's session threads) with each replay's mean database read latency: (reference
latency + other) / (configuration's latency + other), `other` the baseline's time per
read outside reads. Not the ratio of the replays' read rates: the replayed session
threads wait on the log writer's requests (a read after a commit's log write: a cross
edge), and the log writer keeps its recorded think times, so that wait stays about as
long on a faster device (7-10 s a thread in a 60 s trace, on the array cold or with its
tier or cache) where the engine's threads read 95 % of their time in every
configuration (docs/hybrid.md); the rates under-predicted the read cache by 26 %. The
replay still gives the latency: it meets the device's fills, migrations and destages
under the trace's own mix of reads and writes."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from replayer.plan.build import PlanOptions, plan
from replayer.run import execute


def replay(trace: Path, dev: str | dict[str, str], jobdir: Path) -> dict[str, Any]:
    """The dependent replay of `trace` onto `dev` (all its devices mapped there; or
    each recorded device, by name, to a device of its own: two controllers'): its
    requests, their rate over the longest job, read and write p50 (ms), wall time."""
    return _result(*plan_and_run(trace, dev, jobdir, "dependent"))


def _result(man: dict[str, Any], summary: Any, res: dict[str, Any], wall: float) -> dict[str, Any]:
    jobs = res["jobs"]
    out: dict[str, Any] = {**figures(res), "wall_s": wall}
    out["streams"] = _streams(jobs)
    out["issued_before_predecessor"] = summary.issued_before_predecessor
    out["dependencies"] = man.get("dependencies")
    return out


Target = str | dict[str, str]  # one device for all, or recorded device NAME -> device


def plan_and_run(
    trace: Path, dev: Target, jobdir: Path, timing: str, extra: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Any, dict[str, Any], float]:
    """`replay plan --timing TIMING` of `trace` onto `dev` (all its devices mapped
    there, or recorded device NAME to dev[NAME]; a recorded plan as lanes; `extra`:
    other PlanOptions) and `replay run`: (the plan, the run's summary,
    results/fio.json, the run's wall time in s)."""
    return run_planned(planned(trace, dev, jobdir, timing, extra), dev, jobdir)


def _devices(dev: Target) -> tuple[list[str], list[str]]:
    """The plan's targets (NAME=PATH) and the devices the replay may overwrite."""
    mapping = {"all": dev} if isinstance(dev, str) else dev
    return [f"{n}={p}" for n, p in mapping.items()], list(dict.fromkeys(mapping.values()))


def planned(
    trace: Path, dev: Target, jobdir: Path, timing: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`replay plan --timing TIMING` of `trace` onto `dev` (as `plan_and_run`; a
    recorded plan as lanes): the plan's manifest."""
    targets, devs = _devices(dev)
    # Every configuration gets the same requests: the prediction compares their
    # latencies under the trace's own mix, so a log write is never taken into
    # the one before it (group commit: how many are depends on each device's timing).
    gc = "recorded" if timing == "dependent" else "join"
    opts = PlanOptions(
        trace=trace, jobdir=jobdir, targets=targets, timing=timing, destroy=devs,
        force=True, layout="lanes" if timing == "recorded" else "auto", mode="exact",
        group_commit=gc, **(extra or {}),
    )  # fmt: skip
    return dict(plan(opts))


def run_planned(
    man: dict[str, Any], dev: Target, jobdir: Path
) -> tuple[dict[str, Any], Any, dict[str, Any], float]:
    """`replay run` of a plan made by `planned`: (the plan, the run's summary,
    results/fio.json, the run's wall time in s)."""
    t = time.monotonic()
    summary = execute.run(jobdir, destroy=_devices(dev)[1], force=True)
    wall = time.monotonic() - t
    return man, summary, json.loads((jobdir / "results" / "fio.json").read_text()), wall


def replay_at_once(
    trace: Path, runs: list[tuple[Target, Path, Path | None]]
) -> list[dict[str, Any]]:
    """The dependent replays of `trace`, one per (device or mapping of recorded devices
    to devices, job directory, a warm-up's job directory or None), all planned first
    (Python, one after another), then run at the same time, one thread per run (its
    warm-up replay first where named): `replay`'s result for each, in order. Each run's
    devices are its own (emulated arrays whose models run on their own clocks: one
    replay's load does not reach another's). Together they cost little CPU (an array's
    server 0.05-0.13 of a core at the lab's load, the whole lab 0.19 on average at its
    default size; docs/hybrid.md), so running them at once shortens the lab's
    prediction without changing what each measures."""
    plans = [
        (planned(trace, dev, job, "dependent"),
         planned(trace, dev, warm, "dependent") if warm is not None else None)
        for dev, job, warm in runs
    ]  # fmt: skip

    def one(i: int) -> dict[str, Any]:
        dev, job, warm = runs[i]
        man, warm_man = plans[i]
        if warm is not None and warm_man is not None:
            run_planned(warm_man, dev, warm)
        return _result(*run_planned(man, dev, job))

    with ThreadPoolExecutor(max_workers=max(1, len(runs))) as pool:
        return list(pool.map(one, range(len(runs))))


def figures(res: dict[str, Any]) -> dict[str, Any]:
    """Requests, their rate and the read and write p50 (ms) of fio's JSON
    (group_reporting: one job of all threads) or iotape-lanes' (a job per submitter,
    run at once: all requests over the run's span; a p50 the median of the jobs')."""
    jobs = res["jobs"]
    ios = sum(j[d]["total_ios"] for j in jobs for d in ("read", "write"))
    if res.get("fio version") == "iotape-lanes":
        # The run's span (as the store takes it), else the longest job's.
        span = res.get("elapsed_ms") or max(j["job_runtime"] for j in jobs)
        runtime_s = span / 1e3
        iops = ios / runtime_s if runtime_s else None
    else:
        iops = sum(j[d]["iops"] for j in jobs for d in ("read", "write"))
    out: dict[str, Any] = {"ios": ios, "iops": iops}
    for d in ("read", "write"):
        p = [j[d]["clat_ns"]["percentile"]["50.000000"] for j in jobs if j[d]["total_ios"]]
        out[f"{d}_p50_ms"] = sorted(p)[len(p) // 2] / 1e6 if p else None
    return out


def _streams(jobs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per stream (a lanes job is named TARGET.STREAM.tTID): its requests, the longest
    of its jobs' runtimes and so its rate, and its reads' mean completion latency (ms,
    over all its jobs' reads; None without reads)."""
    out: dict[str, dict[str, Any]] = {}
    read_ns: dict[str, float] = {}
    for j in jobs:
        parts = str(j["jobname"]).split(".")
        stream = parts[1] if len(parts) >= 3 else str(j["jobname"])
        s = out.setdefault(stream, {"ios": 0, "runtime_s": 0.0, "reads": 0})
        s["ios"] += j["read"]["total_ios"] + j["write"]["total_ios"]
        s["reads"] += j["read"]["total_ios"]
        s["runtime_s"] = max(s["runtime_s"], j["job_runtime"] / 1e3)
        read_ns[stream] = read_ns.get(stream, 0.0) + (
            j["read"]["total_ios"] * j["read"]["clat_ns"]["mean"] if j["read"]["total_ios"] else 0.0
        )
    for name, s in out.items():
        s["per_s"] = s["ios"] / s["runtime_s"] if s["runtime_s"] else 0.0
        s["read_ms_mean"] = read_ns[name] / s["reads"] / 1e6 if s["reads"] else None
    return out


def rate_gain(
    reference: dict[str, Any], config: dict[str, Any], stream: str = "db-read"
) -> float | None:
    """The configuration's replayed rate of `stream` over the reference's (the
    replay's own: waits on other streams' replayed clocks included)."""
    a = config.get("streams", {}).get(stream, {}).get("per_s")
    b = reference.get("streams", {}).get(stream, {}).get("per_s")
    return a / b if a and b else None


def gain(
    reference: dict[str, Any],
    config: dict[str, Any],
    other_ms: float = 0.0,
    stream: str = "db-read",
) -> float | None:
    """The closed loop's gain of `stream`'s rate: (the reference's replayed mean read
    latency + other_ms) / (the configuration's + other_ms), `other_ms` a reader's time
    per read outside its reads (from the baseline: the same on either device)."""
    a = config.get("streams", {}).get(stream, {}).get("read_ms_mean")
    b = reference.get("streams", {}).get(stream, {}).get("read_ms_mean")
    return (b + other_ms) / (a + other_ms) if a and b else None
