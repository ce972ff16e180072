"""The ids and versions of the JSON documents iotape writes and reads back
(contracts.toml [format], the trace file's in trace_record.toml [file])."""

from __future__ import annotations

from dataclasses import dataclass

from schemas import contracts, file_constants


@dataclass(frozen=True)
class Format:
    id: str
    version: int

    def matches(self, doc: object) -> bool:
        """`doc` says it is this format, of this version."""
        return (
            isinstance(doc, dict)
            and doc.get("format") == self.id
            and doc.get("version") == self.version
        )


def _format(key: str) -> Format:
    f = contracts()["format"][key]
    return Format(str(f["id"]), int(f["version"]))


TRACE = Format(str(file_constants()["format"]), int(file_constants()["version"]))
REPLAY_PLAN = _format("replay-plan")
REPLAY_SUMMARY = _format("replay-summary")
WORKLOAD_REPORT = _format("workload-report")
ESRP_REPORT = _format("esrp-report")
ENGINE_RESULT = _format("engine-result")
