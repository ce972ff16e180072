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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.tiering.events import WRITE, event_rows, events_from_columns
from analyzer.tiering.params import Params
from analyzer.tiering.simulate import placement
from base.errors import IotapeError
from devices import targets
from recorder.tracefile import TraceWriter, open_trace

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


def tier_of_records(records: np.ndarray, p: Params) -> tuple[np.ndarray, Params]:
    """Per record, True where the simulation placed it on the fast tier."""
    rows = event_rows(records["op"], records["ts_issue_ns"], records["ts_complete_ns"])
    if not len(rows):
        raise IotapeError("the trace has no reads or writes to place on a tier")
    ev = events_from_columns(
        records["ts_issue_ns"],
        records["ts_complete_ns"],
        records["dev"],
        records["offset"],
        records["bytes"],
        records["op"],
    )
    fast_req, resolved = placement(ev, p)
    fast = np.zeros(len(records), dtype=bool)
    fast[rows] = fast_req
    return fast, resolved


@dataclass
class Placement:
    """A trace with each record's simulated tier: simulate once, write as often as needed."""

    trace: Path
    header: dict
    records: np.ndarray
    fast: np.ndarray  # per record
    params: Params  # the capacity filled in

    def summary(self) -> dict[str, Any]:
        r, fast = self.records, self.fast
        data = r["op"] <= WRITE
        return {
            "source": str(self.trace),
            "params": dict(vars(self.params)),
            "requests": len(r),
            "fast_requests": int(fast.sum()),
            "slow_requests": int((~fast).sum()),
            "fast_share_of_reads_writes": float(fast[data].mean()) if data.any() else None,
            "fast_bytes": int(r["bytes"][fast].sum()),
            "slow_bytes": int(r["bytes"][~fast & data].sum()),
        }


def place(trace: str | Path, p: Params) -> Placement:
    trace = Path(trace)
    with open_trace(trace) as t:
        header = copy.deepcopy(t.header)
        records = t.read_all()
    fast, resolved = tier_of_records(records, p)
    return Placement(trace, header, records, fast, resolved)


def write(pl: Placement, out: str | Path, force: bool = False, both: bool = False) -> dict:
    """Write OUT, the trace with every request moved to its simulated tier's device.
    With `both`, every request goes to both devices instead (the fast and the slow
    device measured in one replay, each busy while the other is, as in the array).
    Returns what was done: counts, bytes and the resolved parameters."""
    out = _check_output(pl.trace, out, force)
    r = pl.records
    devs = np.unique(r["dev"])
    single = len(devs) == 1
    new_devices = []
    for i, src in enumerate(_source_devices(pl.header, [int(v) for v in devs])):
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
    index = np.searchsorted(devs, r["dev"]).astype(r["dev"].dtype)
    fast_dev, slow_dev = _dev(0, 0) + 2 * index, _dev(0, 1) + 2 * index
    if both:
        out_records = np.empty(2 * len(r), dtype=r.dtype)  # concatenate drops padding
        out_records[: len(r)] = r
        out_records[len(r) :] = r
        out_records["dev"] = np.concatenate([fast_dev, slow_dev])
    else:
        out_records = r.copy()
        out_records["dev"] = np.where(pl.fast, fast_dev, slow_dev)
    summary = pl.summary()
    header = {**pl.header, "devices": new_devices}
    header["metadata"] = {**(header.get("metadata") or {}), "tier_split": summary}
    with TraceWriter(out, header) as w:
        w.write(out_records)
        w.close({"stop_reason": "tier-split"})
    return {**summary, "output": str(out), "devices": [d["name"] for d in new_devices]}


def split(
    trace: str | Path,
    out: str | Path,
    p: Params,
    force: bool = False,
    both: bool = False,
) -> dict:
    """`place` then `write`: TRACE split by `p`'s placement into OUT."""
    _check_output(Path(trace), out, force)  # before the simulation, not after it
    return write(place(trace, p), out, force, both)


def _check_output(trace: Path, out: str | Path, force: bool) -> Path:
    out = Path(out)
    targets.check_output_file(str(out), "-o")
    if out.exists() and not force:
        raise IotapeError(f"{out}: exists; give --force to replace it")
    if out.resolve() == trace.resolve():
        raise IotapeError(f"{out}: is the input trace; write the split to another file")
    return out
