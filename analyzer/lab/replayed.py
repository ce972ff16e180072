"""A configuration's gain predicted by replaying the baseline's recording on it (issue
38): `replay plan --timing dependent` (each thread's requests issued as their
predecessors complete, with the recorded think times) of the baseline's trace, run by
`replay run` onto the slow device as the baseline had it (the reference) and as the
configuration has it; the predicted gain is the ratio of the two replays' database
read rates (the session threads' stream: the lazy writer and the log are paced by the
clock, not by the device, and run as long on either), so the replay's own overheads
are on both sides."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from replayer.plan.build import PlanOptions, plan
from replayer.run import execute


def replay(trace: Path, dev: str, jobdir: Path) -> dict[str, Any]:
    """The dependent replay of `trace` onto `dev` (all its devices mapped there): its
    requests, their rate over the longest job, read and write p50 (ms), wall time."""
    man, summary, res, wall = plan_and_run(trace, dev, jobdir, "dependent")
    jobs = res["jobs"]
    out: dict[str, Any] = {**figures(res), "wall_s": wall}
    out["streams"] = _streams(jobs)
    out["issued_before_predecessor"] = summary.issued_before_predecessor
    out["dependencies"] = man.get("dependencies")
    return out


def plan_and_run(
    trace: Path, dev: str, jobdir: Path, timing: str
) -> tuple[dict[str, Any], Any, dict[str, Any], float]:
    """`replay plan --timing TIMING` of `trace` onto `dev` (all its devices mapped
    there; a recorded plan as lanes) and `replay run`: (the plan, the run's
    summary, results/fio.json, the run's wall time in s)."""
    opts = PlanOptions(
        trace=trace, jobdir=jobdir, targets=[f"all={dev}"], timing=timing, destroy=[dev],
        force=True, layout="lanes" if timing == "recorded" else "auto", mode="exact",
    )  # fmt: skip
    man = plan(opts)
    t = time.monotonic()
    summary = execute.run(jobdir, destroy=[dev], force=True)
    wall = time.monotonic() - t
    return dict(man), summary, json.loads((jobdir / "results" / "fio.json").read_text()), wall


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
    of its jobs' runtimes and so its rate."""
    out: dict[str, dict[str, float]] = {}
    for j in jobs:
        parts = str(j["jobname"]).split(".")
        stream = parts[1] if len(parts) >= 3 else str(j["jobname"])
        s = out.setdefault(stream, {"ios": 0, "runtime_s": 0.0})
        s["ios"] += j["read"]["total_ios"] + j["write"]["total_ios"]
        s["runtime_s"] = max(s["runtime_s"], j["job_runtime"] / 1e3)
    for s in out.values():
        s["per_s"] = s["ios"] / s["runtime_s"] if s["runtime_s"] else 0.0
    return out


def gain(
    reference: dict[str, Any], config: dict[str, Any], stream: str = "db-read"
) -> float | None:
    """The configuration's rate of `stream` over the reference's."""
    a = config.get("streams", {}).get(stream, {}).get("per_s")
    b = reference.get("streams", {}).get(stream, {}).get("per_s")
    return a / b if a and b else None
