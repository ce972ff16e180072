"""Split a trace across a fast and a slow device by a tiering simulation's placement.

Each read or write the simulation served from the fast tier (every unit it touches
was there) goes to a device named `fast`, everything else (misses, flushes,
discards) to `slow`. The result is an ordinary trace: `iotape replay plan SPLIT.iot
--target fast=NVME --target slow=HDD` replays it as the hybrid array would have
served it, on the user's own two devices, which is how a projection from
`iotape analyze tiering --fast-run --slow-run` is checked against a measurement.

With several source devices the names are `fast-NAME` and `slow-NAME`, so each
keeps its own offset space on the targets.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from iotape.analyzer import tiering
from iotape.errors import IotapeError
from iotape.recorder.tracefile import TraceWriter, open_trace

# Made-up device numbers for the split halves: major 4095 is never a real driver's.
_SPLIT_MAJOR = 4095
TIERS = ("fast", "slow")


def _dev(i: int, tier: int) -> int:
    return (_SPLIT_MAJOR << 20) | (2 * i + tier)


def _source_devices(header: dict, devs: list[int]) -> list[dict]:
    """The header's entry for each device number the records use (disk or partition)."""
    by_dev: dict[int, dict] = {}
    for d in header.get("devices") or []:
        by_dev[int(d["dev"])] = d
        part = d.get("partition")
        if part:
            by_dev[int(part["dev"])] = {**d, "name": part.get("name", d.get("name"))}
    return [by_dev.get(v, {"name": f"dev{v >> 20}:{v & 0xFFFFF}", "dev": v}) for v in devs]


def tier_of_records(records: np.ndarray, p: tiering.Params) -> tuple[np.ndarray, tiering.Params]:
    """Per record, True where the simulation placed it on the fast tier."""
    rows = tiering.event_rows(records["op"], records["ts_issue_ns"], records["ts_complete_ns"])
    if not len(rows):
        raise IotapeError("the trace has no reads or writes to place on a tier")
    ev = tiering.events_from_columns(
        records["ts_issue_ns"],
        records["ts_complete_ns"],
        records["dev"],
        records["offset"],
        records["bytes"],
        records["op"],
    )
    fast_req, resolved = tiering.placement(ev, p)
    fast = np.zeros(len(records), dtype=bool)
    fast[rows] = fast_req
    return fast, resolved


def split(
    trace: str | Path,
    out: str | Path,
    p: tiering.Params,
    force: bool = False,
    both: bool = False,
) -> dict:
    """Write OUT, TRACE with every request moved to its simulated tier's device.
    With `both`, every request goes to both devices instead (the fast and the slow
    device measured in one replay, each busy while the other is, as in the array).
    Returns what was done: counts, bytes and the resolved parameters."""
    trace, out = Path(trace), Path(out)
    if out.exists() and not force:
        raise IotapeError(f"{out}: exists; give --force to replace it")
    if out.resolve() == trace.resolve():
        raise IotapeError(f"{out}: is the input trace; write the split to another file")
    with open_trace(trace) as t:
        header = copy.deepcopy(t.header)
        records = t.read_all()
    fast, resolved = tier_of_records(records, p)
    devs = sorted(int(v) for v in np.unique(records["dev"]))
    sources = _source_devices(header, devs)
    single = len(devs) == 1
    new_devices = []
    new_dev = np.empty(len(records), dtype=records["dev"].dtype)
    for i, (v, src) in enumerate(zip(devs, sources, strict=True)):
        on = records["dev"] == v
        for tier, name in enumerate(TIERS):
            entry = {k: val for k, val in src.items() if k != "partition"}
            entry.update(
                name=name if single else f"{name}-{src['name']}",
                dev=_dev(i, tier),
                major=_SPLIT_MAJOR,
                minor=2 * i + tier,
                partition=None,
                split_of=src.get("name"),
            )
            new_devices.append(entry)
            new_dev[on & (fast if name == "fast" else ~fast)] = _dev(i, tier)
    out_records = records.copy()
    out_records["dev"] = new_dev
    if both:
        # The source device's index i is the same in both halves: _dev(i, t) ^ 1 flips t.
        on_fast = np.where(fast, new_dev, new_dev ^ 1)
        twice = np.empty(2 * len(records), dtype=records.dtype)  # concatenate drops padding
        twice[: len(records)] = records
        twice[len(records) :] = records
        twice["dev"] = np.concatenate([on_fast, on_fast ^ 1])
        out_records = twice
    data = records["op"] <= tiering.WRITE
    summary: dict[str, Any] = {
        "source": str(trace),
        "params": dict(vars(resolved)),
        "requests": len(records),
        "fast_requests": int(fast.sum()),
        "slow_requests": int((~fast).sum()),
        "fast_share_of_reads_writes": float(fast[data].mean()) if data.any() else None,
        "fast_bytes": int(records["bytes"][fast].sum()),
        "slow_bytes": int(records["bytes"][~fast & data].sum()),
    }
    header["devices"] = new_devices
    header.setdefault("metadata", {})
    header["metadata"] = {**(header["metadata"] or {}), "tier_split": summary}
    with TraceWriter(out, header) as w:
        w.write(out_records)
        w.close({"stop_reason": "tier-split"})
    return {**summary, "output": str(out), "devices": [d["name"] for d in new_devices]}
