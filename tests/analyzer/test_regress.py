"""Regression tracking (issue 17) on synthetic runs: `iotape compare` as a CI gate, its
JUnit output, CLI = API = library, pairing by workload, and `iotape history`'s change
points over firmware versions. Real DuckDB, the real CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from regress_helpers import firmware_store, records, write

from analyzer.analyses import comparison, history, workloads
from analyzer.analyses.filters import FilterArgs
from analyzer.server.app import create_app
from analyzer.server.config import Settings
from analyzer.store.ingest import ingest, source_sha256
from analyzer.store.opener import open_store

ROOT = Path(__file__).resolve().parents[2]
IOTAPE = str(ROOT / ".venv" / "bin" / "iotape")


@pytest.fixture(scope="module")
def store_url(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("regress")
    url = f"duckdb://{tmp}/r.duckdb"
    s = open_store(url)
    try:
        orig = write(tmp / "base.iot", records(1), "A1")
        ingest(s, orig, name="base")
        ingest(s, write(tmp / "again.iot", records(2), "A1"), name="again")
        ingest(s, write(tmp / "slowwrites.iot", records(3, write_factor=1.3), "B2"),
               name="slowwrites")  # fmt: skip
        sha = source_sha256(orig)
        # Traces recorded while replaying `base`: unscaled, and at twice the rate.
        for name, scale, seed in (("replay1x", 1.0, 4), ("replay2x", 0.5, 5)):
            meta = {"replay_of": {"trace": str(orig), "trace_sha256": sha, "time_scale": scale,
                                  "scaling": None}}  # fmt: skip
            ingest(s, write(tmp / f"{name}.iot", records(seed), "A1", meta), name=name)
    finally:
        s.close()
    return url


def cli(*args: str, url: str) -> subprocess.CompletedProcess:
    return subprocess.run([IOTAPE, *args, "--db", url], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def gated(result: dict) -> list[tuple[str, str, str]]:
    return [(x["op"], x["stream"], x["level"]) for x in comparison.regressions(result)]


def test_a_run_against_itself_and_a_rerun_is_no_regression(store_url: str) -> None:
    for cand in ("base", "again", "replay1x"):
        r = cli("compare", "base", cand, "--metric", "p50,p99,mean,iops", url=store_url)
        assert r.returncode == 0, (cand, r.stdout[-3000:], r.stderr)
        assert "REGRESSION" not in r.stdout


def test_writes_30_percent_slower_are_flagged_on_writes_only(store_url: str) -> None:
    r = cli("compare", "base", "slowwrites", "--metric", "p50,mean", "--json", url=store_url)
    assert r.returncode == 1, r.stderr
    res = json.loads(r.stdout)
    flagged = gated(res)
    assert flagged and {op for op, _, _ in flagged} == {"write"}
    # Every write group (2 models x 4 streams) regressed at the median, about +30 %.
    rows = [(g["model"], row) for g in res["candidates"][0]["groups"] for row in g["rows"]]
    writes = [row for _, row in rows if row["op_name"] == "write"]
    assert len(writes) == 8 and all(row["regression"] for row in writes)
    for row in writes:
        p50 = next(m for m in row["metrics"] if m["level"] == "p50")
        assert 15 < p50["delta_pct"] < 45 and p50["ci_low"] > 0
    # The table names op, stream, percentile and the interval of what regressed.
    t = cli("compare", "base", "slowwrites", "--metric", "p50", url=store_url)
    assert t.returncode == 1
    assert "regressions:" in t.stdout and "write/log-write p50" in t.stdout
    assert "95 % CI [+" in t.stdout
    # Each regression line starts with the candidate run's name.
    listed = t.stdout.split("regressions:")[1].strip().splitlines()
    assert listed and all(line.strip().startswith("slowwrites: ") for line in listed), listed


def test_threshold_keeps_a_small_change_from_failing(store_url: str) -> None:
    r = cli("compare", "base", "slowwrites", "--metric", "p50", "--threshold", "60%",
            url=store_url)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("base", "nope"), "run 'nope': no such run"),
        (("base", "again", "--threshold", "five"), "threshold 'five'"),
        (("base", "again", "--metric", "p42"), "metric 'p42'"),
        (("base", "again", "--min-effect", "50"), "min effect '50'"),
        (("base", "again", "--stream", "nosuch"), "stream 'nosuch'"),
        (("base", "again", "--format", "xml"), "--format"),
    ],
)
def test_bad_input_exits_2_with_one_line(store_url: str, args, words: str) -> None:
    r = cli("compare", *args, url=store_url)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_different_workloads_are_not_judged(store_url: str) -> None:
    r = cli("compare", "base", "replay2x", "--json", url=store_url)
    assert r.returncode == 2
    res = json.loads(r.stdout)
    c = res["candidates"][0]
    assert not c["comparable"] and "replayed differently" in c["workload"]
    assert not c["regression"] and not gated(res)
    t = cli("compare", "base", "replay2x", url=store_url)
    assert t.returncode == 2 and "NOT COMPARABLE" in t.stdout and "time x0.5" in t.stdout


def test_pairing_rules() -> None:
    cap = {"id": "a" * 12, "name": "t", "kind": "capture", "tags": {}, "header": {}}
    other = {**cap, "id": "b" * 12, "name": "u"}
    rep = {"id": "c" * 12, "name": "r", "kind": "replay", "parent_id": "a" * 12, "tags": {},
           "parameters": {"plan": {"time_scale": 1.0, "scaling": None}}}  # fmt: skip
    scaled = {**rep, "id": "d" * 12, "parameters": {"plan": {"time_scale": 1.0,
              "scaling": {"mailboxes": 2000}}}}  # fmt: skip
    assert workloads.pairing(cap, rep)[0] and workloads.pairing(cap, other)[0]
    assert not workloads.pairing(other, rep)[0]  # a replay of another trace
    assert not workloads.pairing(rep, scaled)[0]
    tagged = [{**cap, "tags": {"workload": w}} for w in ("oltp", "backup")]
    assert not workloads.pairing(*tagged)[0]


# ------------------------------------------------------------------ minimum effect


@pytest.fixture(scope="module")
def fast_url(tmp_path_factory) -> str:
    """A device of microseconds (p50 6 µs): one 3 µs (+50 %) slower, and one 6.7 times
    slower (+34 µs at the median)."""
    tmp = tmp_path_factory.mktemp("fast")
    url = f"duckdb://{tmp}/f.duckdb"
    s = open_store(url)
    try:
        for name, seed, factor in (("fast", 21, 0.03), ("tiny", 22, 0.045), ("big", 23, 0.2)):
            ingest(s, write(tmp / f"{name}.iot", records(seed, factor, n=8000), "A1"), name=name)
    finally:
        s.close()
    return url


def judged(res: dict, level: str) -> list[dict]:
    return [m for g in res["candidates"][0]["groups"] for r in g["rows"] for m in r["metrics"]
            if m["level"] == level]  # fmt: skip


def test_a_few_microseconds_are_no_regression_unless_the_minimum_is_0(fast_url: str) -> None:
    gate = ("--metric", "p50,mean")
    r = cli("compare", "fast", "tiny", *gate, "--json", url=fast_url)
    assert r.returncode == 0, r.stdout[-3000:]
    res = json.loads(r.stdout)
    assert res["min_effect_ns"] == comparison.MIN_EFFECT_NS == 10_000
    p50s = judged(res, "p50")
    assert p50s and all(30 < m["delta_pct"] < 70 and 1_000 < m["delta"] < 5_000 for m in p50s)
    # Beyond the noise and the threshold, within the minimum effect: that decided.
    assert all(m["ci_low"] > 0 and m["decided_by"] == "min_effect" for m in p50s)
    assert all(m["min_change"] == 10_000 and not m["regression"] for m in p50s)
    t = cli("compare", "fast", "tiny", *gate, url=fast_url)
    assert t.returncode == 0 and "within min effect (10.0 µs)" in t.stdout, t.stdout
    assert "by over 10.0 µs (1.0 IO/s for IOPS)" in t.stdout
    zero = cli("compare", "fast", "tiny", *gate, "--min-effect", "0", "--json", url=fast_url)
    assert zero.returncode == 1
    p50s = judged(json.loads(zero.stdout), "p50")
    assert all(m["regression"] and m["decided_by"] in ("noise", "threshold") for m in p50s)
    z = cli("compare", "fast", "tiny", "--metric", "p50", "--min-effect", "0", url=fast_url)
    assert "regressions:" in z.stdout and "; over noise (" in z.stdout, z.stdout


def test_a_large_change_is_a_regression_either_way(fast_url: str) -> None:
    for extra in ((), ("--min-effect", "0"), ("--min-effect", "20us,10iops")):
        r = cli("compare", "fast", "big", "--metric", "p50", *extra, "--json", url=fast_url)
        assert r.returncode == 1, extra
        p50s = judged(json.loads(r.stdout), "p50")
        assert p50s and all(m["regression"] and m["delta"] > 25_000 for m in p50s)
    # With the defaults the minimum effect was the highest bar it beat; a threshold
    # over its +570 % decides the other way, and says so.
    t = cli("compare", "fast", "big", "--metric", "p50", url=fast_url)
    assert "over min effect (10.0 µs)" in t.stdout.split("regressions:")[1]
    hi = cli("compare", "fast", "big", "--metric", "p50", "--threshold", "900%", "--json",
             url=fast_url)  # fmt: skip
    assert hi.returncode == 0
    assert {m["decided_by"] for m in judged(json.loads(hi.stdout), "p50")} == {"threshold"}


def test_junit_says_which_rule_decided(fast_url: str) -> None:
    r = cli("compare", "fast", "tiny", "big", "--metric", "p50", "--format", "junit",
            url=fast_url)  # fmt: skip
    assert r.returncode == 1
    suites = {s.get("name"): s for s in check_junit(r.stdout)}
    tiny, big = suites["tiny vs fast"], suites["big vs fast"]
    assert tiny.get("failures") == "0" and big.get("failures") == big.get("tests")
    for case in tiny:
        assert case.find("system-out").text == "no regression: within min effect (10.0 µs)"
    for case in big:
        assert case.find("failure").get("message").endswith("; over min effect (10.0 µs)")
        assert case.find("system-out").text.startswith("regression: over min effect")


def test_parse_min_effect() -> None:
    default = comparison.MIN_EFFECT_IOPS
    assert comparison.parse_min_effect("50us") == (50_000, default)
    assert comparison.parse_min_effect("0.05ms, 5iops") == (50_000, 5)
    assert comparison.parse_min_effect("2 IO/s,1s") == (1e9, 2)
    assert comparison.parse_min_effect("0") == (0, 0)
    assert comparison.parse_min_effect(comparison.DEFAULT_MIN_EFFECT) == (10_000, default)
    for bad in ("50", "five", "-3us", "10 parsecs", "1e99us", "us"):
        with pytest.raises(comparison.BadInput, match="min effect"):
            comparison.parse_min_effect(bad)


# ------------------------------------------------------------------ JUnit

# The structure stated by the JUnit XML schema CI systems read (Ant's junit task as
# Jenkins' junit-10 schema describes it): element -> (required attributes, allowed
# children). Counts on testsuites/testsuite must add up.
JUNIT = {
    "testsuites": ({"tests", "failures", "errors"}, {"testsuite"}),
    "testsuite": ({"name", "tests", "failures", "errors"},
                  {"properties", "testcase", "system-out", "system-err"}),
    "testcase": ({"name", "classname"}, {"skipped", "error", "failure", "system-out",
                                         "system-err"}),
    "failure": ({"type"}, set()),
    "system-out": (set(), set()),
}  # fmt: skip
NONNEG_INT = ("tests", "failures", "errors", "skipped")


def check_junit(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == "testsuites"

    def walk(e: ET.Element) -> None:
        required, children = JUNIT[e.tag]
        assert required <= set(e.attrib), (e.tag, e.attrib)
        for a in NONNEG_INT:
            if a in e.attrib:
                assert e.attrib[a].isdigit(), (e.tag, a)
        for c in e:
            assert c.tag in children, (e.tag, c.tag)
            walk(c)

    walk(root)
    for s in root:
        cases = s.findall("testcase")
        assert int(s.get("tests")) == len(cases)
        assert int(s.get("failures")) == sum(1 for c in cases if c.find("failure") is not None)
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in root)
    assert int(root.get("failures")) == sum(int(s.get("failures")) for s in root)
    return root


def test_junit_output_is_valid_and_names_the_regressions(store_url: str) -> None:
    r = cli("compare", "base", "again", "slowwrites", "--metric", "p50,mean", "--format",
            "junit", url=store_url)  # fmt: skip
    assert r.returncode == 1
    root = check_junit(r.stdout)
    suites = {s.get("name"): s for s in root}
    assert set(suites) == {"again vs base", "slowwrites vs base"}
    assert suites["again vs base"].get("failures") == "0"
    failed = [c for c in suites["slowwrites vs base"] if c.find("failure") is not None]
    assert failed and all(".write." in c.get("classname") for c in failed)
    assert "CI of the change" in failed[0].find("failure").get("message")
    v = cli("analyze", "verdict", "base", "--format", "junit", url=store_url)
    assert v.returncode == 0
    assert check_junit(v.stdout)[0].get("tests") == "4"


# ------------------------------------------------------------------ one implementation


def test_cli_api_and_library_agree(store_url: str) -> None:
    from analyzer.store.opener import opened

    with opened(store_url, create=False) as s:
        lib = comparison.compare_many(s, "base", ["again", "slowwrites"], FilterArgs(op="write"),
                                      5.0, 0.95, ("p99", "mean", "iops"))  # fmt: skip
        lib_hist = history.history(s, "ST4000NM")
    lib = json.loads(json.dumps(lib))
    with TestClient(create_app(Settings(db=store_url))) as c:
        q = {"base": "base", "candidate": ["again", "slowwrites"], "op": "write"}
        api = c.get("/compare", params={**q, "metric": "p99,mean,iops"}).json()
        api_one = c.get("/compare", params={"base": "base", "candidate": "again"}).json()
        api_lat = c.get("/runs/base/latency", params={"stream": "db-read"}).json()
        api_vd = c.get("/runs/base/verdict", params={"mode": "stress"}).json()
        api_hist = c.get("/history", params={"model": "ST4000NM"}).json()
    r = cli("compare", "base", "again", "slowwrites", "--op", "write", "--metric",
            "p99,mean,iops", "--json", url=store_url)  # fmt: skip
    assert r.returncode == 1
    assert json.loads(r.stdout) == api == lib
    # The single-candidate form answers as it always did: one comparison.
    assert api_one["candidate"]["name"] == "again" and "groups" in api_one
    lat = cli("analyze", "latency", "base", "--stream", "db-read", "--json", url=store_url)
    assert json.loads(lat.stdout) == api_lat
    vd = cli("analyze", "verdict", "base", "--mode", "stress", "--json", url=store_url)
    assert json.loads(vd.stdout) == api_vd
    h = cli("history", "--model", "ST4000NM", "--json", url=store_url)
    assert json.loads(h.stdout) == api_hist == json.loads(json.dumps(lib_hist))


# ------------------------------------------------------------------ history


@pytest.fixture(scope="module")
def firmware_url(tmp_path_factory) -> str:
    return firmware_store(tmp_path_factory.mktemp("fw"))


def test_history_finds_the_step_at_version_4_and_nothing_else(firmware_url: str) -> None:
    r = cli("history", "--model", "Samsung PM9A3", "--tag", "firmware", "--json",
            url=firmware_url)  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert [v["version"] for v in res["versions"]] == [f"{v}.0" for v in range(1, 7)]
    assert res["groups"]
    for g in res["groups"]:
        assert len(g["points"]) == 6 and all(len(p["runs"]) == 2 for p in g["points"])
        for m in ("p50", "mean"):
            cps = g["change_points"][m]
            assert [c["version"] for c in cps] == ["4.0"], (g["op_name"], g["stream_name"], m)
            assert cps[0]["previous_version"] == "3.0" and 35 < cps[0]["change_pct"] < 65
        # The request counts did not change: no change point in IOPS.
        assert g["change_points"]["iops"] == []
        p3, p4 = g["points"][2]["p50"], g["points"][3]["p50"]
        assert p3["ci_low"] <= p3["value"] <= p3["ci_high"] < p4["ci_low"]
    # The devices' own firmware names the versions when no tag is given.
    fw = cli("history", "--model", "Samsung PM9A3", "--json", url=firmware_url)
    cps = json.loads(fw.stdout)["groups"][0]["change_points"]["p50"]
    assert [c["version"] for c in cps] == ["FW4.0"]
    bad = cli("history", "--model", "Nope", url=firmware_url)
    assert bad.returncode == 2 and "model 'Nope'" in bad.stderr


def test_e_divisive_on_a_flat_series_finds_nothing() -> None:
    from analyzer.analyses import changepoint

    rng = np.random.default_rng(7)
    assert changepoint.e_divisive(rng.normal(100, 3, 24), allowed=range(0, 24, 4)) == []
    # Two steps, both found, each naming the first value after it.
    x = np.r_[rng.normal(100, 1, 8), rng.normal(140, 1, 8), rng.normal(90, 1, 8)]
    assert [c["index"] for c in changepoint.e_divisive(x, allowed=range(0, 24, 4))] == [8, 16]
    # Student's t: t = 2.0 with 10 degrees of freedom has two-sided p = 0.0734.
    assert changepoint.betainc(5, 0.5, 10 / 14) == pytest.approx(0.07339, abs=1e-4)


def test_history_api_takes_names_and_rejects_a_device_filter(firmware_url: str) -> None:
    with TestClient(create_app(Settings(db=firmware_url))) as c:
        r = c.get("/history", params={"model": "Samsung PM9A3", "device": "sda"})
        assert r.status_code == 422 and "device" in r.json()["detail"]
        assert c.get("/history", params={"model": "x"}).status_code == 422
        # Op and stream are names here (each run resolves them): the answer echoes them.
        q = {"model": "Samsung PM9A3", "op": "read", "stream": "db-read", "tag": "firmware"}
        r = c.get("/history", params=q)
        assert r.status_code == 200, r.text
        assert r.json()["filter"] == {"op": "read", "stream": "db-read"}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
