"""Stream labels: label-name resolution and the Python labeller (the C loader's twin)."""

from __future__ import annotations

import numpy as np
import pytest

import schemas
from base.errors import IotapeError
from recorder.capture import labels
from recorder.tracefile.streams import Extent, apply_streams

OP = schemas.enum("op")
S = schemas.enum("stream")


def _recs(rows: list[tuple[bytes, int, int, int, int]]) -> np.ndarray:
    r = np.zeros(len(rows), dtype=schemas.record_dtype())
    for i, (comm, op, dev, offset, size) in enumerate(rows):
        r[i]["comm"], r[i]["op"], r[i]["dev"], r[i]["offset"], r[i]["bytes"] = (
            comm,
            op,
            dev,
            offset,
            size,
        )
    return r


def test_stream_table_aliases_known_and_user_names() -> None:
    ids, table = labels.stream_table(["db", "log", "bdm-read", "scratch", "scratch"])
    assert ids["db"] == (S["db-read"], S["db-write"])
    assert ids["log"] == (S["log-read"], S["log-write"])
    assert ids["bdm-read"] == (S["bdm-read"], S["bdm-read"])
    assert ids["scratch"] == (32, 32) and table[32] == "scratch"


@pytest.mark.parametrize("spec", ["db", "=x", "db=", ""])
def test_bad_label_specs(spec: str) -> None:
    with pytest.raises(IotapeError, match="NAME=GLOB"):
        labels.parse_label(spec)


def test_apply_streams_rules_then_extents() -> None:
    recs = _recs(
        [
            (b"ese-log", OP["write"], 1, 0, 4096),  # rule: log-write
            (b"ese-logfmt", OP["write"], 1, 8192, 4096),  # longer prefix: log-preformat
            (b"ese-log", OP["flush"], 1, 0, 0),  # flush goes with the writes
            (b"ese-bdm", OP["write"], 1, 0, 4096),  # rule names no write stream: 0
            (b"dd", OP["read"], 1, 1 << 20, 4096),  # extent: db-read
            (b"ese-log", OP["write"], 1, (1 << 20) + 100, 512),  # extent wins over rule
            (b"dd", OP["read"], 2, 1 << 20, 4096),  # other device: no extent
            (b"dd", OP["read"], 1, 2 << 20, 4096),  # past the extent's end
        ]
    )
    ext = [Extent(1, 1 << 20, 2 << 20, S["db-read"], S["db-write"])]
    apply_streams(recs, ext)
    assert recs["stream"].tolist() == [
        S["log-write"],
        S["log-preformat"],
        S["log-write"],
        0,
        S["db-read"],
        S["db-write"],
        0,
        0,
    ]


def test_thread_rule_args_match_the_schema() -> None:
    args = labels.thread_rule_args()
    assert f"ese-bdm:{S['bdm-read']}:0" in args
    assert len(args) == len(schemas.thread_rules())
