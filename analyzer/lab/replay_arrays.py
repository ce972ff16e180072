"""The lab's prediction by replay (issue 38) on emulated arrays of its own: the
baseline's trace replayed with dependent timing (replayed.py) on the array as the
baseline had it (the reference) and as each configuration has it (its tier, its read
cache), the replays at the same time (replayed.replay_at_once), each on a temporary
array per controller: one, or with two controllers a pair, each controller's with
that controller's model, every recorded device (by name) replayed onto its own
controller's. The lab's own devices, and the databases on them, are untouched; every
temporary array (server, backing file, mount) and loop device is released on every way
out. Used by hybrid.py."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from analyzer.lab import replayed
from analyzer.lab.array import ArrayFile, ArrayModel
from analyzer.lab.devices import _losetup

Say = Callable[[str], None]


@contextmanager
def replay_arrays(
    size: int, groups: list[list[ArrayModel]]
) -> Iterator[list[list[tuple[ArrayFile, str]]]]:
    """Per group (one replay's controllers, A first), one emulated array per model,
    each its own server, memory-backed data and direct-I/O loop device of `size`
    bytes: (array, loop device) per controller, per group; all released on every way
    out, also when making one of them fails."""
    disks: list[ArrayFile] = []
    loops: list[str] = []
    try:
        made: list[list[tuple[ArrayFile, str]]] = []
        for models in groups:
            made.append([])
            for m in models:
                disks.append(ArrayFile(size, m, prefix="iotape-lab-replay-"))
                loops.append(_losetup(disks[-1].path, direct=True))
                made[-1].append((disks[-1], loops[-1]))
        yield made
    finally:
        for loop in loops:
            subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)
        for d in disks:
            d.close()


def targets(recorded: list[str], devs: list[str]) -> replayed.Target:
    """Where one replay of the baseline goes: its one device's requests to `devs[0]`,
    or each recorded controller's device (by name: the trace knows its devices by
    name) to the same controller's device in `devs`."""
    if len(devs) == 1:
        return devs[0]
    return {os.path.basename(r): now for r, now in zip(recorded, devs, strict=True)}


def predicted(
    trace: Path,
    size: int,
    models: dict[str, ArrayModel],
    recorded: list[str],
    out: Path,
    warm: bool,
    say: Say,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any]]:
    """The reference replay, each configuration's (keyed as `models`: one controller's
    model, every controller the same), cold as the measured run starts, or with `warm`
    after one replay of the trace on the same arrays; and what they ran on: their wall
    time together, each replay's targets (baseline first) and every array's files and
    loop device (backing file, mount, loop device per array; released since)."""
    ref_model = replace(next(iter(models.values())), tier_mb=0, cache_ssd_mb=0)
    keys = list(models)
    n = len(recorded)
    say(f"prediction by replay: the baseline's trace, dependent timing, on {len(keys) + 1} "
        f"{'arrays' if n == 1 else f'pairs of arrays ({n} controllers)'} at once "
        f"(as the baseline's; with its {' and with its '.join(keys)})")  # fmt: skip
    groups = [[m] * n for m in (ref_model, *models.values())]
    with replay_arrays(size, groups) as arrays:
        where = [targets(recorded, [loop for _, loop in g]) for g in arrays]
        files = [str(p) for g in arrays for a, loop in g for p in (a.backing, a.mount, loop)]
        runs: list[tuple[replayed.Target, Path, Path | None]] = [
            (where[0], out / "replay-baseline", None)
        ]
        for t, k in zip(where[1:], keys, strict=True):
            runs.append((t, out / f"replay-{k}", out / f"replay-{k}-warm" if warm else None))
        t0 = time.monotonic()
        ref, *got = replayed.replay_at_once(trace, runs)
        wall = time.monotonic() - t0
    ran = {"replays_at_once_wall_s": wall, "replay_targets": where, "replay_devices": files}
    return ref, dict(zip(keys, got, strict=True)), ran
