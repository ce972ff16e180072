"""Store URLs for the backends every store test runs on."""

from __future__ import annotations

from pathlib import Path


def store_url(kind: str, tmp_path: Path) -> str:
    return f"duckdb://{tmp_path}/store.duckdb" if kind == "duckdb" else f"chdb://{tmp_path}/ch"
