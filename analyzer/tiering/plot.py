"""A tiering result as one self-contained HTML page of SVG charts (no library, no CDN)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd")


def _chart(
    title: str, series: list[tuple[str, list[tuple[float, float | None]]]], xlabel: str,
    ylabel: str, xlog: bool = False,
) -> str:  # fmt: skip
    w, h, ml, mr, mt, mb = 520, 260, 56, 16, 24, 36
    pts = [(x, y) for _, s in series for x, y in s if y is not None and (not xlog or x > 0)]
    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" class="chart">'
    head += f'<text x="{w / 2}" y="16" text-anchor="middle" font-weight="bold">'
    head += f"{html.escape(title)}</text>"
    if not pts:
        return head + f'<text x="{w / 2}" y="{h / 2}" text-anchor="middle">no data</text></svg>'
    import math

    fx = (lambda x: math.log10(x)) if xlog else (lambda x: x)
    x0, x1 = min(fx(x) for x, _ in pts), max(fx(x) for x, _ in pts)
    y0, y1 = min(0.0, min(y for _, y in pts)), max(y for _, y in pts)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)

    def sx(x: float) -> float:
        return ml + (w - ml - mr) * (fx(x) - x0) / (x1 - x0)

    def sy(y: float) -> float:
        return h - mb - (h - mt - mb) * (y - y0) / (y1 - y0)

    parts = [head]
    parts.append(f'<line x1="{ml}" y1="{h - mb}" x2="{w - mr}" y2="{h - mb}" stroke="#999"/>')
    parts.append(f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{h - mb}" stroke="#999"/>')
    for v in (y0, (y0 + y1) / 2, y1):
        parts.append(f'<text x="{ml - 4}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    for v in (x0, (x0 + x1) / 2, x1):
        label = 10**v if xlog else v
        parts.append(
            f'<text x="{ml + (w - ml - mr) * (v - x0) / (x1 - x0):.1f}" y="{h - mb + 14}" '
            f'text-anchor="middle">{_fmt(label)}</text>'
        )
    parts.append(
        f'<text x="{(w + ml) / 2}" y="{h - 4}" text-anchor="middle">{html.escape(xlabel)}</text>'
    )
    parts.append(f'<text x="12" y="{mt + 8}" font-size="11">{html.escape(ylabel)}</text>')
    for i, (name, s) in enumerate(series):
        good = [(x, y) for x, y in s if y is not None and (not xlog or x > 0)]
        if not good:
            continue
        d = " ".join(
            f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for j, (x, y) in enumerate(good)
        )
        c = COLORS[i % len(COLORS)]
        parts.append(
            f'<path class="series" data-n="{len(good)}" d="{d}" fill="none" stroke="{c}" '
            f'stroke-width="1.6"><title>{html.escape(name)}</title></path>'
        )
        parts.append(
            f'<text x="{w - mr - 4}" y="{mt + 14 * (i + 1)}" text-anchor="end" fill="{c}">'
            f"{html.escape(name)}</text>"
        )
    return "".join(parts) + "</svg>"  # fmt: skip


def _fmt(v: float) -> str:
    for unit, div in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if abs(v) >= div and div > 1 and v > 1e4:
            return f"{v / div:.3g}{unit}"
    return f"{v:.3g}"


def charts(result: Mapping[str, Any]) -> list[str]:
    tl = result["timeline"]
    t = tl["t_s"]
    out = [
        _chart(
            "Fast-tier hit ratio over time",
            [
                ("by count", list(zip(t, tl["hit_ratio_count"], strict=True))),
                ("by bytes", list(zip(t, tl["hit_ratio_bytes"], strict=True))),
                ("reads (count)", list(zip(t, tl["hit_ratio_count_read"], strict=True))),
                ("writes (count)", list(zip(t, tl["hit_ratio_count_write"], strict=True))),
            ],
            "seconds",
            "hit ratio",
        ),
        _chart(
            "Migrated bytes as a share of host I/O",
            [("migrated / host", list(zip(t, tl["migrated_share"], strict=True)))],
            "seconds",
            "share",
        ),
    ]
    sk = result["skew"]["curve"]
    out.append(
        _chart(
            "Skew: share of I/O against share of capacity",
            [
                ("I/O count", [(c["capacity_share"], c["io_share"]) for c in sk]),
                ("bytes", [(c["capacity_share"], c["bytes_share"]) for c in sk]),
            ],
            "share of touched capacity",
            "share of I/O",
        )
    )
    if "sweep" in result:
        pts = result["sweep"]["points"]
        out.append(
            _chart(
                "Hit ratio against fast-tier size",
                [
                    ("by count", [(p["capacity_bytes"], p["hit_ratio_count"]) for p in pts]),
                    ("by bytes", [(p["capacity_bytes"], p["hit_ratio_bytes"]) for p in pts]),
                ],
                "fast tier (bytes)",
                "hit ratio",
                xlog=True,
            )
        )
    return out


def render_html(result: Mapping[str, Any]) -> str:
    """The whole page: title, parameters, the charts and the result as JSON."""
    p = result["params"]
    name = result.get("run", {}).get("name", "trace")
    title = f"iotape tiering: {name}, policy {p['policy']}"
    body = "".join(f"<div>{c}</div>" for c in charts(result))
    data = html.escape(json.dumps(result, default=str))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>body{{font:14px system-ui,sans-serif;"
        "margin:1em}} .grid{{display:flex;flex-wrap:wrap;gap:1em}} svg text{{font-size:11px;"
        "fill:#333}}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>unit {p['unit']} B, fast tier {p['capacity']} B; "
        f"hit ratio {_pct(result['hit_ratio']['count']['all'])} by count, "
        f"{_pct(result['hit_ratio']['bytes']['all'])} by bytes</p>"
        f"<div class='grid'>{body}</div><details><summary>JSON</summary><pre>{data}</pre>"
        "</details></body></html>"
    )


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"
