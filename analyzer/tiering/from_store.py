"""Tiering over stored runs: a run's reads and writes from the store, and
`analyze_run`, what `iotape analyze tiering` and `GET /runs/{run}/tiering` report.

Only the analyzer's command line and server import this module: the simulator
itself (and so the replayer, which uses it) never touches the store.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, cast

import numpy as np

from analyzer.store import catalog
from analyzer.store.interface import Store
from analyzer.store.queries import (
    TIERING_COLUMNS,
    TIERING_DEVICE_QUERY,
    TIERING_EVENTS_QUERY,
    TIERING_STREAM_QUERY,
)
from analyzer.tiering.events import Events, event_rows, events_from_columns
from analyzer.tiering.params import Params, TieringError, parse_size
from analyzer.tiering.presets import params_for
from analyzer.tiering.simulate import simulate
from base.errors import IotapeError
from schemas.documents.api import TieringResponse

# The server's route reaches the parameters through this module, as it does the run.
__all__ = ["TieringError", "analyze_run", "load_events", "load_run", "params_for", "parse_size"]


def load_events(store: Store, run_id: str) -> Events:
    """A run's reads and writes from the store (one Arrow query)."""
    t = store.arrow(TIERING_EVENTS_QUERY.sql(store.dialect), {"run_id": run_id})
    cols = [t.column(c).to_numpy() for c in TIERING_COLUMNS]
    return events_from_columns(*cols)


def load_events_streams(store: Store, run_id: str) -> tuple[Events, np.ndarray]:
    """A run's reads and writes and each one's stream code, in Events' order."""
    t = store.arrow(TIERING_STREAM_QUERY.sql(store.dialect), {"run_id": run_id})
    cols = [t.column(c).to_numpy() for c in TIERING_COLUMNS]
    stream = t.column("stream").to_numpy()
    rows = event_rows(cols[5], cols[0], cols[1])
    return events_from_columns(*cols), stream[rows]


def load_run(store: Store, ref: str) -> tuple[dict[str, Any], Events]:
    """(run, events) for `ref`: a run, or RUN@DEVICE for one device's events of a run
    (a profile replay recorded on a fast and a slow device at once)."""
    try:
        return (run := catalog.resolve(store, ref)), load_events(store, run["id"])
    except IotapeError:
        name, sep, device = ref.rpartition("@")
        if not sep or not name or not device:
            raise
    run = catalog.resolve(store, name)
    t = store.arrow(TIERING_DEVICE_QUERY.sql(store.dialect), {"run_id": run["id"], "name": device})
    devs = t.column("dev").to_numpy() if t.num_rows else []
    if not len(devs):
        raise TieringError(f"run {name!r} has no device named {device!r}")
    ev = load_events(store, run["id"])
    keep = np.isin(ev.dev, devs)
    return {**run, "device": device}, Events(*(getattr(ev, f.name)[keep] for f in fields(Events)))


def analyze_run(
    store: Store,
    ref: str,
    p: Params,
    sweep_sizes: list[int] | bool = False,
    fast_ref: str | None = None,
    slow_ref: str | None = None,
    measured_ref: str | None = None,
) -> TieringResponse:
    """`simulate` over a stored run (id, id prefix or name), with device profiles from
    a fast and a slow run when both are named (each may be RUN@DEVICE), and a measured
    tiered run set beside the projection."""
    if (fast_ref is None) != (slow_ref is None):
        raise TieringError("projected latency needs both --fast-run and --slow-run")
    run, ev = load_run(store, ref)
    named: dict[str, Any] = {"run": {"id": run["id"], "name": run["name"]}}
    loaded: dict[str, Events | None] = {}
    for key, r in (("fast_run", fast_ref), ("slow_run", slow_ref), ("measured_run", measured_ref)):
        loaded[key] = None
        if r is not None:
            other, loaded[key] = load_run(store, r)
            named[key] = {"id": other["id"], "name": other["name"], "device": other.get("device")}
    fast, slow, measured = loaded["fast_run"], loaded["slow_run"], loaded["measured_run"]
    return cast(TieringResponse, {**named, **simulate(ev, p, sweep_sizes, fast, slow, measured)})
