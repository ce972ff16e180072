"""The architecture, checked: file and function sizes, which way imports go (floors,
forbidden pairs, no import circles), where SQL and dialect branches may live
(docs/architecture.md says why)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest
from c_calls import calls_between, circles, describe

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


# The floors, lowest first: a module imports modules of its own floor and the floors
# below, never of one above (on one floor, FORBIDDEN says which may not import which).
# A module stands on the floor of the longest prefix here that names it.
FLOORS = {
    # The ground: errors, progress and atomic writes; the one definition of records,
    # tables and contracts; block-device naming, classification and safety checks.
    "base": 0,
    "schemas": 0,
    "devices": 0,
    "recorder": 1,  # capture, the trace file, importers
    "workload": 2,  # the engine: records its runs with the recorder
    "analyzer.tiering": 3,  # the simulator, which the replayer splits and checks with
    "replayer": 4,
    # The store ingests replay job directories, so it stands above the replayer; the
    # analyses and the server read the store.
    "analyzer.store": 5,
    "analyzer.analyses": 5,
    "analyzer.server": 5,
    # The code shows one module of the simulator that is not below the store: it reads a
    # stored run's events and device for the simulator, for the server, the lab and the
    # command line only. The rest of analyzer.tiering imports nothing of the store.
    "analyzer.tiering.from_store": 5,
    "analyzer.lab": 6,  # runs experiments end to end: workload, record, ingest, tiering
    "iotape": 7,  # the command line: imports every component, none imports it
}
# Packages that only group components: their `__init__` imports nothing of the project,
# stands on no floor, and every module under them stands on its own component's floor.
GROUPS = ("analyzer",)

# Import circles between Python files that are allowed, each as its sorted modules,
# with the reason it cannot be cut. None: every circle so far was cut by moving what
# both sides need below them (docs/architecture.md).
ALLOWED_CIRCLES: list[tuple[str, ...]] = []
# Circles between the C files of one directory (a file calling a function another
# defines, tests/c_calls.py), allowed with the reason. The workload engine's database
# cache, cache.c <-> ckpt.c: a session's cache miss wakes the checkpoint writer only
# when it has work (ckpt_has_work), and the writer takes its dirty runs from the
# cache. They are one subsystem under one mutex, split in two files for size; cutting
# the call with a hook would hide it, not remove it.
ALLOWED_C_CIRCLES: dict[str, list[tuple[str, ...]]] = {"workload/src": [("cache.c", "ckpt.c")]}


def _python_files(*tops: str) -> list[Path]:
    out: list[Path] = []
    for top in tops:
        if (ROOT / top).is_dir():  # devices/ may not be there yet
            out += [p for p in (ROOT / top).rglob("*.py") if "build" not in p.parts]
    return sorted(out)


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@cache
def _files() -> dict[str, Path]:
    """Every project module (a package's `__init__` is one) and its file."""
    return {_module(p): p for p in _python_files(*PACKAGES)}


def _imported(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The modules one import statement names: `from pkg import name` names the
    submodule `pkg.name` where there is one, else `pkg` itself."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    base = node.module or ""
    if node.level:  # relative: from the module's package, one level up per extra dot
        package = module.split(".")[: None if path.name == "__init__.py" else -1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    files = _files()
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names}


@cache
def _import_lines() -> dict[str, dict[str, int]]:
    """Each module's imports of the project's own modules, with the line of the first,
    at any depth of the file (an import inside a function is a dependency all the same)."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in _files().items():
        deps: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for dep in _imported(module, path, node):
                    if dep.split(".")[0] in PACKAGES and dep != module:
                        deps[dep] = min(deps.get(dep, node.lineno), node.lineno)
        graph[module] = deps
    return graph


@cache
def _imports() -> dict[str, set[str]]:
    return {m: set(deps) for m, deps in _import_lines().items()}


@cache
def _reach(module: str) -> frozenset[str]:
    """Every project module `module` imports, directly or through others."""
    graph = _imports()
    seen: set[str] = set()
    todo = [module]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen and dep in graph:
                seen.add(dep)
                todo.append(dep)
    return frozenset(seen)


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


def _floor(module: str) -> tuple[str, int] | None:
    """The FLOORS prefix that places `module`, and its floor."""
    named = [p for p in FLOORS if _under(module, p)]
    return (p := max(named, key=len), FLOORS[p]) if named else None


def _where(module: str, dep: str) -> str:
    path = _files()[module].relative_to(ROOT)
    return f"{path}:{_import_lines()[module][dep]}"


def test_every_module_stands_on_a_floor() -> None:
    lost = sorted(m for m in _files() if m not in GROUPS and _floor(m) is None)
    assert not lost, f"modules on no floor (add their component to FLOORS): {lost}"
    grouping = {g: sorted(_imports()[g]) for g in GROUPS if _imports().get(g)}
    assert not grouping, f"a grouping package's __init__ imports the project: {grouping}"


def test_imports_never_go_up_a_floor() -> None:
    up = []
    for module, deps in sorted(_imports().items()):
        if (here := _floor(module)) is None:
            continue
        for dep in sorted(deps):
            there = _floor(dep)
            if there is not None and there[1] > here[1]:
                up.append(
                    f"{_where(module, dep)}: {module} ({here[0]}, floor {here[1]}) imports "
                    f"{dep} ({there[0]}, floor {there[1]})"
                )
    assert not up, f"{len(up)} imports go up a floor:\n" + "\n".join(up)


def _circles() -> list[tuple[str, ...]]:
    """The import circles: each strongly connected set of more than one module."""
    found: list[tuple[str, ...]] = []
    placed: set[str] = set()
    for m in sorted(_imports()):
        if m not in placed and m in _reach(m):
            circle = tuple(sorted({m} | {n for n in _reach(m) if m in _reach(n)}))
            placed |= set(circle)
            found.append(circle)
    return found


def test_no_import_circles() -> None:
    circles = _circles()
    bad = [c for c in circles if c not in ALLOWED_CIRCLES]
    text = []
    for circle in bad:
        text.append(f"circle of {len(circle)}: {', '.join(circle)}")
        text += [
            f"    {_where(m, d)}: {m} -> {d}"
            for m in circle
            for d in sorted(_imports()[m])
            if d in circle
        ]
    assert not bad, f"{len(bad)} import circles:\n" + "\n".join(text)
    stale = [c for c in ALLOWED_CIRCLES if c not in circles]
    assert not stale, f"ALLOWED_CIRCLES names circles that are gone: {stale}"


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


def _c_directories() -> list[Path]:
    """Each directory of the project's C files (a component's sources)."""
    skip = {".venv", "build", ".git", "node_modules"}
    return sorted(
        {p.parent for p in ROOT.rglob("*.c") if not skip & set(p.relative_to(ROOT).parts)}
    )


def test_no_call_circles_between_c_files() -> None:
    bad, seen = [], {}
    for d in _c_directories():
        rel = str(d.relative_to(ROOT))
        graph = calls_between(sorted(d.glob("*.c")))
        seen[rel] = circles(graph)
        allowed = ALLOWED_C_CIRCLES.get(rel, [])
        bad += [describe(rel, c, graph) for c in seen[rel] if c not in allowed]
    assert not bad, "\n".join(bad)
    stale = [(d, c) for d, cs in ALLOWED_C_CIRCLES.items() for c in cs if c not in seen.get(d, [])]
    assert not stale, f"ALLOWED_C_CIRCLES names circles that are gone: {stale}"
