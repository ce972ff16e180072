"""base.arrow_probe: a command that builds Arrow arrays does not import pandas for
it, and pandas still works for whoever asks for it later."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import numpy as np
from base.arrow_probe import skip_pandas
skip_pandas()
import pyarrow as pa
a = pa.array(np.arange(3))
t = pa.table({"a": a, "s": pa.array(["x", "y", "z"])})
print("pandas" in sys.modules)
df = t.to_pandas()
back = pa.Table.from_pandas(df, preserve_index=False)
print(type(df).__name__, back.column("a").to_pylist() == [0, 1, 2], pa.array(df["a"]).type)
"""


def test_arrays_without_pandas_and_pandas_after() -> None:
    p = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:2] == ["False", "DataFrame True int64"]


def test_without_pandas_refuses_it_inside_and_not_after() -> None:
    """Inside, arrays of Python objects and numpy build without pandas, and nothing
    is looked for (nor dateutil imported) before an array is built; after, pandas
    imports and pyarrow converts to and from it."""
    code = (
        "import sys\n"
        "from base.arrow_probe import without_pandas\n"
        "with without_pandas():\n"
        "    print(sorted(m for m in ('pyarrow', 'dateutil', 'pandas') if m in sys.modules))\n"
        "    import numpy as np\n"
        "    import pyarrow as pa\n"
        "    a = pa.array(np.arange(3))\n"
        "    t = pa.table({'a': a, 's': pa.array(['x', 'y', 'z'])})\n"
        "    print('pandas' in sys.modules)\n"
        "df = t.to_pandas()\n"
        "print(type(df).__name__, pa.Table.from_pandas(df).column('a').to_pylist())\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["[]", "False", "DataFrame [0, 1, 2]"]


def test_ingest_command_imports_no_pandas(tmp_path) -> None:
    """Nor dateutil (pyarrow's conversion of Python objects: a trace's arrays are
    built from buffers, ~6 ms), nor pyarrow.compute, .acero or .dataset (~40-60 ms of
    its start), nor rich when
    stderr is not a terminal (no progress bar to draw: ~30 ms), nor pydantic (typer's
    coercion of its values: iotape/coercion.py, 45-65 ms)."""
    from trace_helpers import make_trace, workload_records

    trace = make_trace(tmp_path / "t.iot", workload_records(500, seed=3))
    code = (
        "import sys; sys.argv = ['iotape', 'ingest', sys.argv[1], '--db', sys.argv[2],"
        " '--tag', 'k=v']\n"
        "import atexit\n"
        "from iotape import cli\n"
        # Printed at exit: `iotape ingest` ends the process itself (cli.QUICK_EXIT),
        # after the atexit handlers.
        "@atexit.register\n"
        "def _modules():\n"
        "    print('pandas' in sys.modules or 'dateutil' in sys.modules)\n"
        "    print(sorted(m for m in sys.modules if m in ('rich', 'pydantic')"
        " or m.startswith('pyarrow.')"
        " and m.split('.')[1] in ('compute', 'acero', 'dataset')))\n"
        "cli.main()\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(trace), str(tmp_path / "s.duckdb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "500 events" in p.stdout and p.stdout.strip().splitlines()[-2:] == ["False", "[]"]
