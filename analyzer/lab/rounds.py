"""`iotape lab hybrid --rounds N`: the spread over rounds. Each round is a whole
one-round lab (its baseline, the prediction from that baseline's trace, the tier,
the read cache; report.py's report of it in OUT/round-K); this puts the rounds side by
side: per configuration the median and the range (lowest, highest) of its figures and
gains, the verdict of each round, and each prediction's gain and error per round (the
model's and the dependent replay's), with every round's value kept."""

from __future__ import annotations

import statistics
from typing import Any

from analyzer.lab import report

CONFIGS = ("baseline", "tier", "cache")
# The Jetstress figures of a configuration (report._figures), and its gains over the
# same round's baseline (report.build's `gain`).
FIGURES = (
    "db_read_mb_s",
    "db_write_mb_s",
    "db_reads_per_s",
    "db_read_latency_ms_avg",
    "db_read_latency_ms_max",
    "db_write_latency_ms_avg",
)
GAINS = ("db_read_mb_s", "db_write_mb_s", "db_reads_per_s")
# Each prediction's gain of database reads/s and its error (predicted / measured - 1),
# as report._versus names them.
PREDICTIONS = {
    "model": ("read_throughput_gain", "read_throughput_gain_error"),
    "replay": ("replayed_gain", "replayed_gain_error"),
}


def spread(values: list[float | None]) -> dict[str, Any] | None:
    """The median and range of a figure over the rounds (a round without it, None,
    left out of them but kept in `values`); None when no round has it."""
    got = [v for v in values if v is not None]
    if not got:
        return None
    return {
        "median": statistics.median(got),
        "min": min(got),
        "max": max(got),
        "range": max(got) - min(got),
        "values": values,
    }


def _predicted(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for who, (gain, error) in PREDICTIONS.items():
        p = [row.get("predicted") or {} for row in rows]
        out[who] = {
            "gain": spread([x.get(gain) for x in p]),
            "error": spread([x.get(error) for x in p]),
        }
    return out


def summarize(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The spread of each configuration over the rounds' reports (report.build's)."""
    configs: dict[str, Any] = {}
    for key in CONFIGS:
        rows = [r["configs"][key] for r in reports if key in r["configs"]]
        if len(rows) != len(reports):
            continue
        c: dict[str, Any] = {
            "figures": {f: spread([row[f] for row in rows]) for f in FIGURES},
            "jetstress_verdict": [row["jetstress_verdict"] for row in rows],
        }
        if key != "baseline":
            c["gain"] = {g: spread([row["gain"][g] for row in rows]) for g in GAINS}
            c["predicted"] = _predicted(rows)
        configs[key] = c
    return {"rounds": len(reports), "configs": configs}


def build(raw: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """From run_lab's material with rounds: the whole report (every round's
    configurations and prediction, the spread) and each round's own report."""
    common = {k: raw[k] for k in ("options", "devices", "fast_probe")}
    each = [report.build({**common, **r}) for r in raw["rounds"]]
    whole = {
        "experiment": "hybrid",
        "published": each[0]["published"],
        **common,
        "rounds": [
            {
                "round": k,
                "out": r["out"],
                "configs": rep["configs"],
                "prediction": rep["prediction"],
            }
            for k, (r, rep) in enumerate(zip(raw["rounds"], each, strict=True), start=1)
        ],
        "spread": summarize(each),
    }
    return whole, each


def _range(s: dict[str, Any] | None, fmt: str) -> str:
    if s is None:
        return "-"
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}..{fmt.format(s['max'])})"


def _each(s: dict[str, Any] | None, fmt: str) -> str:
    if s is None:
        return "-"
    return ", ".join("-" if v is None else fmt.format(v) for v in s["values"])


def render(whole: dict[str, Any]) -> str:
    """The spread for people: per configuration the median (lowest..highest) over the
    rounds, and per round the verdicts and the predictions' errors."""
    sp = whole["spread"]
    c = sp["configs"]
    keys = [k for k in CONFIGS if k in c]
    rows: list[tuple[str, list[str]]] = [
        (label, [_range(c[k]["figures"][f], fmt) for k in keys])
        for label, f, fmt in (
            ("db read MB/s", "db_read_mb_s", "{:.2f}"),
            ("db write MB/s", "db_write_mb_s", "{:.2f}"),
            ("db reads/s", "db_reads_per_s", "{:.1f}"),
            ("db read ms avg", "db_read_latency_ms_avg", "{:.2f}"),
            ("db read ms highest", "db_read_latency_ms_max", "{:.1f}"),
            ("db write ms avg", "db_write_latency_ms_avg", "{:.2f}"),
        )
    ]
    rows.append(
        ("Jetstress verdict, per round", [", ".join(c[k]["jetstress_verdict"]) for k in keys])
    )
    for label, g in (
        ("read MB/s x baseline", "db_read_mb_s"),
        ("write MB/s x baseline", "db_write_mb_s"),
        ("reads/s x baseline", "db_reads_per_s"),
    ):
        rows.append((label, [_range(c[k].get("gain", {}).get(g), "{:.2f}x") for k in keys]))
    for who in ("model", "replay"):
        p = {k: c[k].get("predicted", {}).get(who, {}) for k in keys}
        rows += [
            (f"{who}: predicted gain", [_range(p[k].get("gain"), "{:.2f}x") for k in keys]),
            (f"{who}: error", [_range(p[k].get("error"), "{:+.0%}") for k in keys]),
            (f"{who}: error, per round", [_each(p[k].get("error"), "{:+.0%}") for k in keys]),
        ]
    width = max(len(label) for label, _ in rows) + 2
    col = max(len(v) for _, vals in rows for v in vals) + 2
    lines = [
        f"{sp['rounds']} rounds: median (lowest..highest); each round's own report in "
        "OUT/round-K/report.txt",
        "".ljust(width) + "".join(k.rjust(col) for k in keys),
    ]
    lines += [label.ljust(width) + "".join(v.rjust(col) for v in vals) for label, vals in rows]
    return "\n".join(lines)
