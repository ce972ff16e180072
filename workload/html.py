"""The report as one self-contained HTML page (inline CSS, no scripts, no CDN)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from schemas import streams
from schemas.documents.workload_report import Check, Verdict, WorkloadReport

CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.2em .6em;
text-align:right}th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}
.pass{color:#080;font-weight:bold}.fail{color:#b00;font-weight:bold}.na{color:#666}"""


def _emulated(rep: WorkloadReport) -> str:
    """A warning line when the run held completions to emulated latencies."""
    emu = rep.emulated_latency_ms
    if not emu:
        return ""
    what = ", ".join(f"{escape(k)} {v:g} ms" for k, v in emu.items())
    return (
        f"<p class=fail>EMULATED device latency ({what}): the latencies and the verdict "
        "are those of the emulated device, not of the real one.</p>"
    )


def _outcome(c: Check) -> str:
    """A check's result; an information-only one (an MMB2 run) judges nothing."""
    word = "pass" if c.passed else "fail"
    if c.information:
        return f"<span class=na>{word} (information)</span>"
    return f"<span class={word}>{word}</span>"


def _benchmark(v: Verdict) -> tuple[str, str]:
    """The verdict's explanation and the thresholds' heading: MMB2 where its
    criterion (client response time) replaces Jetstress's."""
    if not v.benchmark:
        return "", "Thresholds"
    what = (
        f"<p class=na>{escape(v.benchmark)}: pass criterion {escape(v.criterion or '')}, "
        f"not measured: {escape(v.why or '')}.</p>"
    )
    return what, "Jetstress thresholds (information only, not the verdict)"


def _n(x: float | None, fmt: str = "{:,.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def _table(head: list[str], rows: list[list[str]]) -> str:
    h = "".join(f"<th>{escape(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def render(rep: WorkloadReport) -> str:
    v = rep.verdict.result
    cls = {"pass": "pass", "fail": "fail"}.get(v, "na")
    per_db = []
    for db in rep.databases:
        for s in streams.REPORTED:
            r = db.stream(s)
            if r is None:
                continue
            per_db.append(
                [
                    str(db.db),
                    s,
                    _n(r.per_s),
                    _n(r.avg_bytes, "{:,.0f}"),
                    _n(r.lat_avg_ms, "{:.3f}"),
                    _n(r.lat_max_ms, "{:.3f}"),
                ]
            )
    bg = [
        [escape(k), f"{t.count:,}", _n(t.per_s), _n(t.mb_per_s, "{:.3f}")]
        for k, t in rep.total.items()
        if t.count
    ]
    shape = [
        [
            escape(r.figure),
            _n(r.engine, "{:,.3f}"),
            _n(r.published, "{:,.3f}"),
            _n(None if r.deviation is None else r.deviation * 100, "{:+.1f} %"),
        ]
        for r in rep.shape.rows
    ]
    checks = [
        [
            escape(str(c.db if c.db is not None else "all")),
            escape(c.check),
            _n(c.value, "{:.3f}"),
            _n(c.limit, "{}"),
            _outcome(c),
        ]
        for c in rep.verdict.checks
    ]
    tgt = rep.target_tx_iops
    cfg = rep.config
    bench_line, th_head = _benchmark(rep.verdict)

    conf = ", ".join(f"{escape(str(k))}={escape(str(val))}" for k, val in cfg.items())
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>iotape workload report</title><style>{CSS}</style></head><body>
<h1>iotape workload: {escape(rep.mode)}</h1>
<p>Verdict: <span class="{cls}">{escape(v.upper())}</span>
{"(interrupted: partial results)" if rep.interrupted else ""} ·
{rep.elapsed_s:.1f} s · achieved {rep.achieved_tx_iops:,.1f} transactional IOPS
{f"of a target {tgt:,.1f}" if tgt else ""}</p>
{bench_line}
{_emulated(rep)}
<h2>Per database</h2>
{_table(["db", "stream", "I/O/s", "avg bytes", "avg ms", "max ms"], per_db)}
<h2>Background and total I/O</h2>
{_table(["stream", "I/O", "I/O/s", "MiB/s"], bg)}
<h2>I/O shape vs published ({escape(str(rep.shape.published_profile))})</h2>
{_table(["figure", "engine", "published", "deviation"], shape)}
<h2>{th_head}</h2>
{_table(["db", "check", "value", "limit", "result"], checks)}
<p class=na>{conf}</p>
</body></html>
"""


def write(rep: WorkloadReport, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(rep))
    tmp.replace(path)


def render_esrp(rep: dict) -> str:
    """The ESRP sequence: parameters, one table per phase, totals, verdict."""
    from workload import esrp

    params = _table(
        ["parameter", "value"], [[escape(k), escape(v)] for k, v in esrp.parameters(rep)]
    )
    parts = []
    for ph in rep["phases"]:
        head = ["per database", *[f"db {d['db']}" for d in ph["databases"]]]
        rows = [[escape(label), *cells] for label, cells in esrp.phase_rows(ph)]
        v = ph["verdict"]
        cls = "pass" if v["result"] == "pass" else "fail"
        tgt = ph["target_tx_iops"]
        iops = (
            f" · achieved {ph['achieved_tx_iops']:,.1f} of a target {tgt:,.1f} transactional IOPS"
            if tgt
            else ""
        )
        parts.append(
            f"<h2>{escape(ph['phase'])}</h2><p>{ph['elapsed_s']:.1f} s{iops} · "
            f"<span class={cls}>{escape(v['result'].upper())}</span> {escape(v['why'])}</p>"
            + _table(head, rows)
        )
    names = sorted({k for ph in rep["phases"] for k, t in ph["total"].items() if t["count"]})
    totals = _table(
        ["stream (I/O per second)", *[escape(ph["phase"]) for ph in rep["phases"]]],
        [
            [escape(n), *[_n(ph["total"].get(n, {}).get("per_s", 0)) for ph in rep["phases"]]]
            for n in names
        ],
    )
    v = rep["verdict"]["result"]
    cls = {"pass": "pass", "fail": "fail"}.get(v, "na")
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>iotape ESRP sequence report</title><style>{CSS}</style></head><body>
<h1>iotape workload esrp: {escape(rep["test"])}, backup, soft recovery</h1>
<p>Verdict: <span class="{cls}">{escape(v.upper())}</span>
{"(interrupted: partial results)" if rep["interrupted"] else ""}</p>
<h2>Test parameters</h2>
{params}
{"".join(parts)}
<h2>Totals</h2>
{totals}
</body></html>
"""


def write_esrp(rep: dict, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_esrp(rep))
    tmp.replace(path)
