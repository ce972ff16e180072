"""The one small interface behind `replay run`: a runner replays a plan.

Two runners implement it: LocalRunner (local.py: the plan's jobs on this host,
with fio or iotape-lanes, recorded at the device if asked) and HostsRunner
(hosts/run.py: every host's part at once through fio's client and servers).
`execute.run` loads the plan, picks the runner and does what is common around
it: the order of the checks, the recording's output, relabelling, fio's plain
anchor replay and JOBDIR/results/summary.json.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from replayer.run.results import JobRow, RunSummary

Say = Callable[[str], None]


class Runner(Protocol):
    """One way of replaying a plan, in three steps: check, prepare, replay."""

    # Why this runner cannot record the replay at the device; None: it can.
    no_record: str | None

    def check(self, say: Say) -> None:
        """Refuse (IotapeError), before any I/O and before anything is made, a plan
        that cannot run here: its targets, or its hosts."""

    def prepare(self) -> None:
        """After every check passed: make what the replay needs (created files)."""

    def replay(self, record_to: Path | None, say: Say) -> RunSummary:
        """Run the plan (recorded into `record_to` when given); its summary."""

    def anchor(self, record_to: Path, say: Say) -> list[JobRow]:
        """fio's plain read_iolog replay of the plan, recorded: its jobs' figures."""
