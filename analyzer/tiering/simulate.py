"""What an SSD tier or an SSD cache would have done with a run: the tiering simulator.

`simulate(events, params)` replays a run's reads and writes against a fast tier of
fixed-size units (extents) under one policy (policies.py): array-style `tiering`
(migration.py, with array presets in presets.py), the `lru` and `s3fifo` caches,
and the bounds `oracle` and `belady`.

A request that spans units makes one access per unit (accesses.py); it is a
fast-tier hit by count when all its units are in the fast tier, and its bytes are
hits unit by unit.

The result has the hit ratios, a timeline and the skew curve (report.py), a sweep
of tier sizes (sweep.py) and, given a fast and a slow run, projected latency
(projection.py). Runs come from a trace file (events.py) or the store
(from_store.py, which only the analyzer uses).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import cast

import numpy as np

from analyzer.tiering import native
from analyzer.tiering.accesses import request_hits
from analyzer.tiering.events import Events
from analyzer.tiering.params import Params, TieringError
from analyzer.tiering.policies import prepare
from analyzer.tiering.presets import PRESETS
from analyzer.tiering.projection import measured_latency, profile, project, projection_error
from analyzer.tiering.report import report, skew
from analyzer.tiering.sweep import sweep, sweep_capacities
from schemas.documents.tiering import Simulation, SimulationParams


def default_capacity(footprint: int, unit: int) -> int:
    """The fast tier when none is given: 10 % of the footprint, at least one unit."""
    return max(unit, footprint // 10 // unit * unit)


def placement(ev: Events, p: Params) -> tuple[np.ndarray, Params]:
    """Per request, whether the simulation served it from the fast tier (every unit it
    touches there), and the parameters with the capacity filled in."""
    r = prepare(ev, p)
    capacity = (
        p.capacity if p.capacity is not None else default_capacity(r.acc.n_units * p.unit, p.unit)
    )
    hits = r.hits(p.units(capacity))
    return request_hits(r.acc, hits.hit), replace(p, capacity=capacity)


def simulate(
    ev: Events,
    p: Params,
    sweep_sizes: list[int] | bool = False,
    fast: Events | None = None,
    slow: Events | None = None,
    measured: Events | None = None,
) -> Simulation:
    """Everything `iotape analyze tiering` reports, as a JSON-ready dict. `measured`
    (a replay split by this placement, `iotape replay split`) is set beside the
    projection with the projection's error."""
    r = prepare(ev, p)
    footprint = r.acc.n_units * p.unit
    capacity = p.capacity if p.capacity is not None else default_capacity(footprint, p.unit)
    k = p.units(capacity)
    hits = r.hits(k)
    ratios, timeline = report(r, hits)
    out: Simulation = {
        "params": cast(SimulationParams, asdict(replace(p, capacity=capacity))),
        "source": PRESETS[p.preset].source if p.preset else None,
        "simulator": "C" if native.native() else "Python reference",
        "capacity_units": k,
        "hit_ratio": ratios,
        "timeline": timeline,
        "skew": skew(r.acc, p.unit),
    }
    if sweep_sizes is not False:
        caps = (
            sweep_sizes
            if isinstance(sweep_sizes, list)
            else sweep_capacities(r.acc.n_units, p.unit, capacity)
        )
        out["sweep"] = sweep(r, caps)
    if (fast is None) != (slow is None):
        raise TieringError("projected latency needs both a fast run and a slow run")
    if fast is not None and slow is not None:
        lat = project(ev, request_hits(r.acc, hits.hit), profile(fast), profile(slow))
        if measured is not None:
            m = measured_latency(measured)
            lat["measured"] = m
            lat["error"] = projection_error(lat["projected"], m)
        out["latency"] = lat
    elif measured is not None:
        raise TieringError(
            "a measured run is compared with a projection: name a fast and a slow run"
        )
    return out  # fmt: skip
