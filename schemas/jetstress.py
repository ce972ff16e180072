"""The Jetstress verdict: the thresholds, the checks and the one function that
applies them (contracts.toml [jetstress]).

Both verdicts use it: the workload's report (per database, from the engine's own
figures) and `iotape analyze verdict` / the API's /runs/{run}/verdict (overall and
per device, from a trace's histograms). So the check names are the same in the
report, the CLI tables, the API and JUnit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, NotRequired

from typing_extensions import TypedDict

from schemas import contracts

MODES = ("performance", "stress")


class Figures(NamedTuple):
    """One stream's latency in the selection judged: None where it has no requests."""

    requests: int
    avg_ms: float | None
    max_ms: float | None


# One check as every verdict reports it (the workload's report, `iotape analyze
# verdict`, the API: schemas/documents/api.py names this one). `pass` is None where
# there was nothing to judge (no request of its stream in the selection); `db` is the
# workload's database (its report only); the target check has no `requests`. `limit`
# as contracts.toml writes it (20, not 20.0). Functional form: `pass` is a keyword.
Check = TypedDict(
    "Check",
    {
        "db": NotRequired[int | None],
        "check": str,
        "value": float | None,
        "limit": int | float,
        "relation": str,
        "requests": NotRequired[int],
        "pass": bool | None,
    },
)


def thresholds(mode: str) -> dict[str, float]:
    """The limits (ms) of a performance or stress run."""
    if mode not in MODES:
        raise ValueError(f"Jetstress thresholds: {mode!r} is not one of {', '.join(MODES)}")
    # As written (20, not 20.0): the reports and the API show them so.
    return dict(contracts()["jetstress"]["thresholds"][mode])


def check_names() -> tuple[str, ...]:
    return tuple(c["name"] for c in contracts()["jetstress"]["check"])


TARGET_CHECK: str = contracts()["jetstress"]["target_check"]["name"]


def checks(mode: str, figures: Mapping[str, Figures], db: int | None = None) -> list[Check]:
    """Each latency check of `mode` on the figures of its stream (none: no requests);
    `db`: the workload database they are of, named in each check."""
    th = thresholds(mode)
    out: list[Check] = []
    for c in contracts()["jetstress"]["check"]:
        f = figures.get(c["stream"], Figures(0, None, None))
        value = f.avg_ms if c["stat"] == "avg" else f.max_ms
        limit = th[c["threshold"]]
        check: Check = {
            "check": c["name"],
            "value": value,
            "limit": limit,
            "relation": "<=",
            "requests": f.requests,
            "pass": None if value is None else value <= limit,
        }
        out.append(check if db is None else {"db": db, **check})
    return out


def target_check(achieved: float, target: float) -> Check:
    """The workload's own check: the transactional IOPS it reached against its target."""
    return {
        "db": None,
        "check": TARGET_CHECK,
        "value": achieved,
        "limit": target,
        "relation": ">=",
        "pass": achieved >= target,
    }


def result(cs: Iterable[Mapping]) -> str:
    """pass, fail, or unknown when no check had anything to judge."""
    known = [c["pass"] for c in cs if c["pass"] is not None]
    if not known:
        return "unknown"
    return "pass" if all(known) else "fail"
