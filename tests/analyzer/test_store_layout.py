"""Issue 16's rules for the store, held: every SQL text of the analyzer lives in the
query package, and no code outside the backends asks which dialect a store speaks."""

from __future__ import annotations

import re
from pathlib import Path

ANALYZER = Path(__file__).resolve().parents[2] / "analyzer"
QUERIES = ANALYZER / "store" / "queries"
BACKENDS = {ANALYZER / "store" / "duckdb_store.py", ANALYZER / "store" / "clickhouse_store.py"}
# A string literal that starts a statement.
SQL = re.compile(
    r"""[frb]?["'](SELECT|INSERT|DELETE|UPDATE|CREATE|DROP|ALTER|SET|BEGIN|COMMIT)\s"""
)
DIALECT_TEST = re.compile(r"dialect\s*[!=]=")


def _sources() -> list[Path]:
    return [p for p in sorted(ANALYZER.rglob("*.py")) if QUERIES not in p.parents]


def test_no_sql_outside_the_query_package() -> None:
    found = [
        f"{p.relative_to(ANALYZER)}:{n}: {line.strip()}"
        for p in _sources()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if SQL.search(line)
    ]
    assert not found, "\n".join(found)


def test_no_dialect_test_outside_the_backends() -> None:
    found = [
        f"{p.relative_to(ANALYZER)}:{n}: {line.strip()}"
        for p in _sources()
        if p not in BACKENDS
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if DIALECT_TEST.search(line)
    ]
    assert not found, "\n".join(found)


def test_openapi_documents_every_response() -> None:
    from analyzer.server.app import create_app
    from analyzer.store.opener import open_store

    store = open_store("duckdb://:memory:")
    try:
        spec = create_app(store=store).openapi()
    finally:
        store.close()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            schema = op["responses"]["200"]["content"]["application/json"]["schema"]
            assert schema not in ({}, {"type": "object"}), (method, path, schema)
            assert "$ref" in schema or "items" in schema or "anyOf" in schema, (path, schema)
