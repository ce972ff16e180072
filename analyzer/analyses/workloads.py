"""What makes two runs comparable: the workload they ran.

A regression is a change of the device under the same workload. Two runs ran the
same workload when they replay the same source trace the same way, or one is that
trace and the other replays it unscaled:

- a replay job directory (kind `replay`): its parent trace and the plan's time
  scale and mailbox/database scaling;
- a trace recorded during a replay (`iotape replay run --record`): the same, from
  the `replay_of` entry the replayer writes into the trace's metadata;
- any other trace: itself, unscaled.

Two traces recorded independently (say, the same benchmark on two firmware
versions) name no common source: nothing says they differ, so they are compared
as given, and the answer says how they were paired. A `workload` tag on both runs
says it explicitly and wins over everything else.
"""

from __future__ import annotations

import json
from typing import Any

AS_RECORDED = "as recorded"


def _scaling(time_scale: Any, scaling: Any) -> str:
    """A canonical description of how a replay changed its trace's load."""
    parts = []
    try:
        ts = float(time_scale if time_scale is not None else 1.0)
    except (TypeError, ValueError):
        ts = 1.0
    if ts != 1.0:
        parts.append(f"time x{ts:g}")
    if scaling:
        parts.append("scaling " + json.dumps(scaling, sort_keys=True))
    return "; ".join(parts) or AS_RECORDED


def identity(run: dict) -> dict[str, Any]:
    """The workload of a run: its source trace (a run id), how it was scaled, and
    whether the source is known (a replay) or the run is its own source."""
    tags = run.get("tags") or {}
    params = run.get("parameters") or {}
    meta = ((run.get("header") or {}).get("metadata")) or {}
    out: dict[str, Any] = {"tag": tags.get("workload")}
    if run.get("kind") == "replay":
        plan = params.get("plan") or {}
        source = run.get("parent_id") or ""
        out.update(
            source=source or f"trace {plan.get('trace', '?')}",
            scaling=_scaling(plan.get("time_scale"), plan.get("scaling")),
            replay=True,
        )
    elif isinstance(meta.get("replay_of"), dict):
        r = meta["replay_of"]
        out.update(
            source=str(r.get("trace_sha256", ""))[:12] or f"trace {r.get('trace', '?')}",
            scaling=_scaling(r.get("time_scale"), r.get("scaling")),
            replay=True,
        )
    else:
        out.update(source=run["id"], scaling=AS_RECORDED, replay=False)
    return out


def pairing(a: dict, b: dict) -> tuple[bool, str]:
    """(comparable, how): whether runs `a` and `b` ran the same workload, and why so."""
    ia, ib = identity(a), identity(b)
    if ia["tag"] is not None and ib["tag"] is not None:
        if ia["tag"] == ib["tag"]:
            return True, f"workload tag {ia['tag']!r}"
        return False, f"workload tags differ ({ia['tag']!r} vs {ib['tag']!r})"
    if not ia["replay"] and not ib["replay"]:
        if a["id"] == b["id"]:
            return True, "the same run"
        return True, "no common source trace recorded: compared as given"
    if ia["source"] != ib["source"]:
        return False, (
            f"different source traces ({_src(a, ia)} vs {_src(b, ib)}): "
            "a comparison of different workloads is not a regression test"
        )
    if ia["scaling"] != ib["scaling"]:
        return False, (
            f"the same source trace {ia['source']} replayed differently "
            f"({ia['scaling']} vs {ib['scaling']}): different loads, not a regression test"
        )
    return True, f"source trace {ia['source']} ({ia['scaling']})"


def _src(run: dict, ident: dict) -> str:
    return f"{run['name']}: {ident['source']}" if ident["replay"] else f"{run['name']} itself"
