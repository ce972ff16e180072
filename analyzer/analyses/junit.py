"""Comparisons and verdicts as JUnit XML, the report format CI systems read.

The document follows the schema Jenkins, GitLab and most CI systems accept
(testsuites > testsuite > testcase, a `failure` child for a failed case): each
candidate (or run) is a testsuite; each judged metric of an op/stream, or each
Jetstress check, a testcase. tests/analyzer/test_regress.py holds the output to that
structure (required attributes, allowed children, counts that add up).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from analyzer.analyses.comparison import reason

# A testcase: classname, name, failure message (None: passed), and what it printed.
Case = tuple[str, str, str | None, str | None]


def _suite(parent: ET.Element, name: str, cases: list[Case]) -> None:
    """One testsuite; a case's output, where it has one, goes to its system-out."""
    failures = sum(1 for c in cases if c[2] is not None)
    s = ET.SubElement(
        parent, "testsuite",
        name=name, tests=str(len(cases)), failures=str(failures), errors="0", skipped="0",
        time="0", timestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S"),
    )  # fmt: skip
    for classname, case, failure, output in cases:
        tc = ET.SubElement(s, "testcase", classname=classname, name=case, time="0")
        if failure is not None:
            f = ET.SubElement(tc, "failure", message=failure, type="regression")
            f.text = failure
        if output is not None:
            ET.SubElement(tc, "system-out").text = output


def _doc(root: ET.Element) -> str:
    for attr in ("tests", "failures"):
        root.set(attr, str(sum(int(s.get(attr, "0")) for s in root)))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f} IO/s" if unit == "IO/s" else f"{v / 1e3:,.1f} µs"


def comparison(result: Mapping[str, Any]) -> str:
    """A `compare_many` result: one testsuite per candidate, a testcase per gated metric
    of each model/op/stream (a failure where it regressed); each case's system-out, and
    a failure's message, say which bar decided: the noise, the threshold or the
    minimum effect."""
    root = ET.Element("testsuites", name="iotape compare")
    for c in result["candidates"]:
        cases: list[Case] = []
        suite = f"{c['candidate']['name']} vs {c['base']['name']}"
        if not c["comparable"]:
            cases.append(("workload", "comparable", f"not comparable: {c['workload']}", None))
        for g in c["groups"]:
            for r in g["rows"]:
                cls = f"{g['model']}.{r['op_name']}.{r['stream_name']}"
                for it in r["metrics"]:
                    if it["level"] not in c["metrics"]:
                        continue
                    why = reason(it, _fmt)
                    msg = None
                    if it["regression"]:
                        msg = (
                            f"{it['level']} {_fmt(it['base'], it['unit'])} -> "
                            f"{_fmt(it['candidate'], it['unit'])} ({it['delta_pct']:+.1f} %), "
                            f"{100 * c['confidence']:.0f} % CI of the change "
                            f"[{_fmt(it['ci_low'], it['unit'])}, {_fmt(it['ci_high'], it['unit'])}]"
                            f"; {why}"
                        )
                    out = f"{'regression' if msg else 'no regression'}: {why}"
                    cases.append((cls, it["level"], msg, out))
        _suite(root, suite, cases)
    return _doc(root)


def verdict(run: dict, v: Mapping[str, Any]) -> str:
    """A Jetstress verdict: one testsuite, a testcase per check (skipped checks, with
    no labelled requests, are passes with nothing to judge: they are left out)."""
    root = ET.Element("testsuites", name="iotape verdict")
    cases: list[Case] = []
    for c in v["checks"]:
        if c["pass"] is None:
            continue
        msg = None if c["pass"] else f"{c['check']}: {c['value']:.3f} over the limit {c['limit']}"
        cases.append((f"jetstress.{v['mode']}", c["check"], msg, None))
    _suite(root, run["name"], cases)
    return _doc(root)
