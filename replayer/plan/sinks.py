"""Where a plan's jobs go as each chunk of the trace is planned (build.py):

- `Collected` holds every job, and once all are in arranges them: exact jobs
  into pieces, windows or lanes (exact.arrange), synthetic ones in one window;
  write.py then writes their iologs.
- `LaneLogs` (a trace read in chunks: sources.Chunked) deals each chunk's jobs
  to lanes at once (lanes.Lanes keeps each lane's state from one chunk to the
  next) and appends their entries to the lanes' logs and to fio's plain replay
  (the anchor) in the job directory being made, so that no more than a chunk is
  held. The lanes are known only at the end: the trace's 0 is put where the
  most lanes would need it (lanes.start_us(MAX_LANES)) and the lanes come in
  name order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from replayer.hosts import spec as hosts
from replayer.plan import exact, iolog, lanes
from replayer.plan.model import Arrangement, Job, Window
from replayer.plan.options import PlanOptions


class Sink(Protocol):
    def add(self, jobs: list[Job]) -> None:
        """One chunk's jobs."""

    def finish(self) -> Arrangement:
        """The jobs as they run, once every chunk is in."""


def reach(jobs: list[Job]) -> dict[str, int]:
    """Per target, the end of the furthest byte any job may touch."""
    out: dict[str, int] = {}
    for j in jobs:
        if j.entries is not None:
            _t, action, off, b = j.entries
            data = action != iolog.SYNC
            end = int((off[data] + b[data]).max(initial=0))
        else:
            end = int(j.options["offset"]) + int(j.options["size"])
        out[j.target] = max(out.get(j.target, 0), end)
    return out


class Collected:
    """Every job held, arranged at the end."""

    def __init__(self, opts: PlanOptions, mode: str, multi_host: bool) -> None:
        self.opts, self.mode, self.multi_host = opts, mode, multi_host
        self.jobs: list[Job] = []

    def add(self, jobs: list[Job]) -> None:
        self.jobs += jobs

    def finish(self) -> Arrangement:
        jobs, self.jobs = self.jobs, []  # held no longer than arrange needs them
        if self.mode != "exact":
            return Arrangement(jobs, [Window(0, jobs, 0, 0)], None, 0, "pieces", reach(jobs))
        jobs, per_segment, windows, start_us, layout = exact.arrange(
            jobs, self.opts, self.multi_host
        )
        return Arrangement(jobs, windows, start_us, per_segment, layout, reach(jobs))


class LaneLogs:
    """The lanes' logs and the anchor log under `jobdir` (being made), appended
    chunk by chunk; `targets`: every target the plan writes to."""

    def __init__(self, jobdir: Path, targets: list[str], lane_io: str = "auto") -> None:
        self.dir = jobdir / "iologs"
        self.dir.mkdir()
        self.start_us = lanes.start_us(lanes.MAX_LANES)
        self.dealer = lanes.Lanes(lane_io=lane_io)
        self.lanes: dict[str, Job] = {}  # lane name -> its job (entries empty)
        self.reach: dict[str, int] = {}
        self.end_us = 0
        self.largest = 0
        self.anchor = open(jobdir / "anchor.log", "w")  # noqa: SIM115 - closed in finish()
        self.anchor.write(iolog.HEADER + "\n")
        self.anchor.writelines(
            [f"1 {u} add\n" for u in targets] + [f"1 {u} open\n" for u in targets]
        )
        self.targets = targets

    def add(self, jobs: list[Job]) -> None:
        """One chunk's exact jobs: into the anchor, then dealt to their lanes."""
        jobs = exact.fold_sync_only(jobs)
        self._add_anchor(jobs)
        for j in jobs:
            assert j.entries is not None and j.busy_us is not None  # lanes
            lane = self.dealer.deal(j.name, j.entries[0], j.entries[1], j.busy_us, j.in_flight)
            self._add(j, lane)

    def _add(self, j: Job, lane: np.ndarray) -> None:
        """Append job `j`'s entries to their lanes' logs."""
        assert j.entries is not None  # exact jobs only
        t, a, o, b = j.entries
        data = a != iolog.SYNC
        if data.any():
            self.largest = max(self.largest, int(b[data].max()))
            end = int((o[data] + b[data]).max())
            self.reach[j.target] = max(self.reach.get(j.target, 0), end)
        path = hosts.local_path(j.target)
        for k in np.unique(lane).tolist():
            sel = lane == k
            name = self.dealer.lane_name(j.name, k)
            new = name not in self.lanes
            if new:
                empty = np.zeros(0, np.int64)
                depth = self.dealer.async_depth.get(j.name) if k < 0 else None
                self.lanes[name] = Job(
                    name, j.target, j.stream, j.owner, lanes.lane_options(j, depth), 0,
                    j.writes, entries=(empty, empty, empty, empty), segment=k,
                )  # fmt: skip
            lane_job = self.lanes[name]
            if k < 0:  # the deepest any chunk asked for
                lane_job.options["iodepth"] = str(self.dealer.async_depth[j.name])
            lane_job.requests += int((a[sel] != iolog.SYNC).sum())
            lane_job.writes = lane_job.writes or j.writes
            with open(self.dir / f"{name}.log", "a") as f:
                if new:
                    f.write(iolog.head_v2(path))
                f.writelines(iolog.lines_v2(path, t[sel], a[sel], o[sel], b[sel], self.start_us))

    def _add_anchor(self, jobs: list[Job]) -> None:
        parts = [(j.target, j.entries) for j in jobs if j.entries is not None]
        if not parts:
            return
        t = np.concatenate([e[0] for _, e in parts])
        order = np.argsort(t, kind="stable")
        names = np.concatenate([np.full(len(e[0]), n, dtype=object) for n, e in parts])[order]
        cols = [np.concatenate([e[k] for _, e in parts])[order] for k in range(4)]
        acts = np.asarray(iolog.ACTIONS, dtype=object)[cols[1]]
        self.anchor.writelines(
            f"{ts + iolog.T0_US} {n} {a} {o} {b}\n"
            for ts, n, a, o, b in zip(
                cols[0].tolist(), names.tolist(), acts.tolist(), cols[2].tolist(),
                cols[3].tolist(), strict=True,
            )
        )  # fmt: skip
        self.end_us = max(self.end_us, int(cols[0][-1]))

    def finish(self) -> Arrangement:
        """The anchor's and the lanes' logs closed: the lanes as jobs (entries empty)."""
        end = self.end_us + iolog.T0_US
        self.anchor.writelines(f"{end} {u} close\n" for u in self.targets)
        self.anchor.close()
        for name, j in self.lanes.items():
            with open(self.dir / f"{name}.log", "a") as f:
                f.write(iolog.tail_v2(hosts.local_path(j.target)))
        out = sorted(self.lanes.values(), key=lambda j: j.name)
        lanes.set_buffer_size(out, self.largest)
        start = self.start_us
        return Arrangement(out, [Window(0, out, start, 0)], start, 0, "lanes", self.reach)
