"""The API's documents (schemas/documents/api.py) are the one definition of what the
analyses return, what the server answers and what `iotape ... --json` prints:

- what each analysis builds validates against its document with nothing dropped,
  added or converted (pydantic drops an undeclared key and makes 20 into 20.0 for a
  `float`: either would change what the server answers), and in the order declared;
- each route's response_model is that document, and /openapi.json's response schemas
  are the ones pydantic writes from it: no second copy of the shapes.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import build_store
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from analyzer.analyses import comparison
from analyzer.analyses import core as analyses
from analyzer.analyses import history as hist
from analyzer.analyses import verdict as jetstress
from analyzer.analyses.filters import FilterArgs
from analyzer.server.app import create_app
from analyzer.server.config import Settings
from analyzer.server.routes import compare, history, latency, runs, timeseries, verdict
from analyzer.server.routes import tiering as tiering_routes
from analyzer.store import catalog
from analyzer.store.ingest import ingest
from analyzer.store.interface import Store
from analyzer.store.opener import open_store
from analyzer.tiering import from_store
from analyzer.tiering.presets import params_for
from iotape.commands.runs import _public
from schemas import jetstress as jetstress_contract
from schemas.documents import api, tiering
from schemas.percentiles import NAMES
from workload import report


def _workload_report(path: Path) -> Path:
    """The workload engine's report of two databases, its own verdict in each."""
    dbs = []
    for i, log_ms in enumerate((2.0, 12.0)):  # db 1 is over the 10 ms log write limit
        streams = {
            name: {"count": 900, "bytes": 900 * 8192, "per_s": 90.0, "avg_bytes": 8192,
                   "lat_avg_ms": ms, "lat_max_ms": ms * 4, "hist_log2_ns": [900]}
            for name, ms in (("db-read", 5.0), ("db-write", 3.0), ("log-write", log_ms))
        }  # fmt: skip
        dbs.append({"db": i, "mailboxes": 50, "operations": 1500, "closed_logs": 4,
                    "cache": {"pages": 100, "hits": 1, "misses": 2, "dirty_at_end": 0},
                    "streams": streams})  # fmt: skip
    result = {
        "format": "iotape-ese-result", "version": 1, "mode": "performance",
        "interrupted": False, "elapsed_s": 10.0, "copies": 2, "log_file_bytes": 2**20,
        "threads_final": 3, "auto": [], "databases": dbs,
        "config": {"mailboxes": 100, "iops_per_mailbox": 2.0, "profile": "exchange2010"},
    }  # fmt: skip
    path.write_text(json.dumps(report.build(result).data()))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    tmp = Path(tmp_path_factory.mktemp("documents"))
    url, _ = build_store(tmp)
    s = open_store(url)
    ingest(s, _workload_report(tmp / "report.json"), name="report")
    yield s
    s.close()


def _selected(store: Store, ref: str, args: FilterArgs) -> tuple[dict, Any, dict]:
    run = analyses.find_run(store, ref)
    f = analyses.resolve_filter(store, run["id"], args)
    head = {"run": {"id": run["id"], "name": run["name"]}, "filter": analyses.describe_filter(f)}
    return run, f, head


def _documents(store: Store) -> Iterator[tuple[str, Any, Any, bool]]:
    """(what, document, what the analysis built, whether the server keeps its key order)."""
    for args in (FilterArgs(), FilterArgs(op="write", stream="log-write", start_s=0.5)):
        run, f, head = _selected(store, "base", args)
        rid = run["id"]
        yield "runs list", list[api.RunEntry], [_public(r) for r in catalog.all_runs(store)], True
        yield "run", api.RunSummary, analyses.run_summary(store, run, f), True
        for exact in (False, True):
            lat = {**head, **analyses.latency(store, rid, f, exact=exact, cdf_points=20)}
            yield "latency", api.LatencyResponse, lat, True
        ts = {**head, **analyses.timeseries(store, run, f, None)}
        yield "timeseries", api.TimeseriesResponse, ts, True
        hm = {**head, **analyses.heatmap(store, rid, f, 10, 8)}
        yield "heatmap", api.HeatmapResponse, hm, True
        for mode in ("performance", "stress"):
            v = {**head, **jetstress.verdict(store, rid, f, mode)}
            yield "verdict", api.VerdictResponse, v, True
        metrics = ("p99", "mean", "iops")
        many = comparison.compare_many(store, "base", ["cand", "slow"], args, 5.0, 0.95, metrics)
        yield "compare", api.CompareResponse, many, True
        one = {**many["candidates"][0], "filter": many["filter"],
               "base_verdict": many["base"]["verdict"]}  # fmt: skip
        yield "compare one", api.CompareResponse, one, True
        given = FilterArgs(**{**args.__dict__, "device": None})
        h = hist.history(store, "ST4000NM", None, given, "time", change_metrics=metrics)
        yield "history", api.History, h, True
    # A workload report's run: no requests, the engine's verdict per database.
    run, f, head = _selected(store, "report", FilterArgs())
    v = {**head, **jetstress.verdict(store, run["id"], f, "performance")}
    assert [d["verdict"] for d in v["per_database"]] == ["pass", "fail", "fail"]
    yield "verdict", api.VerdictResponse, v, True
    yield "run", api.RunSummary, analyses.run_summary(store, run, f), True
    p = params_for("tiering", None)
    yield "tiering", api.TieringResponse, from_store.analyze_run(store, "base", p, True), True
    lru = params_for("lru", None)
    # The runs a projection took its profiles from come after the skew, as they always did.
    t = from_store.analyze_run(store, "base", lru, False, "cand", "slow", "base")
    yield "tiering projected", api.TieringResponse, t, False


def _key_order(doc: Any, path: str = "") -> Iterator[str]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield f"{path}.{k}"
            yield from _key_order(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _key_order(v, f"{path}[{i}]")


def test_what_the_analyses_build_is_the_document(store: Store) -> None:
    seen = set()
    for what, doc, built, ordered in _documents(store):
        seen.add(what)
        checked = TypeAdapter(doc).validate_python(built)
        # Nothing dropped, added or converted: the server answers what the CLI prints.
        as_json = json.dumps(built, sort_keys=True)
        assert json.dumps(checked, sort_keys=True) == as_json, what
        if ordered:
            assert list(_key_order(checked)) == list(_key_order(built)), what
    assert len(seen) == 11


def test_the_documents_percentiles_are_the_contracts() -> None:
    assert list(typing.get_type_hints(api.Percentiles)) == [*NAMES, "max"]
    point = [k for k in typing.get_type_hints(api.HistoryPoint) if k not in ("version", "runs")]
    assert point == ["count", *comparison.METRICS]


def test_the_check_is_the_jetstress_contracts() -> None:
    assert api.Check is jetstress_contract.Check


# ------------------------------------------------------------------ the server


def _app(store: Store) -> FastAPI:
    return create_app(Settings(), store=store)


RESPONSES = {
    "/runs": list[api.RunSummary],
    "/runs/{run}": api.RunSummary,
    "/runs/{run}/latency": api.LatencyResponse,
    "/runs/{run}/timeseries": api.TimeseriesResponse,
    "/runs/{run}/heatmap": api.HeatmapResponse,
    "/runs/{run}/verdict": api.VerdictResponse,
    "/compare": api.CompareResponse,
    "/history": api.History,
    "/runs/{run}/tiering": api.TieringResponse,
}


def test_each_route_answers_its_document() -> None:
    modules = (compare, history, latency, runs, tiering_routes, timeseries, verdict)
    routes = {r.path: r for m in modules for r in m.router.routes if isinstance(r, APIRoute)}
    assert set(routes) == set(RESPONSES)
    for path, doc in RESPONSES.items():
        assert routes[path].response_model == doc, path


def test_the_openapi_schemas_are_the_documents(store: Store) -> None:
    spec = _app(store).openapi()
    components = spec["components"]["schemas"]
    documents = {**vars(api), **vars(tiering)}
    for path, doc in RESPONSES.items():
        got = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        want = TypeAdapter(doc).json_schema(
            mode="serialization", ref_template="#/components/schemas/{model}"
        )
        # The same schema, its definitions those of /openapi.json. A document answered
        # as it is is a definition itself; FastAPI titles a list or union after the route.
        top = {k: v for k, v in want.items() if k != "$defs"}
        if "$ref" in got["schema"]:
            name = got["schema"]["$ref"].rsplit("/", 1)[1]
            assert name == doc.__name__ and components[name] == top, path
        else:
            assert {**got["schema"], "title": None} == {**top, "title": None}, path
        for name, schema in want.get("$defs", {}).items():
            assert components[name] == schema, (path, name)
            assert name in documents, name  # a document, not a copy of one
    # Every response schema the spec holds is a document (the rest: errors, parameters).
    own = {"HTTPValidationError", "ValidationError"}
    assert {n for n in components if n not in own} <= set(documents)


def test_no_second_copy_of_the_shapes() -> None:
    root = Path(__file__).resolve().parents[2]
    assert not (root / "analyzer/server/models.py").exists()
    assert not (root / "analyzer/analyses/results.py").exists()
    builders = ("analyses", "server", "tiering")
    for path in (p for d in builders for p in (root / "analyzer" / d).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "BaseModel" not in text, path
        assert "class " not in text or "(TypedDict)" not in text, path
