"""The emulated array's model (analyzer/lab/src/array*.c) is split into parts that
depend one way, as tests/test_layout.py asks of Python modules: each part uses only
what the parts below it define (by the symbols its object file needs), so no two
parts lean on each other."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "analyzer" / "lab" / "src"
POLICY = Path(__file__).resolve().parents[2] / "workload" / "src"
# From the bottom: the base (figures, counters, events, layout), the disks' queues,
# the SSD tier and read cache, the write-back cache, the controller's front.
ORDER = ["arraybase", "arraydisk", "arraytier", "arraycache", "arraymodel"]


def _symbols(obj: Path, undefined: bool) -> set[str]:
    args = ["nm", "-u", str(obj)] if undefined else ["nm", "--defined-only", "-g", str(obj)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_the_array_model_parts_depend_one_way(tmp_path: Path) -> None:
    if not (shutil.which("cc") and shutil.which("nm")):
        pytest.fail("cc and nm are needed to check the array model's parts")
    assert sorted(p.stem for p in SRC.glob("array?*.c") if p.stem != "array") == sorted(ORDER)
    defined: dict[str, set[str]] = {}
    needs: dict[str, set[str]] = {}
    for part in ORDER:
        obj = tmp_path / f"{part}.o"
        subprocess.run(
            ["cc", "-c", "-std=c11", f"-I{POLICY}", str(SRC / f"{part}.c"), "-o", str(obj)],
            check=True,
        )  # fmt: skip
        defined[part], needs[part] = _symbols(obj, False), _symbols(obj, True)
    for i, part in enumerate(ORDER):
        for above in ORDER[i + 1 :]:
            up = needs[part] & defined[above]
            assert not up, f"{part}.c uses {sorted(up)} of {above}.c, a part above it"
    # and the model's top uses every part (the split is not dead code)
    for part in ORDER[:-1]:
        assert needs["arraymodel"] & defined[part], part
