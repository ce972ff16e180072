"""check and repair: what survives a killed recorder, garbage and corruption."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_helpers import DT, chunk_offsets, header, make_trace, random_records

from base.errors import IotapeError
from recorder.tracefile import TraceFormatError, open_trace
from recorder.tracefile.check import check, repair
from recorder.tracefile.format import SCHED_OP, SCHED_VERSION, WAKE_OP
from recorder.tracefile.writer import TraceWriter


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return len(a) == len(b) and all(np.array_equal(a[n], b[n]) for n in DT.names)


def _damage_chunk(path: Path, k: int) -> None:
    """One bit flipped inside chunk k's data: its checksum no longer holds."""
    data = bytearray(path.read_bytes())
    data[chunk_offsets(path)[k] + 500] ^= 0x10
    path.write_bytes(data)


def _read(path: Path) -> tuple[np.ndarray, dict]:
    with open_trace(path) as t:
        return t.read_all(), t.footer


# An in-place writer like the C loader: header, then each chunk as it fills, in two
# writes. After the first half of chunk 12 it says so and waits to be killed.
_WRITER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, sys.argv[3])
    from trace_helpers import header, random_records
    from recorder.tracefile import format as tf
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, tf.encode_header(header()))
    n = int(sys.argv[2])
    for seq in range(13):
        payload = random_records(n, seed=seq).tobytes()
        os.write(fd, tf.encode_chunk_head(payload, n, seq) + payload[: len(payload) // 2])
        if seq == 12:
            print("torn", flush=True)
            time.sleep(60)
        os.write(fd, payload[len(payload) // 2 :])
    """
)


def test_repair_after_sigkill_mid_chunk(tmp_path: Path) -> None:
    path = tmp_path / "live.iot"
    n = 50
    tests_dir = str(Path(__file__).resolve().parents[1])
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(n), tests_dir],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "torn"
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    damaged = path.read_bytes()
    before = check(path)
    assert not before.complete
    assert "truncated" in before.problem
    kept_chunks = before.chunks
    assert kept_chunks == 12

    r = repair(path)
    assert r.repaired
    assert r.kept_chunks == kept_chunks
    assert r.kept_events == kept_chunks * n
    records, footer = _read(path)
    expected = np.concatenate(
        [random_records(n, seed=s).view(np.uint8) for s in range(kept_chunks)]
    )
    assert records.view(np.uint8).tobytes() == expected.tobytes()
    assert footer["repaired"] is True
    assert footer["stop_reason"] == "repair"
    assert footer["events"] == kept_chunks * n
    assert footer["lost"] == {}
    # The valid prefix is byte for byte what the recorder wrote, and the torn rest is kept.
    assert path.read_bytes()[: r.truncated_at] == damaged[: r.truncated_at]
    assert Path(r.damaged_file).read_bytes() == damaged[r.truncated_at :]
    assert r.dropped_events == n  # the torn chunk's header survived
    [gap] = footer["gaps"]
    assert (gap["first_chunk"], gap["chunks"], gap["events"], gap["events_exact"]) == (
        12,
        1,
        n,
        True,
    )


def test_repair_garbage_after_a_complete_file(tmp_path: Path) -> None:
    r0 = random_records(250)
    lost = {"ringbuf_full": 3, "inflight_full": 1}
    path = make_trace(
        tmp_path / "t.iot",
        r0,
        footer={"stop_reason": "signal", "lost": lost, "pre_start": 7, "duration_ns": 123},
    )
    original = path.read_bytes()
    path.write_bytes(original + b"\x00garbage" * 10)
    rep = check(path)
    assert not rep.complete and "garbage after the trailer" in rep.problem
    assert rep.events == 250 and rep.footer_present

    r = repair(path)
    records, footer = _read(path)
    assert _same(records, r0)
    assert footer["lost"] == lost
    assert footer["pre_start"] == 7
    assert footer["duration_ns"] == 123
    assert footer["original_stop_reason"] == "signal"
    assert footer["repaired"] is True
    assert r.dropped_events == footer["dropped_events"] == 0
    assert Path(r.damaged_file).name == "t.iot.damaged"
    assert Path(r.damaged_file).read_bytes() == original[r.truncated_at :] + b"\x00garbage" * 10


def test_repair_corrupted_chunk_in_the_middle(tmp_path: Path) -> None:
    r0 = random_records(500, seed=4)
    path = make_trace(
        tmp_path / "t.iot", r0, chunk_records=100, footer={"lost": {"ringbuf_full": 9}}
    )
    offsets = chunk_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[2] + 500] ^= 0x10
    path.write_bytes(data)

    r = repair(path)
    records, footer = _read(path)
    # Only chunk 2 is lost; the chunks after it are kept, byte for byte.
    assert _same(records, np.concatenate([r0[:200], r0[300:]]))
    assert r.kept_chunks == 4 and r.truncated_at is None
    assert r.dropped_events == footer["dropped_events"] == 100
    assert footer["dropped_chunks"] == 1
    assert footer["lost"] == {"ringbuf_full": 9}
    assert "chunk 2: payload checksum mismatch" in footer["repair_reason"]
    [gap] = footer["gaps"]
    assert gap["offset"] == offsets[2] and gap["length"] == offsets[3] - offsets[2]
    assert (gap["first_chunk"], gap["chunks"], gap["events"]) == (2, 1, 100)
    assert gap["after_ns"] == int(r0["ts_complete_ns"][:200].max())
    assert gap["before_ns"] == int(r0["ts_complete_ns"][300:].min())
    assert Path(r.damaged_file).read_bytes() == bytes(data[offsets[2] : offsets[3]])
    assert gap["damaged_file"] == "t.iot.damaged" and gap["saved_at"] == 0


def test_repair_cut_at_a_chunk_boundary(tmp_path: Path) -> None:
    r0 = random_records(300, seed=5)
    path = make_trace(tmp_path / "t.iot", r0, chunk_records=100)
    offsets = chunk_offsets(path)
    path.write_bytes(path.read_bytes()[: offsets[2]])
    r = repair(path)
    records, footer = _read(path)
    assert _same(records, r0[:200])
    assert r.damaged_file is None
    assert not list(tmp_path.glob("*.damaged*"))
    # No end time survived: the last completion stands in for it.
    assert footer["duration_ns"] == int(r0["ts_complete_ns"][:200].max())
    assert footer["end_estimated"] is True
    assert footer["end_mono_ns"] == 5_000_000_000 + footer["duration_ns"]


def test_repair_refuses_a_bad_header_and_touches_nothing(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300), chunk_records=100)
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF
    data = bytes(data[:-100])
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match="header checksum mismatch"):
        repair(path)
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.iot"]


def test_repair_of_a_complete_file_changes_nothing(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(30))
    data = path.read_bytes()
    r = repair(path)
    assert not r.repaired
    assert path.read_bytes() == data


def test_repair_twice_and_existing_backups_are_kept(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300), chunk_records=100)
    (tmp_path / "t.iot.damaged").write_bytes(b"earlier")
    path.write_bytes(path.read_bytes()[:-50])
    r = repair(path)
    assert Path(r.damaged_file).name == "t.iot.damaged.1"
    assert (tmp_path / "t.iot.damaged").read_bytes() == b"earlier"
    after = path.read_bytes()
    assert not repair(path).repaired
    assert path.read_bytes() == after


def test_repair_refuses_a_locked_file(tmp_path: Path) -> None:
    import fcntl

    path = make_trace(tmp_path / "t.iot", random_records(300), chunk_records=100)
    path.write_bytes(path.read_bytes()[:-50])
    data = path.read_bytes()
    with open(path, "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        with pytest.raises(IotapeError, match="locked by another process"):
            repair(path)
    assert path.read_bytes() == data


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, np.ndarray]:
    r = random_records(40, seed=11)
    path = make_trace(tmp_path_factory.mktemp("pristine") / "t.iot", r, chunk_records=10)
    return path.read_bytes(), r


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
    tail=st.binary(max_size=40),
)
def test_repair_never_loses_a_byte(tmp_path: Path, pristine, flips, cut, tail) -> None:
    data, records = pristine
    bad = bytearray(data)
    for pos, value in flips:
        bad[pos % len(bad)] = value
    if cut is not None:
        bad = bad[: cut % (len(bad) + 1)]
    bad = bytes(bad) + tail
    path = tmp_path / "t.iot"
    path.write_bytes(bad)
    for old in tmp_path.glob("t.iot.damaged*"):
        old.unlink()
    try:
        r = repair(path)
    except TraceFormatError:
        assert path.read_bytes() == bad
        return
    got, footer = _read(path)
    # Whole chunks of the original, in order, and nothing else.
    assert len(got) % 10 == 0
    assert footer["events"] == len(got)
    if not r.repaired:
        assert bad == data
        return
    kept = [r for r in (records[i : i + 10] for i in range(0, 40, 10)) if _contains(got, r)]
    assert sum(len(k) for k in kept) == len(got)
    # Nothing is lost: the kept chunks and the saved damaged bytes make up the damaged file.
    saved = Path(r.damaged_file).read_bytes() if r.damaged_file else b""
    assert sum(g["length"] for g in r.gaps) == len(saved)
    for g in r.gaps:
        at = g["saved_at"]
        assert saved[at : at + g["length"]] == bad[g["offset"] : g["offset"] + g["length"]]


def _contains(got: np.ndarray, chunk: np.ndarray) -> bool:
    raw = got.view(np.uint8).tobytes()
    return chunk.view(np.uint8).tobytes() in raw


def _wake_trace(path: Path, footer: dict) -> tuple[Path, np.ndarray]:
    """A version 3 trace (`iotape record --wakes`) of 500 records in chunks of 100,
    every seventh a wake record (op WAKE_OP), the rest requests."""
    r0 = random_records(500, seed=11)
    r0["op"] = np.where(np.arange(500) % 7 == 3, WAKE_OP, 0)
    with TraceWriter(path, header(), chunk_records=100, wakes=True) as w:
        w.write(r0)
        w.close(footer)
    return path, r0


def _wakes_in(path: Path) -> int:
    with open_trace(path) as t:
        return sum(len(w) for w in t.iter_wakes())


def test_repair_counts_the_wake_records_it_keeps_and_carries_the_ring_losses(
    tmp_path: Path,
) -> None:
    path, r0 = _wake_trace(
        tmp_path / "t.iot", {"stop_reason": "duration", "lost": {}, "wakes_lost": 3}
    )
    _damage_chunk(path, 2)
    repair(path)
    _, footer = _read(path)
    kept = np.concatenate([r0[:200], r0[300:]])
    # As the recorder counts them: the wake records of the chunks kept (chunk 2's
    # are in t.iot.damaged with its requests), and the ring's losses as they were.
    assert footer["wakes"] == int(np.count_nonzero(kept["op"] == WAKE_OP)) == _wakes_in(path)
    assert footer["wakes"] < int(np.count_nonzero(r0["op"] == WAKE_OP))
    assert footer["wakes_lost"] == 3


def test_repair_of_a_cut_wake_trace_counts_its_wakes_and_claims_no_losses(tmp_path: Path) -> None:
    path, r0 = _wake_trace(tmp_path / "t.iot", {"stop_reason": "duration", "wakes_lost": 0})
    path.write_bytes(path.read_bytes()[: chunk_offsets(path)[3]])
    repair(path)
    _, footer = _read(path)
    assert footer["wakes"] == int(np.count_nonzero(r0[:300]["op"] == WAKE_OP)) == _wakes_in(path)
    # The footer that held the ring's losses is gone: not knowable, so not written.
    assert "wakes_lost" not in footer


def test_repair_of_a_file_before_wake_records_writes_no_wake_count(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t.iot", random_records(300, seed=12), chunk_records=100)
    path.write_bytes(path.read_bytes()[: chunk_offsets(path)[2]])
    repair(path)
    _, footer = _read(path)
    assert "wakes" not in footer and "wakes_lost" not in footer


def test_repair_counts_the_sched_records_it_keeps(tmp_path: Path) -> None:
    # A version 4 trace (wake and sched records, docs/trace-format.md "Sched
    # records"): the repaired footer counts the intact chunks' sched records as
    # the recorder does, and carries the ring's losses where the footer survived.
    r0 = random_records(500, seed=13)
    r0["op"] = np.where(np.arange(500) % 5 == 1, SCHED_OP, np.where(np.arange(500) % 7 == 3,
                                                                     WAKE_OP, 0))  # fmt: skip
    path = tmp_path / "t.iot"
    with TraceWriter(path, header(), chunk_records=100, wakes=True, sched=True) as w:
        w.write(r0)
        w.close({"stop_reason": "duration", "lost": {}, "wakes_lost": 0, "sched_lost": 2})
    with open_trace(path) as t:
        assert t.header["version"] == SCHED_VERSION and t.footer is not None
        assert t.footer["sched"] == int(np.count_nonzero(r0["op"] == SCHED_OP))
    _damage_chunk(path, 2)
    repair(path)
    _, footer = _read(path)
    kept = np.concatenate([r0[:200], r0[300:]])
    with open_trace(path) as t:
        got = sum(len(s) for s in t.iter_sched())
    assert footer["sched"] == int(np.count_nonzero(kept["op"] == SCHED_OP)) == got
    assert footer["sched_lost"] == 2
