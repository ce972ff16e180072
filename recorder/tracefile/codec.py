"""Compressed chunks (format version 2): the transform before the codec, and the codecs.

A compressed chunk stores its records transformed (`delta-split`: times and offsets
as zigzagged deltas, then the 80 bytes of each record split into 80 one-byte planes)
and then compressed (zstd or lz4 block). Both steps are exactly invertible; the C
loader (recorder/tracewriter.c) writes the same bytes. docs/trace-format.md has the
rules and the measurements that chose zstd.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

import schemas
from recorder.tracefile import planes as planes_c
from recorder.tracefile.format import RECORD_DTYPE, RECORD_SIZE, Defect

_FILE = schemas.file_constants()
CODECS: dict[int, str] = {int(v): k for k, v in _FILE["codec"].items()}
CODEC_IDS: dict[str, int] = {k: int(v) for k, v in _FILE["codec"].items()}
TRANSFORMS: dict[int, str] = {int(v): k for k, v in _FILE["transform"].items()}
TRANSFORM_IDS: dict[str, int] = {k: int(v) for k, v in _FILE["transform"].items()}
DELTA_SPLIT = TRANSFORM_IDS["delta-split"]
# What Python writers use for "auto": they write offline, where zstd's ~17 % smaller
# files are worth its CPU. The loader's "auto" picks per chunk (docs/trace-format.md).
DEFAULT = "zstd"
ZSTD_LEVEL = 1
CHOICES = ("none", *CODEC_IDS)


def resolve(name: str) -> str:
    """A user's `--compress` choice as a Python writer's: "auto" is zstd."""
    if name == "auto":
        return DEFAULT
    if name not in CHOICES:
        raise ValueError(f"--compress must be auto, {', '.join(CHOICES)}; not {name!r}")
    return name


@cache
def _codecs() -> dict[int, Any]:
    """pyarrow's codecs (a dependency already): zstd frames and lz4 blocks ("lz4_raw"),
    for writing, and for reading where planes.py's library is not built. Imported
    here, not at the top: a reader decompresses in C (planes.c's iot_decompress)
    and need not load pyarrow (~0.1 s of a command's start)."""
    import pyarrow as pa

    return {
        CODEC_IDS["zstd"]: pa.Codec("zstd", compression_level=ZSTD_LEVEL),
        CODEC_IDS["lz4"]: pa.Codec("lz4_raw"),
    }


_U64 = np.uint64
_LAYOUT = planes_c.Layout(RECORD_DTYPE)


def _zigzag(d: np.ndarray) -> np.ndarray:
    s = d.view(np.int64)
    return ((s << 1) ^ (s >> 63)).view(_U64)


def _unzigzag(z: np.ndarray) -> np.ndarray:
    return (z >> _U64(1)) ^ (_U64(0) - (z & _U64(1)))


def _shift(a: np.ndarray) -> np.ndarray:
    """a[i - 1] at i, 0 at 0."""
    out = np.zeros_like(a)
    out[1:] = a[:-1]
    return out


def encode_records(records: np.ndarray) -> bytes:
    """The `delta-split` transform of contiguous records, as bytes (planes, byte-major)."""
    # Copied as bytes: numpy copies a structured array field by field, padding unset.
    t = np.empty(len(records), dtype=RECORD_DTYPE)
    t.view(np.uint8)[:] = np.ascontiguousarray(records).view(np.uint8).reshape(-1)
    done, issue = records["ts_complete_ns"], records["ts_issue_ns"]
    offset = records["offset"]
    end = offset + records["bytes"].astype(_U64)
    with np.errstate(over="ignore"):
        t["ts_complete_ns"] = _zigzag(done - _shift(done))
        t["ts_issue_ns"] = _zigzag(done - issue)
        t["ts_queue_ns"] = _zigzag(issue - records["ts_queue_ns"])
        t["offset"] = _zigzag(offset - _shift(end))
    raw = t.view(np.uint8).reshape(len(t), RECORD_SIZE)
    return np.ascontiguousarray(raw.T).tobytes()


def _undelta(out: Any) -> None:
    """The deltas of `encode_records` undone in place, on records or on columns
    (anything indexed by field name)."""
    with np.errstate(over="ignore"):
        done = np.cumsum(_unzigzag(out["ts_complete_ns"]), dtype=_U64)
        issue = done - _unzigzag(out["ts_issue_ns"])
        out["ts_queue_ns"] = issue - _unzigzag(out["ts_queue_ns"])
        out["ts_issue_ns"] = issue
        out["ts_complete_ns"] = done
        step = _unzigzag(out["offset"]) + _shift(out["bytes"].astype(_U64))
        out["offset"] = np.cumsum(step, dtype=_U64)


def decode_records(planes: bytes | memoryview | np.ndarray, count: int) -> np.ndarray:
    """Inverse of `encode_records`: `count` records from their planes (in C where
    planes.py's library is built: every read of a compressed trace goes through
    here, 0.5 us a record in numpy)."""
    out = np.empty(count, dtype=RECORD_DTYPE)
    so = planes_c.lib()
    if so is not None:
        planes_c.decode_records_into(so, _LAYOUT, np.frombuffer(planes, np.uint8), out)
        return out
    raw = np.frombuffer(planes, dtype=np.uint8).reshape(RECORD_SIZE, count)
    out.view(np.uint8).reshape(count, RECORD_SIZE)[:] = raw.T
    _undelta(out)
    return out


def decode_columns(
    planes: bytes | memoryview | np.ndarray,
    count: int,
    out: dict[str, np.ndarray] | None = None,
    at: int = 0,
) -> dict[str, np.ndarray]:
    """`decode_records`, a column at a time: each field's planes transposed on their
    own into a contiguous array of its type, and the deltas undone on those arrays.
    The same values as `decode_records(planes, count)[name]`, without the whole
    record array and the strided copy of each column out of it (ingest's Arrow
    batches want columns: trace to batches 0.44 s -> 0.31 s for 2.4 M records here;
    planes.py's C decoder, where built, does it in two passes). With `out`, the
    columns are written into its arrays from `at` on, and `out` comes back."""
    so = planes_c.lib()
    if so is not None:
        if out is None:
            out = {
                n: np.empty(count, dt) for n, dt in zip(_LAYOUT.names, _LAYOUT.dtypes, strict=True)
            }
        cols = [out[n] for n in _LAYOUT.names]
        planes_c.decode_into(so, _LAYOUT, np.frombuffer(planes, np.uint8), count, cols, at)
        return out
    if out is not None:
        for name, col in decode_columns(planes, count).items():
            out[name][at : at + count] = col
        return out
    raw = np.frombuffer(planes, dtype=np.uint8).reshape(RECORD_SIZE, count)
    fields = RECORD_DTYPE.fields
    assert fields is not None  # a record dtype
    out = {}
    for name, field in fields.items():
        dt, pos = field[0], field[1]
        size = dt.itemsize
        if size == 1:
            out[name] = raw[pos].copy().view(dt)
        else:
            out[name] = np.ascontiguousarray(raw[pos : pos + size].T).view(dt).reshape(count)
    _undelta(out)
    return out


def compress(codec: int, data: bytes) -> bytes:
    return bytes(_codecs()[codec].compress(data, asbytes=True))


def known(codec: int, transform: int) -> str | None:
    """Why a chunk with these ids cannot be read by this iotape, or None."""
    if codec not in CODECS:
        names = ", ".join(f"{i} {n}" for i, n in sorted(CODECS.items()))
        return f"compression id {codec} is unknown (this iotape reads {names})"
    if transform not in TRANSFORMS:
        names = ", ".join(f"{i} {n}" for i, n in sorted(TRANSFORMS.items()))
        return f"chunk transform id {transform} is unknown (this iotape reads {names})"
    return None


def decompress(
    codec: int,
    transform: int,
    stored: memoryview,
    count: int,
    pos: int,
    seq: int,
    decode: bool = True,
) -> np.ndarray:
    """The records of a compressed chunk whose ids are known and whose CRC held;
    `Defect` when its bytes do not decode to `count` records (a writer's fault).
    With `decode` False, a `delta-split` chunk comes back as its planes (uint8, for
    `decode_columns`), not yet transformed back."""
    size = count * RECORD_SIZE
    so = planes_c.lib()
    if so is not None and planes_c.has_codecs(so):
        data: Any = np.empty(size, np.uint8)
        got = planes_c.decompress(so, codec, np.frombuffer(stored, np.uint8), data)
        if isinstance(got, str):
            raise Defect(pos, f"chunk {seq}: does not decompress ({CODECS[codec]}: {got})")
        data = data[:got]
        data.flags.writeable = False
    else:
        data = _pyarrow_decompress(codec, stored, size, pos, seq)
    if len(data) != size:
        raise Defect(pos, f"chunk {seq}: decompresses to {len(data)} bytes, expected {size}")
    if transform == DELTA_SPLIT and not decode:
        return np.frombuffer(data, dtype=np.uint8)
    if transform == DELTA_SPLIT:
        records = decode_records(data, count)
    else:
        records = np.frombuffer(data, dtype=RECORD_DTYPE, count=count)
    records.flags.writeable = False
    return records


def _pyarrow_decompress(codec: int, stored: memoryview, size: int, pos: int, seq: int) -> bytes:
    import pyarrow as pa

    try:
        return bytes(_codecs()[codec].decompress(stored, decompressed_size=size, asbytes=True))
    except (OSError, ValueError, RuntimeError, pa.ArrowException) as e:
        raise Defect(pos, f"chunk {seq}: does not decompress ({CODECS[codec]}: {e})") from None
