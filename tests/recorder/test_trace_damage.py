"""Damage anywhere in a trace: check finds every damaged range, repair keeps every
chunk the damage did not touch, and the gaps it records match the damage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from trace_helpers import chunk_extents, chunk_size, make_trace, workload_records
from typer.testing import CliRunner

from base.errors import IotapeError
from iotape.commands.trace import app
from recorder.tracefile import TraceFormatError, open_trace
from recorder.tracefile.check import check, repair

CHUNK = 25
EVENTS = 2500  # 100 chunks


# Every test runs on plain chunks (format version 1) and on compressed ones (version 2).
@pytest.fixture(scope="module", params=["none", "zstd"])
def pristine(tmp_path_factory: pytest.TempPathFactory, request) -> tuple:
    r = workload_records(EVENTS, seed=3)
    path = make_trace(
        tmp_path_factory.mktemp("pristine") / "t.iot",
        r,
        chunk_records=CHUNK,
        footer={"stop_reason": "signal", "lost": {"ringbuf_full": 2}, "duration_ns": 10**9},
        compression=request.param,
    )
    extents = chunk_extents(path)
    return path.read_bytes(), r, [o for o, _ in extents], [e for _, e in extents]


def _damage(data: bytes, rng: np.random.Generator, low: int) -> tuple[bytes, list[tuple]]:
    """Up to 3 non-overlapping overwrites, deletions or insertions at or after byte `low`,
    as (kind, start, end) in the original's coordinates."""
    ops: list[tuple[str, int, int]] = []
    for _ in range(rng.integers(1, 4)):
        kind = str(rng.choice(["overwrite", "delete", "insert"]))
        start = int(rng.integers(low, len(data)))
        length = int(rng.integers(1, 3 * chunk_size(CHUNK)))
        end = start if kind == "insert" else min(start + length, len(data))
        if all(end < s or start > e for _, s, e in ops):
            ops.append((kind, start, end if kind != "insert" else start))
    out = bytearray(data)
    # From the end backwards, so the positions of the earlier ones still hold.
    for kind, start, end in sorted(ops, key=lambda o: o[1], reverse=True):
        if kind == "overwrite":
            noise = rng.integers(1, 256, size=end - start, dtype=np.uint8).tobytes()
            out[start:end] = bytes(a ^ b for a, b in zip(out[start:end], noise, strict=True))
        elif kind == "delete":
            del out[start:end]
        else:
            n = int(rng.integers(1, 200))
            out[start:start] = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
    return bytes(out), ops


def _touched(ops: list[tuple], offsets: list[int], ends: list[int]) -> set[int]:
    """Chunks whose bytes an operation changed (an insertion between two chunks touches none)."""
    hit = set()
    for i, (o, end) in enumerate(zip(offsets, ends, strict=True)):
        for kind, s, e in ops:
            if (kind == "insert" and o < s < end) or (kind != "insert" and s < end and e > o):
                hit.add(i)
    return hit


def _chunks(records: np.ndarray, which: list[int]) -> bytes:
    # Bytes, not np.concatenate: its dtype promotion would pack the record's fields.
    return b"".join(records[i * CHUNK : (i + 1) * CHUNK].tobytes() for i in which)


def test_damage_anywhere_keeps_every_untouched_chunk(tmp_path: Path, pristine) -> None:
    data, records, offsets, ends = pristine
    footer_at = ends[-1]
    path = tmp_path / "t.iot"
    for seed in range(300):
        rng = np.random.default_rng(seed)
        bad, ops = _damage(data, rng, offsets[0])
        path.write_bytes(bad)
        for old in tmp_path.glob("t.iot.damaged*"):
            old.unlink()
        touched = _touched(ops, offsets, ends)
        rep = check(path)
        json.dumps(rep.to_dict())
        r = repair(path)
        with open_trace(path) as t:
            got = t.read_all()
            footer = t.footer
        keep = [i for i in range(len(offsets)) if i not in touched]
        msg = f"seed {seed}: {ops}"
        assert got.tobytes() == _chunks(records, keep), msg
        footer_intact = all(e <= footer_at for _, _, e in ops)
        assert footer["events"] == len(got), msg
        if footer_intact:
            # The capture's own counters survive the damage, wherever the footer now is.
            assert footer["lost"] == {"ringbuf_full": 2}, msg
        missing = {g["first_chunk"] + k for g in footer["gaps"] for k in range(g["chunks"])}
        assert missing <= touched, msg
        if footer_intact or len(offsets) - 1 not in touched:
            assert missing == touched, msg
        for g in footer["gaps"]:
            lost = CHUNK * g["chunks"]
            assert g["events"] == lost if g["events_exact"] else g["events"] <= lost, msg
        # Nothing is lost: each damaged range is in FILE.damaged as it was.
        saved = Path(r.damaged_file).read_bytes() if r.damaged_file else b""
        for g in footer["gaps"]:
            at, n = g["saved_at"], g["length"]
            assert saved[at : at + n] == bad[g["offset"] : g["offset"] + n], msg
        assert sum(g["length"] for g in footer["gaps"]) == len(saved), msg


def test_damage_in_the_header_is_refused_and_leaves_the_file(tmp_path: Path, pristine) -> None:
    data, _, offsets, _ = pristine
    path = tmp_path / "t.iot"
    for seed in range(40):
        rng = np.random.default_rng(seed)
        at = int(rng.integers(0, offsets[0]))
        bad = bytearray(data)
        bad[at] ^= int(rng.integers(1, 256))
        path.write_bytes(bad)
        with pytest.raises(TraceFormatError) as e:
            repair(path)
        assert "\n" not in str(e.value) and str(e.value).startswith(f"{path}: byte ")
        assert path.read_bytes() == bad
        assert sorted(p.name for p in tmp_path.iterdir()) == ["t.iot"]


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": "300"})


def test_several_damaged_ranges(tmp_path: Path, pristine) -> None:
    data, records, offsets, _ = pristine
    bad = bytearray(data)
    for k in (10, 11, 40):
        bad[offsets[k] + 100] ^= 0xFF
    bad[offsets[70] : offsets[70] + 8] = b"\0" * 8  # a chunk header zeroed
    path = tmp_path / "t.iot"
    path.write_bytes(bad)

    res = _invoke("check", str(path))
    assert res.exit_code == 1
    lines = res.output.splitlines()
    assert f"byte {offsets[10]:,}: chunk 10: payload checksum mismatch" in lines[0]
    ranges = [x.strip() for x in lines if x.strip().startswith("damaged bytes")]
    assert ranges[0].startswith(f"damaged bytes {offsets[10]:,}..{offsets[12]:,}: chunks 10..11")
    assert "50 events lost; 86 intact chunks after it" in ranges[0]
    assert ranges[1].startswith(f"damaged bytes {offsets[40]:,}..{offsets[41]:,}: chunk 40,")
    assert "25 events lost; 58 intact chunks after it" in ranges[1]
    assert ranges[2].startswith(f"damaged bytes {offsets[70]:,}..{offsets[71]:,}: chunk 70,")
    # A chunk whose header is gone still counts: the footer tells how many events it held.
    assert "25 events lost; 29 intact chunks after it" in ranges[2]
    assert len(ranges) == 3

    # Every reader stops on the damage with one line that says what to run.
    out = tmp_path / "t.parquet"
    with pytest.raises(IotapeError) as e:
        _invoke("convert", str(path), "-o", str(out))
    assert str(e.value) == (
        f"{path}: byte {offsets[10]}: chunk 10: payload checksum mismatch; "
        f"run `iotape trace check --repair {path}` to keep every intact chunk"
    )
    assert not out.exists()

    assert _invoke("check", str(path), "--repair").exit_code == 0
    assert _invoke("check", str(path)).exit_code == 0
    info = json.loads(_invoke("info", str(path), "--json").output)
    assert info["complete"] and info["events"] == EVENTS - 4 * CHUNK
    assert [(g["first_chunk"], g["chunks"], g["events"]) for g in info["gaps"]] == [
        (10, 2, 50),
        (40, 1, 25),
        (70, 1, 25),
    ]
    table = _invoke("info", str(path)).output
    assert "4 chunks (100 events) lost in 3 gaps" in table
    assert _invoke("convert", str(path), "-o", str(out)).exit_code == 0
    with open_trace(path) as t:
        got = t.read_all()
    keep = [i for i in range(100) if i not in (10, 11, 40, 70)]
    assert got.tobytes() == _chunks(records, keep)


def test_file_that_ends_inside_a_chunk_header(tmp_path: Path, pristine) -> None:
    data, records, offsets, _ = pristine
    path = tmp_path / "t.iot"
    path.write_bytes(data[: offsets[60] + 10])
    rep = check(path)
    assert "chunk 60: truncated: file ends inside the chunk header" in rep.problem
    assert rep.events == 60 * CHUNK
    [d] = rep.damage
    assert (d.offset, d.length, d.first_chunk) == (offsets[60], 10, 60)
    # The header is cut: its sequence number and size cannot be trusted, so no chunk
    # is counted, but the bytes are saved.
    assert d.chunks == 0 and d.events == 0
    r = repair(path)
    assert r.truncated_at == offsets[60]
    assert Path(r.damaged_file).read_bytes() == data[offsets[60] : offsets[60] + 10]
    with open_trace(path) as t:
        assert t.read_all().tobytes() == records[: 60 * CHUNK].tobytes()


def test_a_truncated_file_loses_only_its_last_chunk(tmp_path: Path, pristine) -> None:
    data, records, offsets, _ = pristine
    path = tmp_path / "t.iot"
    path.write_bytes(data[: offsets[99] + 300])
    r = repair(path)
    assert (r.kept_chunks, r.dropped_chunks, r.dropped_events) == (99, 1, CHUNK)
    with open_trace(path) as t:
        assert t.read_all().tobytes() == records[: 99 * CHUNK].tobytes()
        assert t.footer["gaps"][0]["events_exact"] is True


def test_a_repaired_trace_ingests_with_its_gaps(tmp_path: Path, pristine, store) -> None:
    from analyzer.store import catalog
    from analyzer.store.ingest import ingest

    data, _, offsets, _ = pristine
    bad = bytearray(data)
    bad[offsets[30] + 200] ^= 0x01
    path = tmp_path / "t.iot"
    path.write_bytes(bad)
    with pytest.raises(IotapeError, match="chunk 30: payload checksum mismatch; run `iotape"):
        ingest(store, path)
    assert catalog.all_runs(store) == []
    repair(path)
    r = ingest(store, path)
    assert r.events == EVENTS - CHUNK
    [gap] = catalog.get(store, r.run_id)["parameters"]["gaps"]
    assert (gap["first_chunk"], gap["chunks"], gap["events"], gap["offset"]) == (
        30,
        1,
        CHUNK,
        offsets[30],
    )
