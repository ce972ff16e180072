"""tests/c_calls.py, which test_layout.py's C circle check stands on: a constructed
pair of C files that call each other through a shared header is a circle, named in
one line with the call that makes each edge; statics, prototypes, comments,
strings and keywords make none."""

from __future__ import annotations

from pathlib import Path

from c_calls import calls_between, circles, describe, scan

HEADER = "int a_work(int x);\\nint b_report(void);\\n"

A = """#include "pair.h"
/* b_report(): named in a comment, not a call */
static int helper(int x) { return x + 1; }
int a_work(int x) {
    const char *s = "b_report(";
    if (x > 0)
        return helper(x) + (int)sizeof(s);
    return b_report();
}
"""

B = """#include "pair.h"
#define CALLS_A(x) a_work(x)
static int b_local(void);
int b_report(void) {
    return b_local();
}
static int b_local(void) {
    return a_work(2);
}
"""


def _pair(tmp_path: Path, a: str, b: str) -> list[Path]:
    (tmp_path / "pair.h").write_text(HEADER)
    (tmp_path / "a.c").write_text(a)
    (tmp_path / "b.c").write_text(b)
    return [tmp_path / "a.c", tmp_path / "b.c"]


def test_two_files_calling_each_other_are_a_circle_named_in_one_line(tmp_path: Path) -> None:
    graph = calls_between(_pair(tmp_path, A, B))
    assert circles(graph) == [("a.c", "b.c")]
    line = describe("pair", ("a.c", "b.c"), graph)
    assert "\\n" not in line
    assert line == (
        "C circle in pair: a.c <-> b.c: a.c -> b.c (b_report, a.c:8); b.c -> a.c (a_work, b.c:8)"
    )


def test_a_call_one_way_is_no_circle(tmp_path: Path) -> None:
    one_way = A.replace("return b_report();", "return 0;")
    graph = calls_between(_pair(tmp_path, one_way, B))
    assert graph == {"a.c": {}, "b.c": {"a.c": graph["b.c"]["a.c"]}}
    assert circles(graph) == []


def test_what_a_file_defines_and_calls() -> None:
    public, static, calls = scan(B)
    # The macro's body and the prototype are not calls or definitions.
    assert public == {"b_report"} and static == {"b_local"}
    assert [name for name, _ in calls] == ["b_local", "a_work"]
    public, static, calls = scan(A)
    assert public == {"a_work"} and static == {"helper"}
    assert [name for name, _ in calls] == ["helper", "b_report"]
