"""Which C files of one component call which (tests/test_layout.py's circles in C).

`#include`s show no dependency between a component's .c files: they share one
header, each declaring what the others define. A call does: a .c file that calls a
function another .c file of the same directory defines (not `static`) depends on
it. A small tokenizer, not a C parser: comments, string and character literals and
preprocessor lines are blanked; a function definition is a name and its
parenthesised parameters followed by `{` at file level; a call is a name followed
by `(` inside a body. Enough for the project's own C (C11, one definition a name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_KEYWORDS = frozenset(
    {"if", "for", "while", "switch", "return", "sizeof", "_Alignof", "alignof", "_Generic",
     "do", "else", "case", "goto", "defined", "__attribute__", "__typeof__", "typeof",
     "_Static_assert", "static_assert"}
)  # fmt: skip
_NOISE = re.compile(
    r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*",
    re.DOTALL | re.MULTILINE,
)
_NAME = re.compile(r"[A-Za-z_]\w*")
_TOKEN = re.compile(r"[A-Za-z_]\w*|[{}();]|\S")


@dataclass(frozen=True)
class Call:
    caller: str  # a .c file's name
    name: str  # the function called
    line: int  # where, in the caller


def _blank(text: str) -> str:
    """Comments, literals and preprocessor lines as spaces, newlines kept."""
    return _NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def _tokens(text: str) -> list[tuple[str, int]]:
    out, line, pos = [], 1, 0
    for m in _TOKEN.finditer(_blank(text)):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        out.append((m.group(), line))
    return out


def scan(text: str) -> tuple[set[str], set[str], list[tuple[str, int]]]:
    """A C file's functions: those it defines for other files, its static ones,
    and the names it calls inside function bodies (each with its line)."""
    toks = _tokens(text)
    public: set[str] = set()
    static: set[str] = set()
    calls: list[tuple[str, int]] = []
    depth = paren = 0
    decl: list[str] = []  # the file-level tokens since the last `;` or `}`
    for i, (tok, line) in enumerate(toks):
        nxt = toks[i + 1][0] if i + 1 < len(toks) else ""
        if tok == "{":
            if depth == 0 and paren == 0:
                name = _defined(decl)
                if name:
                    (static if "static" in decl else public).add(name)
            depth += 1
            decl = []
        elif tok == "}":
            depth -= 1
            decl = []
        elif tok == "(":
            paren += 1
            decl.append(tok)
        elif tok == ")":
            paren -= 1
            decl.append(tok)
        elif tok == ";" and depth == 0 and paren == 0:
            decl = []
        else:
            if depth > 0 and nxt == "(" and _NAME.fullmatch(tok) and tok not in _KEYWORDS:
                calls.append((tok, line))
            if depth == 0:
                decl.append(tok)
    return public, static, calls


def _defined(decl: list[str]) -> str | None:
    """The function a file-level `... name(params) {` defines (None: a struct,
    an initialiser, an enum)."""
    if not decl or decl[-1] != ")" or "=" in decl:
        return None
    level = 0
    for k in range(len(decl) - 1, -1, -1):
        level += {")": 1, "(": -1}.get(decl[k], 0)
        if level == 0:
            name = decl[k - 1] if k else ""
            return name if _NAME.fullmatch(name) else None
    return None


def calls_between(files: list[Path]) -> dict[str, dict[str, list[Call]]]:
    """For each .c file (by name), the other files it calls into: the calls of
    functions they define, first line first."""
    scanned = {p.name: scan(p.read_text(errors="replace")) for p in files}
    owner = {f: p for p, (public, _, _) in scanned.items() for f in public}
    graph: dict[str, dict[str, list[Call]]] = {p: {} for p in scanned}
    for p, (_, static, calls) in scanned.items():
        for name, line in calls:
            there = owner.get(name)
            if there and there != p and name not in static:
                graph[p].setdefault(there, []).append(Call(p, name, line))
    return graph


def circles(graph: dict[str, dict[str, list[Call]]]) -> list[tuple[str, ...]]:
    """Each strongly connected set of more than one file, sorted."""

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for dep in graph.get(todo.pop(), {}):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    reached = {f: reach(f) for f in graph}
    found: list[tuple[str, ...]] = []
    placed: set[str] = set()
    for f in sorted(graph):
        if f not in placed and f in reached[f]:
            circle = tuple(sorted({f} | {g for g in reached[f] if f in reached[g]}))
            placed |= set(circle)
            found.append(circle)
    return found


def describe(directory: str, circle: tuple[str, ...], graph: dict) -> str:
    """One line: the files and, for each call edge inside the circle, its first call."""
    edges = [
        f"{a} -> {b} ({graph[a][b][0].name}, {a}:{graph[a][b][0].line})"
        for a in circle
        for b in sorted(graph[a])
        if b in circle
    ]
    return f"C circle in {directory}: {' <-> '.join(circle)}: " + "; ".join(edges)
