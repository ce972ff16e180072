"""Filters as a user gives them (names, seconds) resolved to a run's ids, and what a
run's devices and streams are called.

Bad input raises `BadInput` (the routes make it a 422)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import schemas
from analyzer.store import queries
from analyzer.store.interface import Reader
from analyzer.store.queries import EventFilter
from base.errors import IotapeError
from schemas.documents.api import Filter


class BadInput(IotapeError):
    """A parameter that names nothing in this run, or values that contradict each other."""


@dataclass(frozen=True)
class FilterArgs:
    """The filters as a user gives them: names or numbers, seconds."""

    op: str | None = None
    stream: str | None = None
    device: str | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    start_s: float | None = None
    end_s: float | None = None


def _code(value: str, names: dict[str, int], what: str) -> int:
    v = value.strip()
    if v in names:
        return names[v]
    if v.isdecimal() and int(v) <= 255:
        return int(v)
    known = ", ".join(sorted(names, key=lambda k: names[k]))
    raise BadInput(f"{what} {value!r}: not one of {known} (or a number 0-255)")


def devices(store: Reader, run_id: str) -> list[dict[str, Any]]:
    cols = ["dev", "name", "model", "firmware", "rotational", "logical_block_size"]
    cols += ["capacity_bytes", "partition_name", "partition_start_bytes"]
    return queries.records(store, "run_devices", cols, run_id=run_id)


def stream_names(store: Reader, run_id: str) -> dict[int, str]:
    names = dict(schemas.stream_names())
    names.update(dict(queries.run(store, "run_streams", run_id=run_id)))
    return names


def resolve_filter(store: Reader, run_id: str, a: FilterArgs) -> EventFilter:
    """Names to ids for this run (streams and devices are per run); checks ranges."""
    f: dict[str, int] = {}
    if a.op is not None:
        f["op"] = _code(a.op, {v: k for k, v in schemas.op_names().items()}, "op")
    if a.stream is not None:
        names = {v: k for k, v in stream_names(store, run_id).items()}
        f["stream"] = _code(a.stream, names, "stream")
    if a.device is not None:
        f["dev"] = _device(store, run_id, a.device)
    lo = a.min_bytes if a.min_bytes is not None else 0
    hi = a.max_bytes if a.max_bytes is not None else queries.MAX_BYTES
    if lo > hi:
        raise BadInput(f"min_bytes {lo} is more than max_bytes {hi}")
    t_from = round(a.start_s * 1e9) if a.start_s is not None else 0
    t_to = round(a.end_s * 1e9) if a.end_s is not None else queries.MAX_NS
    if t_from > t_to:
        raise BadInput(f"start {a.start_s} s is after end {a.end_s} s")
    return EventFilter(min_bytes=lo, max_bytes=hi, t_from_ns=t_from, t_to_ns=t_to, **f)


def _device(store: Reader, run_id: str, ref: str) -> int:
    devs = devices(store, run_id)
    for d in devs:
        if ref in (d["name"], d["partition_name"]) and ref:
            return d["dev"]
    major, sep, minor = ref.partition(":")
    if (
        sep
        and major.isdecimal()
        and minor.isdecimal()
        and int(major) < 4096
        and int(minor) < 1 << 20
    ):
        return int(major) << 20 | int(minor)
    known = ", ".join(d["name"] for d in devs) or "none recorded"
    raise BadInput(f"device {ref!r}: not a device of this run ({known}); or give MAJOR:MINOR")


def describe_filter(f: EventFilter) -> Filter:
    """The filter as applied, for the response: what the numbers cover."""
    out: dict[str, Any] = {}
    for k in ("op", "stream", "dev"):
        if getattr(f, k) != queries.ANY:
            out[k] = getattr(f, k)
    if f.min_bytes:
        out["min_bytes"] = f.min_bytes
    if f.max_bytes != queries.MAX_BYTES:
        out["max_bytes"] = f.max_bytes
    if f.t_from_ns:
        out["start_s"] = f.t_from_ns / 1e9
    if f.t_to_ns != queries.MAX_NS:
        out["end_s"] = f.t_to_ns / 1e9
    return cast(Filter, out)
