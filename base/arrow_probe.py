"""pyarrow's look for pandas, answered without importing it.

pyarrow asks whether pandas is there the first time anything builds an array
(`pa.array`, even of numpy values), and to answer it imports pandas: 0.12-0.17 s
of a command that never touches pandas (`iotape ingest` of a trace). Here that
first look fails, so pyarrow notes "no pandas" for its type checks; whatever
does want pandas later (`Table.to_pandas`, `from_pandas`) still gets it, since
pyarrow imports it again then (pyarrow/pandas-shim.pxi: a failed try is retried
by every call that needs pandas).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.machinery import ModuleSpec


class _NotNow:
    def find_spec(self, name: str, path=None, target=None) -> ModuleSpec | None:
        if name == "pandas":
            raise ImportError("pandas: not imported for pyarrow's first look")
        return None


def skip_pandas() -> None:
    """Make pyarrow's first look for pandas, unless pandas is already imported.

    The finder goes in a new list that replaces sys.meta_path, and out the same
    way, never by changing the list in place: another thread importing meanwhile
    (`iotape ingest` opens its store on one) walks the list it took, which an
    entry put in and taken out under it could make skip one of its finders."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    with without_pandas():
        pa.array([0])


@contextmanager
def without_pandas() -> Iterator[None]:
    """pandas refused to every import inside (unless already imported): pyarrow's
    looks for it, whenever they come, note it missing, as skip_pandas's look does,
    and none comes where nothing asks: `iotape ingest` of a trace builds its arrays
    from buffers, so it makes no look at all, where skip_pandas's look imported
    dateutil for pyarrow's conversion of Python objects (~6 ms of its start; issue
    36). For code that never uses pandas itself; pandas imports again after.
    In and out as skip_pandas's finder (a new list each way)."""
    if "pandas" in sys.modules:
        yield
        return
    finder = _NotNow()
    sys.meta_path = [finder, *sys.meta_path]
    try:
        yield
    finally:
        sys.meta_path = [f for f in sys.meta_path if f is not finder]
