"""The loader's trace writer (recorder/tracewriter.c) on its own, through
recorder/build/iotape-tracewriter-check: records in, the project's reader out,
equal record for record. The delta-split transform runs block by block (64
records) as records are committed and is packed when the chunk is written, so the
counts here straddle a block and a chunk, and partial chunks (the loader's timer)
end mid-block."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import need

import schemas
from recorder.tracefile import open_trace

CHECK = Path(__file__).resolve().parents[2] / "recorder" / "build" / "iotape-tracewriter-check"
RSIZE = schemas.record_dtype().itemsize
CODECS = {"plain": 0, "zstd": 1, "lz4": 2, "auto": 255}


def _records(n: int, seed: int) -> np.ndarray:
    """Requests as the kernel side writes them: completion times rising (a few out
    of order), queue before issue, offsets mostly sequential, every other field
    random bytes, so a transposed or shifted byte shows."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, n * RSIZE, dtype=np.uint8)
    recs = raw.view(schemas.record_dtype())
    done = np.cumsum(rng.integers(0, 20_000, n)).astype(np.uint64) + 10**9
    done[rng.random(n) < 0.01] -= np.uint64(500)  # completion order is not strict
    recs["ts_complete_ns"] = done
    recs["ts_issue_ns"] = done - rng.integers(1_000, 90_000, n).astype(np.uint64)
    recs["ts_queue_ns"] = recs["ts_issue_ns"] - rng.integers(0, 5_000, n).astype(np.uint64)
    recs["bytes"] = 4096
    recs["offset"] = (np.arange(n, dtype=np.uint64) * 4096) ^ (
        rng.integers(0, 2, n).astype(np.uint64) << np.uint64(30)
    )
    return recs


def _write(tmp_path: Path, recs: np.ndarray, chunk: int, codec: str, flush_at=(), env=None) -> Path:
    need(CHECK.exists(), f"{CHECK} (make native)")
    tag = "-sse2" if env else ""
    out = tmp_path / f"{codec}-{chunk}-{len(recs)}{tag}.iot"
    cmd = [str(CHECK), str(out), str(chunk), str(CODECS[codec]), *map(str, flush_at)]
    res = subprocess.run(cmd, input=recs.tobytes(), capture_output=True, env=env)
    assert res.returncode == 0, res.stderr
    return out


def _read(path: Path) -> tuple[bytes, list[int], list[str]]:
    """All records' bytes (padding included), and per chunk its count and codec."""
    t = open_trace(path)
    infos = list(t._infos())
    return t.read_all().tobytes(), [i.count for i in infos], [i.codec for i in infos]


def _chunk_counts(n: int, cap: int, flush_at: list[int]) -> list[int]:
    """The chunks' counts: one ends when full, at each flush and at the end."""
    counts, open_n = [], 0
    for i in range(1, n + 1):
        open_n += 1
        if open_n == cap or i in flush_at or i == n:
            counts.append(open_n)
            open_n = 0
    return counts


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000, 8192, 8192 + 70, 3 * 8192])
def test_records_come_back_as_written(tmp_path: Path, codec: str, n: int) -> None:
    recs = _records(n, seed=n)
    got, counts, _ = _read(_write(tmp_path, recs, 8192, codec))
    assert counts == [min(8192, n - i) for i in range(0, n, 8192)]
    assert got == recs.tobytes()


@pytest.mark.parametrize("codec", ["zstd", "lz4", "auto"])
def test_partial_chunks_mid_block_come_back(tmp_path: Path, codec: str) -> None:
    """Chunks cut by flushes at every offset within a block and across one, and
    chunks whose size is not a multiple of the block: each packs its planes to its
    own count."""
    recs = _records(5000, seed=7)
    flush_at = [1, 2, 64, 100, 128, 129, 191, 300, 1000, 1001, 1064, 2500]
    got, counts, codecs = _read(_write(tmp_path, recs, 1000, codec, flush_at))
    assert got == recs.tobytes()
    assert counts == _chunk_counts(len(recs), 1000, flush_at)
    # Compressed, not the plain fallback (a lone record may not pay for zstd's frame).
    assert all(k != "none" for c, k in zip(counts, codecs, strict=True) if c > 1)


def test_a_chunk_that_does_not_shrink_is_plain_and_intact(tmp_path: Path) -> None:
    """Random bytes in every field do not compress: the chunk is written plain from
    the records as committed, after its blocks were transformed."""
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, 700 * RSIZE, dtype=np.uint8)
    recs = raw.view(schemas.record_dtype())
    got, counts, codecs = _read(_write(tmp_path, recs, 256, "lz4"))
    assert got == recs.tobytes()
    assert counts == [256, 256, 188] and set(codecs) == {"none"}


@pytest.mark.parametrize("codec", ["lz4", "auto"])
def test_the_avx512_transform_writes_the_sse2_file(tmp_path: Path, codec: str) -> None:
    """Where the CPU has AVX-512, whole blocks are transposed with it; the file is
    the one the SSE2 path ($IOTAPE_SPLIT_SSE2, any x86-64) writes, byte for byte,
    full and partial chunks alike (on a CPU without it, both files are SSE2's)."""
    recs = _records(3 * 8192 + 100, seed=11)
    flush_at = [64, 129, 8192 + 1000]
    fast = _write(tmp_path, recs, 8192, codec, flush_at)
    env = {**os.environ, "IOTAPE_SPLIT_SSE2": "1"}
    slow = _write(tmp_path, recs, 8192, codec, flush_at, env=env)
    assert fast.read_bytes() == slow.read_bytes()
    assert _read(fast)[0] == recs.tobytes()
