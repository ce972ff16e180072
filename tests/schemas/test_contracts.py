"""Each contract is defined once, in schemas/: no other source spells out a list of
stream names, a format id, a Jetstress threshold or check, or a percentile table.

The tree is read as it is (Python through its syntax tree, C and JSON as text);
schemas/ itself, the headers generated from it and the tests are allowed.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import schemas
from schemas import formats, jetstress, percentiles

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ("schemas/", "tests/", "recorder/iotape_record.h", "workload/src/contract.h")
# Stream names together that are no group of them: the recorder's `--label db=...`
# shorthand (a read and a write stream), a demo's choice of what to print.
NOT_GROUPS = {"recorder/capture/labels.py": 2, "scripts/demo_devices.py": 1}

STREAMS = {k for k, v in schemas.enum("stream").items() if v > 0}
FORMAT_IDS = {f.id for f in vars(formats).values() if isinstance(f, formats.Format)}
THRESHOLD_KEYS = set(jetstress.thresholds("performance"))
CHECK_NAMES = {*jetstress.check_names(), jetstress.TARGET_CHECK}
PERCENTILE_NAMES = {n for _, n in percentiles.LEVELS} | {n for _, n in percentiles.IDENT_LEVELS}


def _files(*suffixes: str) -> Iterator[tuple[str, str]]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for rel in sorted(set(out)):
        if rel.endswith(suffixes) and not rel.startswith(ALLOWED) and (ROOT / rel).is_file():
            yield rel, (ROOT / rel).read_text(errors="replace")


def _constant(node: ast.AST | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _python_findings(rel: str, text: str) -> Iterator[str]:
    for node in ast.walk(ast.parse(text, rel)):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in FORMAT_IDS:
                yield f"{where}: format id {node.value!r}"
            if node.value in CHECK_NAMES:
                yield f"{where}: Jetstress check name {node.value!r}"
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            consts = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(STREAMS.intersection(consts)) >= 2:
                yield f"{where}: a list of stream names {sorted(STREAMS.intersection(consts))}"
            # A level table ((0.5, "p50"), ...), or the names of most levels in a row
            # (a few picked for a narrow table are a choice, not the table).
            pairs = [e for e in node.elts if isinstance(e, ast.Tuple) and len(e.elts) == 2]
            named = [p for p in pairs if _constant(p.elts[1]) in PERCENTILE_NAMES]
            if len(named) >= 2 or len(PERCENTILE_NAMES.intersection(consts)) >= 4:
                yield f"{where}: a table of percentile names"
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if _constant(k) in THRESHOLD_KEYS and isinstance(_constant(v), int | float):
                    yield f"{where}: Jetstress threshold {_constant(k)} = {_constant(v)}"


_C_STRING_LIST = re.compile(r'"([a-z-]+)"(?:\s*,\s*"([a-z-]+)")+')


def _c_findings(rel: str, text: str) -> Iterator[str]:
    for i, line in enumerate(text.splitlines(), 1):
        names = set(re.findall(r'"([a-z0-9.-]+)"', line))
        if len(STREAMS & names) >= 2 and _C_STRING_LIST.search(line):
            yield f"{rel}:{i}: a list of stream names"
        for fid in FORMAT_IDS:
            if f'"{fid}"' in line or f'\\"{fid}\\"' in line:
                yield f"{rel}:{i}: format id {fid!r}"


def _json_findings(rel: str, text: str) -> Iterator[str]:
    def walk(doc: object) -> Iterator[str]:
        if isinstance(doc, dict):
            if THRESHOLD_KEYS & set(doc):
                yield f"{rel}: Jetstress threshold values"
            for v in doc.values():
                yield from walk(v)
        elif isinstance(doc, list):
            for v in doc:
                yield from walk(v)

    try:
        yield from walk(json.loads(text))
    except ValueError:
        return


def test_each_contract_is_defined_once() -> None:
    found: list[str] = []
    for rel, text in _files(".py"):
        hits = list(_python_findings(rel, text))
        streams = [h for h in hits if "stream names" in h]
        if len(streams) == NOT_GROUPS.get(rel):
            hits = [h for h in hits if h not in streams]
        found += hits
    for rel, text in _files(".c", ".h"):
        found += _c_findings(rel, text)
    for rel, text in _files(".json"):
        found += _json_findings(rel, text)
    assert not found, "defined outside schemas/:\n" + "\n".join(found)


def test_the_checker_sees_a_second_definition() -> None:
    py = 'X = ("db-read", "log-write")\nF = "iotape-replay-plan"\nT = {"db_read_avg_ms": 20}\n'
    py += 'L = ((0.5, "p50"), (0.99, "p99"))\n'
    assert len(list(_python_findings("x.py", py))) == 4
    c = 'static const char *n[] = {"db-read", "db-write"};\n'
    c += 'puts("{\\"format\\":\\"iotape-trace\\"");\n'
    assert len(list(_c_findings("x.c", c))) == 2
    assert list(_json_findings("x.json", '{"t": {"log_write_max_ms": 100}}'))


def test_the_workload_writes_the_header_the_readers_read() -> None:
    from schemas import workload_header as wh
    from workload import engine

    meta = engine.WorkloadConfig(db_paths=["/d"], log_paths=["/l"]).metadata()
    assert list(meta) == list(wh.WorkloadMetadata.__annotations__)
    for key in (wh.MAILBOXES, wh.DATABASES, wh.COPIES, wh.SEQUENCE, wh.WORKLOAD):
        assert key in meta
    assert meta["workload"] == wh.ENGINE_NAME


def test_one_set_of_workload_defaults() -> None:
    """`iotape workload run`, WorkloadConfig and the engine: the table's defaults."""
    import typer

    from iotape.commands.workload import app
    from schemas.workload_options import options
    from workload import engine

    cfg = engine.WorkloadConfig(db_paths=["/d"], log_paths=["/l"])
    params = {p.name: p for p in typer.main.get_command(app).commands["run"].params}
    for name in ("mailboxes", "copies", "duration", "threads", "databases", "page-kb", "seed"):
        field = name.replace("-", "_")
        want = options()[name].default
        assert getattr(cfg, field) == want, name
        if field in ("copies", "page_kb"):
            # A preset may set these (profiles.RUN_DEFAULTS): not given is None,
            # and a Jetstress preset then gets the table's default.
            assert params[field].default is None, name
            continue
        assert float(params[field].default) == want, name
    from iotape.commands import workload as cli

    given = {"page_kb": None, "copies": None, "no_bdm": None, "recreate": False,
             "destroy_data_on": None, "set_": None, "profile": "exchange2013"}  # fmt: skip
    run = cli._config(["/d"], ["/l"], **given)
    assert (run.copies, run.page_kb) == (options()["copies"].default, options()["page-kb"].default)
    assert (cfg.copies, cfg.duration, cfg.threads) == (2, 30, 3)
