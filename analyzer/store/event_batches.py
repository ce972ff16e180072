"""Trace records to Arrow batches for ingest: one strided copy per column, no per-row Python.

Each chunk's fields are copied straight from the mapped file into the batch's
column buffers (one pass per column, no gathered copy of whole records first),
and the task names (`comm`, char[16]) become a dictionary column: a trace has a
handful of thread names, so hashing the 16 raw bytes and decoding each distinct
name once costs a fraction of decoding every row. Engines read a dictionary of
strings as their string type, so the stored values are the same as the plain
`records_to_arrow` gives.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

import schemas
from analyzer.store import native

COMM_TYPE = pa.dictionary(pa.int32(), pa.string())


def ingest_schema() -> pa.Schema:
    """The trace record's Arrow schema with `comm` as a dictionary of strings."""
    base = schemas.arrow_schema()
    i = base.get_field_index("comm")
    return base.set(i, pa.field("comm", COMM_TYPE, nullable=False))


def chunk_batches(chunks: Iterator[np.ndarray], rows: int) -> Iterator[pa.RecordBatch]:
    """Trace chunks (structured record views) gathered into batches of about `rows`
    records, with `ingest_schema()` (`column_batches` of each chunk's fields)."""
    names = ingest_schema().names
    return column_batches(({n: c[n] for n in names} for c in chunks), rows)


def column_batches(chunks: Iterator[dict[str, np.ndarray]], rows: int) -> Iterator[pa.RecordBatch]:
    """Trace chunks as columns (`Trace.iter_columns`) gathered into batches of about
    `rows` records, with `ingest_schema()`: one copy per column, into the batch.
    Every batch's `comm` indexes one dictionary that only grows: batches whose
    dictionaries are equal go to Parquet as dictionary pages, where a dictionary that
    changed from one batch to the next made the writer fall back to plain strings
    (8x the bytes, twice the time)."""
    schema = ingest_schema()
    names = schema.names
    seen = Names()
    pending: list[dict[str, np.ndarray]] = []
    n = 0
    for cols in chunks:
        pending.append(cols)
        n += len(cols["comm"])
        if n >= rows:
            yield _batch(pending, names, schema, seen)
            pending, n = [], 0
    if pending:
        yield _batch(pending, names, schema, seen)


def _batch(
    parts: list[dict[str, np.ndarray]], names: list[str], schema: pa.Schema, seen: Names
) -> pa.RecordBatch:
    arrays = []
    for name in names:
        if len(parts) == 1:
            col = np.ascontiguousarray(parts[0][name])
        else:
            col = np.concatenate([p[name] for p in parts])
        arrays.append(comm_dictionary(col, seen) if name == "comm" else as_arrow(col))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def as_arrow(col: np.ndarray) -> pa.Array:
    """A contiguous numpy array of numbers as an Arrow array over the same buffer.
    pa.array(col) is the same array, but its first call imports numpy.ma (~10 ms,
    on the conversion thread's first batch) to look for a mask."""
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(col.dtype), len(col), [None, pa.py_buffer(col)]
    )


def numbers(a: pa.Array) -> np.ndarray:
    """A numeric column without nulls as a numpy view of its buffer: what
    a.to_numpy() gives, without pyarrow's look for pandas on its first call
    (base.arrow_probe)."""
    if a.null_count:
        return a.to_numpy(zero_copy_only=False)
    dtype = np.dtype(a.type.to_pandas_dtype())
    return np.frombuffer(a.buffers()[1], dtype=dtype, count=len(a) + a.offset)[a.offset :]


class Names:
    """The task names met so far, in order of first sight: the dictionary that every
    batch of one ingest indexes."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.words: list[str] = []
        self.array = string_array([])
        # A batch had more than FEW_NAMES names: the next are hashed at once.
        self.many = False

    def codes(self, words: list[str]) -> np.ndarray:
        """Each word's index, adding those not seen yet."""
        fresh = [w for w in dict.fromkeys(words) if w not in self.index]
        for w in fresh:
            self.index[w] = len(self.words)
            self.words.append(w)
        if fresh:
            self.array = string_array(self.words)
        return np.array([self.index[w] for w in words], dtype=np.int32)


def string_array(words: list[str]) -> pa.StringArray:
    """pa.array(words, type=pa.string()), from its buffers: pyarrow's first conversion
    of Python objects imports dateutil (~6 ms on the conversion thread, for its
    interval types) and looks for pandas (`base.arrow_probe`)."""
    data = [w.encode() for w in words]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in data], out=offsets[1:])
    return pa.Array.from_buffers(
        pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    )


def comm_dictionary(comm: np.ndarray, seen: Names | None = None) -> pa.DictionaryArray:
    """char[16] names (numpy S16) to a dictionary of strings, each cut at its first NUL;
    a name that is not UTF-8 keeps its bytes visible, escaped (as `decode_comm`). The
    dictionary is `seen`'s, grown by the names new to it."""
    seen = seen or Names()
    raw = np.ascontiguousarray(comm).view(np.uint8)
    halves = raw.view(np.uint64).reshape(-1, 2)
    lo, hi = halves[:, 0], halves[:, 1]
    # names.c codes one name as fast as this test finds it: straight there.
    few = not seen.many and native.lib(NAMES_PURE) is not None
    if not few and len(halves) and bool((lo == lo[0]).all()) and bool((hi == hi[0]).all()):
        # One name in the whole batch (fio's threads, a database's writer): two
        # compares a row where hashing each row's 16 bytes took ~1 ms a batch.
        (word,) = seen.codes([_word(raw[:16].tobytes())])
        indices = as_arrow(np.full(len(halves), word, dtype=np.int32))
        return pa.DictionaryArray.from_arrays(indices, seen.array)
    codes = None if seen.many else _few_names(raw, lo, hi, seen)
    if codes is None:
        seen.many = True  # this trace's batches have many names: hash them
        codes = _hashed_names(raw, len(comm), seen)
    return pa.DictionaryArray.from_arrays(as_arrow(codes), seen.array)


# Names a batch may have for `_few_names`; past it, hashing them is cheaper.
FEW_NAMES = 8
NAMES_PURE = "IOTAPE_NAMES_PURE"


def _few_names(raw: np.ndarray, lo: np.ndarray, hi: np.ndarray, seen: Names) -> np.ndarray | None:
    """Each row's code where a batch has a few names (a database's writer threads),
    names.c's one pass, or numpy's: one name at a time, two compares a row of those
    left (~1.5 ms a batch of four names; ~4 ms hashed). None past FEW_NAMES. Names
    come in order of first sight, as hashed."""
    so = native.lib(NAMES_PURE)
    if so is not None:
        codes = np.empty(len(lo), dtype=np.int32)
        names = np.empty(16 * FEW_NAMES, dtype=np.uint8)
        k = so.iot_names_code(len(lo), raw.ctypes.data, codes.ctypes.data, names.ctypes.data,
                              FEW_NAMES)  # fmt: skip
        if k < 0:
            return None
        index = seen.codes([_word(names[16 * i : 16 * i + 16].tobytes()) for i in range(k)])
        # The batch's names in the order the dictionary has them: its codes as they are.
        return codes if bool((index == np.arange(k)).all()) else index[codes]
    codes = np.full(len(lo), -1, dtype=np.int32)
    i = 0
    for _ in range(FEW_NAMES):
        (code,) = seen.codes([_word(raw[16 * i : 16 * i + 16].tobytes())])
        codes[(lo == lo[i]) & (hi == hi[i])] = code
        unset = codes < 0
        i = int(unset.argmax())
        if not unset[i]:
            return codes
    return None


def _call_function(name: str, args: list) -> pa.Array:
    """pyarrow.compute's own call_function (it re-exports this one): importing
    pyarrow.compute builds a Python wrapper for every kernel, ~40 ms of a command's
    start, for the one kernel ingest calls here; and its module (~4 ms) only where
    that kernel is called (a trace's batches of many names, or trace Parquet)."""
    from pyarrow._compute import call_function

    return call_function(name, args)


def _hashed_names(raw: np.ndarray, n: int, seen: Names) -> np.ndarray:
    """Each row's code by Arrow's hash of the 16 bytes."""
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(raw)])
    enc = _call_function("dictionary_encode", [fixed])
    # Names equal up to their first NUL but not after it get one entry.
    words = [_word(bytes(v)) for v in enc.dictionary.to_pylist()]
    return seen.codes(words)[enc.indices.to_numpy()]


def _word(name: bytes) -> str:
    """A char[16] task name as text: cut at its first NUL, bytes that are not UTF-8
    kept visible, escaped (as `decode_comm`)."""
    return name.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")


def as_ingest_batch(b: pa.RecordBatch) -> pa.RecordBatch:
    """A batch with the plain trace schema (Parquet from `trace convert`) made like
    `chunk_batches` gives them."""
    i = b.schema.get_field_index("comm")
    comm = b.column(i)
    if comm.type != COMM_TYPE:
        comm = _call_function("dictionary_encode", [comm.cast(pa.string())]).cast(COMM_TYPE)
    arrays = list(b.columns)
    arrays[i] = comm
    return pa.RecordBatch.from_arrays(arrays, schema=ingest_schema())
