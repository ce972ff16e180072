"""What a remap keeps, told at plan time: the locality of the trace as the plan will
replay it beside the original's.

The plan's mapping (plan.json "mapping", replayer/plan/mapping.py) is applied to
the original's requests, streamed in time order (ordered.py), and both are
measured as `replay fidelity` measures a replay (localitystream.py, the same
figures and the same verdict): footprint, hot shares, sequential share and the
LRU hit-ratio curve at the original's cache sizes. So `--remap scale` onto a
device a quarter of the trace's reach shows its hit ratio rising before anything
is run, and `--remap compact` shows it kept. It measures the first replica of
each stream (what fidelity pairs with); scaled copies add load, not locality of
their own.

`replay plan` hands `predict` to the planner (build.plan's `predict`), which
stores its answer in plan.json ("prediction").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from replayer.plan import locality
from replayer.plan.mapping import Mapper
from replayer.run import localitystream, ordered
from schemas.documents.plan import MappingEntry


def _remapped(batches: Iterator[np.ndarray], m: Mapper, orig: localitystream.Profile):
    """The batches as replayed (rows replayed nowhere left out), each first fed to `orig`."""
    for b in batches:
        orig.add(b)
        off, nb, placed, tgt = m.apply_on(b)
        out = ordered.take(b, placed)
        out["offset"], out["bytes"], out["dev"] = off[placed], nb[placed], tgt[placed]
        yield out


def predict(trace: Path, mapping: MappingEntry) -> dict[str, Any]:
    """locality.side_by_side of the original trace and the trace as remapped."""
    so = ordered.scan(trace)
    m = Mapper(mapping, {sid: so.stream_name(sid) for sid in range(256)})
    po_acc = localitystream.Profile()
    pr_acc = localitystream.Profile()
    for b in _remapped(ordered.batches(so), m, po_acc):
        pr_acc.add(b)
    po = po_acc.figures()
    pr = pr_acc.figures([c // locality.UNIT for c in po["lru_caps_bytes"]])
    return {"remap": mapping.mode, **locality.side_by_side(po, pr)}
