"""The architecture, checked: file and function sizes, which way imports go, where SQL
and dialect branches may live (docs/architecture.md says why)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("iotape", "base", "schemas", "devices", "recorder", "workload", "replayer", "analyzer")
MAX_FILE_LINES = 500
MAX_BODY_LINES = 80

# Where SQL text may be written: the store's query module, and schemas/, whose table
# definitions derive the DDL. Dialect branches: those two and the two backends.
SQL_HOMES = ("analyzer/store/queries", "schemas/")
DIALECT_HOMES = (
    "analyzer/store/queries",
    "schemas/",
    "analyzer/store/duckdb_store.py",
    "analyzer/store/clickhouse_store.py",
)

# (importing package prefix, imported package prefix that it must never reach)
FORBIDDEN = [
    ("replayer", "analyzer.store"),
    ("replayer", "analyzer.server"),
    ("replayer", "analyzer.analyses"),
    ("recorder", "analyzer"),
    ("recorder", "replayer"),
    ("recorder", "workload"),
    ("recorder.tracefile", "recorder.capture"),
    ("recorder.tracefile", "recorder.importers"),
    ("recorder.importers", "recorder.capture"),
    ("schemas", "recorder"),
    ("schemas", "analyzer"),
    ("schemas", "replayer"),
    ("schemas", "workload"),
    ("analyzer.tiering", "analyzer.server"),
    ("analyzer.store", "analyzer.server"),
    ("workload", "analyzer"),
    ("workload", "replayer"),
    # Block devices (naming, what a path is, whether it may be written over): one
    # place, below every component that writes to or records one.
    ("devices", "recorder"),
    ("devices", "workload"),
    ("devices", "replayer"),
    ("devices", "analyzer"),
    ("devices", "iotape"),
    # The lab runs experiments end to end (devices, workload, record, ingest,
    # tiering): only the command line imports it.
    ("analyzer.lab", "analyzer.server"),
    ("analyzer.store", "analyzer.lab"),
    ("analyzer.tiering", "analyzer.lab"),
    ("analyzer.analyses", "analyzer.lab"),
    ("analyzer.server", "analyzer.lab"),
    ("replayer", "analyzer.lab"),
]


def _python_files(*tops: str) -> list[Path]:
    out: list[Path] = []
    for top in tops:
        out += [p for p in (ROOT / top).rglob("*.py") if "build" not in p.parts]
    return sorted(out)


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@cache
def _imports() -> dict[str, set[str]]:
    """Each module's imports of the project's own modules, at any depth of the file
    (an import inside a function is a dependency all the same)."""
    graph: dict[str, set[str]] = {}
    for path in _python_files(*PACKAGES):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
                deps |= {f"{node.module}.{a.name}" for a in node.names}
        graph[_module(path)] = {d for d in deps if d.split(".")[0] in PACKAGES}
    return graph


def _reach(module: str) -> set[str]:
    """Every project module `module` imports, directly or through others."""
    graph = _imports()
    seen: set[str] = set()
    todo = [module]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen and dep in graph:
                seen.add(dep)
                todo.append(dep)
    return seen


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_python_file_is_longer_than_one_sitting() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _python_files(*PACKAGES, "bench", "scripts", "tests")
        if (n := p.read_text().count("\n")) > MAX_FILE_LINES
    }
    assert not long, f"files over {MAX_FILE_LINES} lines: {long}"


def test_no_function_body_is_longer_than_80_lines() -> None:
    # The body only: a typer command's long option list is declarative.
    long = {}
    for p in _python_files(*PACKAGES, "bench", "scripts"):
        for f in ast.walk(ast.parse(p.read_text())):
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                assert f.end_lineno is not None
                n = f.end_lineno - f.body[0].lineno + 1
                if n > MAX_BODY_LINES:
                    long[f"{p.relative_to(ROOT)}:{f.name}"] = n
    assert not long, f"function bodies over {MAX_BODY_LINES} lines: {long}"


@pytest.mark.parametrize(("importer", "imported"), FORBIDDEN)
def test_dependencies_point_one_way(importer: str, imported: str) -> None:
    bad = {
        m: sorted(d for d in _reach(m) if _under(d, imported))
        for m in _imports()
        if _under(m, importer)
    }
    bad = {m: d for m, d in bad.items() if d}
    assert not bad, f"{importer} reaches {imported}: {bad}"


def _strings(tree: ast.AST) -> list[ast.Constant]:
    """String constants that are not docstrings."""
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


SQL = re.compile(
    r"\b(SELECT\s+\S|INSERT\s+INTO|DELETE\s+FROM|CREATE\s+(TABLE|DATABASE|VIEW)|DROP\s+(TABLE|VIEW)"
    r"|ALTER\s+TABLE)\b"
)


def test_sql_is_written_only_in_the_query_module() -> None:
    found = []
    for p in _python_files(*PACKAGES):
        rel = str(p.relative_to(ROOT))
        if rel.startswith(SQL_HOMES):
            continue
        found += [
            f"{rel}:{s.lineno}" for s in _strings(ast.parse(p.read_text())) if SQL.search(s.value)
        ]
    assert not found, f"SQL outside {SQL_HOMES}: {found}"


def test_dialect_branches_live_in_the_backends() -> None:
    branch = re.compile(r"\bdialect\s*(==|!=)|(==|!=)\s*\w*\.?dialect\b")
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in _python_files(*PACKAGES)
        if not str(p.relative_to(ROOT)).startswith(DIALECT_HOMES)
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if branch.search(line)
    ]
    assert not found, f"dialect branches outside the backends: {found}"
