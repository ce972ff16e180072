"""Every benchmark and script starts the way a user runs it: `python bench/X.py`.

Run as a script, its own folder comes first on the path, so a file there named like
a package (bench/recorder.py once was) stands in for the package, and the script
fails at its first import. The suite imports the packages from the repository and
would never notice; these tests run each file as `make bench` does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"iotape", "base", "schemas", "devices", "recorder", "workload", "replayer", "analyzer"}
FILES = sorted([*ROOT.glob("bench/*.py"), *ROOT.glob("scripts/*.py")])


def _has_main(path: Path) -> bool:
    return '__name__ == "__main__"' in path.read_text()


def test_no_file_beside_a_script_is_named_like_a_package() -> None:
    assert FILES, "no bench/ or scripts/ files found"
    clash = [str(p.relative_to(ROOT)) for p in FILES if p.stem in PACKAGES]
    assert clash == []


@pytest.mark.parametrize("path", [p for p in FILES if _has_main(p)], ids=lambda p: p.name)
def test_script_starts(path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(path), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower()


@pytest.mark.parametrize("path", [p for p in FILES if not _has_main(p)], ids=lambda p: p.name)
def test_helper_module_imports_from_its_folder(path: Path) -> None:
    code = f"import sys; sys.path.insert(0, {str(path.parent)!r}); import {path.stem}"
    r = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
