"""The C iolog parser of relabelling (src/logparse.c through run/logblocks.py)
against the line-by-line loop it replaces, on real plans' logs and on lines that
are not in iotape's shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_replay_plan import _targets, _trace

from replayer.plan.build import PlanOptions, plan
from replayer.run import logblocks


def _same(buf: bytes, now: int = 0) -> tuple:
    got, ref = logblocks.parse(buf, now), logblocks._loop(buf, now)
    for g, r in zip(got[:4], ref[:4], strict=True):
        assert g.dtype == r.dtype and np.array_equal(g, r)
    assert got[4] == ref[4]
    return got


@pytest.mark.parametrize("layout", ["lanes", "pieces"])  # version-2 and version-3 logs
def test_plan_logs_parse_as_the_loop_does_in_any_blocks(tmp_path: Path, layout: str) -> None:
    assert logblocks._lib() is not None, "build it: make native"
    src = _trace(tmp_path / "src.iot", seconds=2, rate=300)
    jobdir = tmp_path / "jobs"
    plan(PlanOptions(src, jobdir, mode="exact", targets=_targets(tmp_path, 1), layout=layout))
    rng = np.random.default_rng(7)
    entries = 0
    for log in sorted((jobdir / "iologs").glob("*.log")):
        lines = log.read_bytes().splitlines(keepends=True)[1:]
        now = 0
        at = 0
        while at < len(lines):
            k = int(rng.integers(1, 40))
            got = _same(b"".join(lines[at : at + k]), now)
            now, at, entries = got[4], at + k, entries + len(got[0])
    assert entries > 500


def test_lines_out_of_shape_fall_back_to_the_loop() -> None:
    base = b"F wait 5 7\nF read 4096 512\nF write 0 8192\n"
    assert len(_same(base)[0]) == 2 and _same(base)[0][0] == 5007
    for odd in (
        b"F  read 4096 512\n",  # two spaces
        b"F\tread 4096 512\n",  # a tab
        b"F read 4096 512 \n",  # a trailing space
        b" F read 4096 512\n",  # a leading space
        b"F read 1234567890123456789 512\n",  # 19 digits
        b"3 F trim 0 4096\n2 F sync 0 0\n",  # v3
        b"F read 4096 512\nF wait 9 1\n00000000000000000000 F wait 0 0\n",  # last: v3 wait
        b"\nF add\nF read 1 2 3 4 5\n",
    ):
        _same(base + odd, 3)
    # What the loop rejects, parse rejects alike.
    with pytest.raises(ValueError):
        logblocks.parse(b"F read x12 512\n")
    with pytest.raises(OverflowError):
        logblocks.parse(b"F read 4096 4294967296\n")
