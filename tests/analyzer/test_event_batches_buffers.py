"""Arrow arrays to and from numpy by their buffers (event_batches.numbers and
string_array, issue 36): the values pyarrow's own conversions give, without its
look for pandas or its import of dateutil."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from analyzer.store.event_batches import numbers, string_array

TYPES = [pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.int32(), pa.uint32()]
TYPES += [pa.int64(), pa.uint64()]


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_numbers_are_to_numpys(t: pa.DataType) -> None:
    info = np.iinfo(t.to_pandas_dtype())
    values = np.random.default_rng(3).integers(info.min, info.max, 1000, dtype=info.dtype)
    a = pa.array(values, type=t)
    for part in (a, a.slice(0), a.slice(17), a.slice(5, 100), a.slice(1000)):
        got = numbers(part)
        assert got.dtype == part.to_numpy().dtype
        assert np.array_equal(got, part.to_numpy())


def test_numbers_with_nulls_are_to_numpys() -> None:
    a = pa.array([1, None, 3], type=pa.int64())
    assert np.array_equal(numbers(a), a.to_numpy(zero_copy_only=False), equal_nan=True)


@pytest.mark.parametrize(
    "words", [[], ["fio"], ["", "kworker/0:1", "db-writer", "\u00e9t\u00e9", "a\\x80b"]]
)
def test_string_array_is_pa_arrays(words: list[str]) -> None:
    got = string_array(words)
    got.validate(full=True)
    assert got.equals(pa.array(words, type=pa.string()))
