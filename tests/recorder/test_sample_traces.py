"""The sample traces in traces/: documented, recognised by `auto`, readable."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_helpers import TRACES

from base.errors import IotapeError
from recorder.importers.core import detect
from recorder.tracefile import check, open_trace

# Every importable sample and the format `auto` must name for it.
FORMAT_OF = {
    "blktrace-nvme/sample.blktrace.0": "blktrace",
    "disksim-websearch/wsrch-small.trace": "disksim",
}
RECORDED = "workload/reference-20mbx-5s.iot"


def _samples() -> list[str]:
    return sorted(
        str(p.relative_to(TRACES))
        for p in TRACES.rglob("*")
        if p.is_file() and p.name != "README.md" and not p.name.startswith("LICENSE")
    )


def test_every_sample_is_known_and_documented() -> None:
    assert _samples() == sorted([*FORMAT_OF, RECORDED])
    readme = (TRACES / "README.md").read_text()
    for name in _samples():
        assert f"`{name}`" in readme, name
    for folder in {Path(n).parent for n in FORMAT_OF}:
        assert any((TRACES / folder).glob("LICENSE*")), folder


@pytest.mark.parametrize(("name", "fmt"), sorted(FORMAT_OF.items()))
def test_auto_names_the_format_of_each_sample(name: str, fmt: str) -> None:
    assert detect(TRACES / name) == fmt


def test_auto_says_a_recorded_trace_needs_no_import() -> None:
    with pytest.raises(IotapeError, match="already an iotape trace"):
        detect(TRACES / RECORDED)


def test_recorded_workload_trace_reads_back_whole() -> None:
    path = TRACES / RECORDED
    rep = check.check(path)
    assert rep.problem is None, rep.problem_reason
    with open_trace(path) as t:
        recs = t.read_all()
        streams = t.header["streams"]
        assert t.header["recorder"]["backend"] == "bpf"
        assert t.footer["events"] == len(recs) > 0
    labelled = {streams[str(s)] for s in set(recs["stream"].tolist())}
    assert {"db-read", "db-write", "log-write"} <= labelled
