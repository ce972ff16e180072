"""The trace's chunks decompressed by `iotape ingest`'s store process
(analyzer/store/forked_ahead.py): whatever the child did or did not do, the command
reads the same columns as a reader on its own, and takes from the child only the
chunks the child read as it would."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import chunk_offsets, make_trace, workload_records

import schemas
from analyzer.store import forked_ahead
from recorder.tracefile import format as fmt
from recorder.tracefile import open_trace
from recorder.tracefile import planes as planes_c

pytestmark = pytest.mark.skipif(
    forked_ahead._library() is None, reason="libplanes.so not built (make native)"
)


def test_its_constants_are_the_readers() -> None:
    assert forked_ahead.LIBRARY == planes_c.LIBRARY
    assert forked_ahead.SCHEMA == schemas.SCHEMA_PATH
    assert forked_ahead.HEADER_FIXED.format == fmt.HEADER_FIXED.format
    assert forked_ahead.ZCHUNK_HEAD.format == fmt.ZCHUNK_HEAD.format
    assert forked_ahead.CHUNK_HEAD.format == fmt.CHUNK_HEAD.format


@pytest.fixture(scope="module", params=["zstd", "lz4"])
def trace(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ahead")
    return make_trace(
        d / "t.iot", workload_records(40_000, seed=3), chunk_records=4096, compression=request.param
    )


def _columns(path: Path, ahead: object = None) -> dict[str, np.ndarray]:
    with open_trace(path) as t:
        t.ahead = ahead
        parts = list(t.iter_columns(10_000))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture
def walked(trace: Path) -> Iterator[tuple[forked_ahead.Shared, list[int]]]:
    """A child that walked `trace` to its end and waits (its ring is what the command
    copies from) until the test is done; the steps' results."""
    shared = forked_ahead.share(trace)
    assert shared is not None
    done_r, done_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's side, reported through the pipe
        code = 0
        try:
            os.close(hold_w)
            os.close(done_r)
            u = forked_ahead.Unpacker(shared)
            steps = []
            while (got := u.step()) is True:
                steps.append(1)
            os.write(done_w, f"{len(steps)} {got}".encode())
            os.read(hold_r, 1)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    shared.pid = pid
    os.close(done_w)
    os.close(hold_r)
    said = os.read(done_r, 100).decode().split()
    os.close(done_r)
    try:
        yield shared, [int(said[0])]
    finally:
        os.close(hold_w)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_every_chunk_the_child_decompressed_is_taken(trace: Path, walked: tuple) -> None:
    """The child walked to the end before the command began (its first take stops a
    walk still going: tests/test_ingest_forked.py has the command's side)."""
    shared, (steps,) = walked
    chunks = len(chunk_offsets(trace))
    # The walk ends at the footer, every chunk done.
    assert steps == chunks
    taker = forked_ahead.Taker(shared)
    _same(_columns(trace, taker), _columns(trace))
    assert taker.chunks == chunks and taker.on


def test_a_child_that_did_nothing_leaves_every_chunk_to_the_command(trace: Path) -> None:
    shared = forked_ahead.share(trace)
    assert shared is not None
    shared.pid = os.getpid()  # no child walked: slot 0 is free, the command takes it
    taker = forked_ahead.Taker(shared)
    _same(_columns(trace, taker), _columns(trace))
    assert taker.chunks == 0 and not taker.on
    assert shared.load(-1) == 1  # a child still walking would stop
    assert shared.load(0) == forked_ahead.TAKEN


def test_a_chunk_the_child_never_finishes_is_done_by_the_command(
    trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forked_ahead, "WAIT_S", 0.01)
    shared = forked_ahead.share(trace)
    assert shared is not None
    shared.pid = os.getpid()
    shared.store(0, 0, forked_ahead.CHILD)  # claimed, as by a child stopped mid-chunk
    taker = forked_ahead.Taker(shared)
    _same(_columns(trace, taker), _columns(trace))
    assert taker.chunks == 0 and not taker.on


def test_the_child_walking_another_file_gives_nothing(
    trace: Path, walked: tuple, tmp_path: Path
) -> None:
    """The same layout, other records: each chunk's place and size match, its CRC not."""
    shared, _ = walked
    codec = "lz4" if b"lz4" in _codec_of(trace) else "zstd"
    other = make_trace(
        tmp_path / "o.iot", workload_records(40_000, seed=4), chunk_records=4096, compression=codec
    )
    assert chunk_offsets(other)[:1] == chunk_offsets(trace)[:1]
    taker = forked_ahead.Taker(shared)
    _same(_columns(other, taker), _columns(other))
    assert taker.chunks == 0 and not taker.on


def _codec_of(path: Path) -> bytes:
    with open_trace(path) as t:
        return next(t._infos(decode=False)).codec.encode()


def test_a_child_gone_before_the_copy_gives_nothing(trace: Path, walked: tuple) -> None:
    """The copy out of the child's memory fails (here: another process's id, where
    nothing is mapped at the ring's address): the command decompresses, as it does
    where the system does not allow the copy."""
    shared, _ = walked
    child = shared.pid
    shared.pid = os.getpid()
    taker = forked_ahead.Taker(shared)
    _same(_columns(trace, taker), _columns(trace))
    assert taker.chunks == 0 and not taker.on
    shared.pid = child


def test_a_damaged_chunk_stops_the_child_and_the_command_says_so(
    trace: Path, tmp_path: Path
) -> None:
    """A payload byte flipped in the 5th chunk: the child may decompress it (it leaves
    the payload's CRC to the command) or stop there; the command takes the four
    before it and fails at the 5th as a reader on its own."""
    bad = tmp_path / "bad.iot"
    data = bytearray(trace.read_bytes())
    data[chunk_offsets(trace)[4] + 100] ^= 0x01
    bad.write_bytes(data)
    shared = forked_ahead.share(bad)
    assert shared is not None
    u = forked_ahead.Unpacker(shared)
    steps = 0
    while u.step():
        steps += 1
    assert steps >= 4
    shared.pid = os.getpid()  # the ring is this process's own here
    taker = forked_ahead.Taker(shared)
    errors = []
    for ahead in (taker, None):
        with pytest.raises(fmt.TraceFormatError) as e:
            _columns(bad, ahead)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "chunk 4: payload checksum mismatch" in errors[0]
    assert taker.chunks == 4


def test_it_is_off_where_it_cannot_help(trace: Path, tmp_path: Path, monkeypatch) -> None:
    assert forked_ahead.share(tmp_path / "t.parquet") is None
    assert forked_ahead.share(tmp_path / "missing.iot") is None
    monkeypatch.setenv(forked_ahead.SWITCH, "0")
    assert forked_ahead.share(trace) is None


def test_a_file_that_is_no_trace_is_not_walked(tmp_path: Path) -> None:
    junk = tmp_path / "junk.iot"
    junk.write_bytes(b"x" * 4096)
    shared = forked_ahead.share(junk)
    assert shared is not None
    assert forked_ahead.Unpacker(shared).step() is False
