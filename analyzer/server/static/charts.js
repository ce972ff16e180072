// Small SVG and canvas charts for the dashboard: no library, nothing from a CDN.
// Every drawn series is a <path class="series" data-n="points"> and every heat map a
// <canvas data-cells="n">, so a test can see that charts hold data.
"use strict";
const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                  "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
  const el = (name, attrs, parent) => {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  };
  function fmtNs(v) {
    if (v >= 1e9) return (v / 1e9).toPrecision(3) + " s";
    if (v >= 1e6) return (v / 1e6).toPrecision(3) + " ms";
    if (v >= 1e3) return (v / 1e3).toPrecision(3) + " µs";
    return Math.round(v) + " ns";
  }
  function fmt(v) {
    if (Math.abs(v) >= 1e6) return (v / 1e6).toPrecision(3) + "M";
    if (Math.abs(v) >= 1e3) return (v / 1e3).toPrecision(3) + "k";
    return +v.toPrecision(3) + "";
  }
  function ticks(lo, hi, log) {
    if (log) {
      const out = [];
      for (let p = Math.floor(Math.log10(lo)); p <= Math.ceil(Math.log10(hi)); p++) {
        const t = Math.pow(10, p);
        if (t >= lo && t <= hi) out.push(t);
      }
      return out.length ? out : [lo, hi];
    }
    const span = hi - lo || 1, step0 = Math.pow(10, Math.floor(Math.log10(span / 5)));
    const step = [1, 2, 5, 10].map((m) => m * step0).find((s) => span / s <= 6);
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9; t += step) out.push(t);
    return out;
  }
  // series: [{name, points: [[x, y], ...], band: [[x, lo, hi], ...]}]; opts: {xlog, ylog,
  // xfmt, yfmt, xlabel, ylabel, step, xticks: [x, ...], marks: [{x, label}]}. A band is
  // drawn as <path class="band" data-n>, a mark as <line class="mark" data-label>.
  function line(container, series, opts) {
    opts = opts || {};
    const W = opts.width || 460, H = opts.height || 240, m = {l: 52, r: 28, t: 8, b: 34};
    const pts = series.flatMap((s) => s.points.filter((p) => p[1] != null && (!opts.xlog || p[0] > 0)))
      .concat(series.flatMap((s) => (s.band || []).flatMap((b) => [[b[0], b[1]], [b[0], b[2]]])));
    const svg = el("svg", {width: "100%", height: H, viewBox: `0 0 ${W} ${H}`, class: "chart"});
    container.appendChild(svg);
    if (!pts.length) {
      el("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, svg).textContent = "no data";
      return svg;
    }
    let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
    let y0 = opts.ymin != null ? opts.ymin : Math.min(0, ...pts.map((p) => p[1]));
    let y1 = opts.ymax != null ? opts.ymax : Math.max(...pts.map((p) => p[1]));
    if (x0 === x1) { x0 = opts.xlog ? x0 / 2 : x0 - 1; x1 = opts.xlog ? x1 * 2 : x1 + 1; }
    if (y0 === y1) y1 = y0 + 1;
    const sx = (x) => m.l + (W - m.l - m.r) * (opts.xlog ? Math.log(x / x0) / Math.log(x1 / x0) : (x - x0) / (x1 - x0));
    const sy = (y) => H - m.b - (H - m.t - m.b) * (y - y0) / (y1 - y0);
    const g = el("g", {class: "grid"}, svg), ax = el("g", {class: "axis"}, svg);
    for (const t of opts.xticks || ticks(x0, x1, opts.xlog)) {
      el("line", {x1: sx(t), x2: sx(t), y1: m.t, y2: H - m.b}, g);
      el("text", {x: sx(t), y: H - m.b + 14, "text-anchor": "middle"}, ax).textContent = (opts.xfmt || fmt)(t);
    }
    for (const t of ticks(y0, y1, false)) {
      el("line", {x1: m.l, x2: W - m.r, y1: sy(t), y2: sy(t)}, g);
      el("text", {x: m.l - 4, y: sy(t) + 4, "text-anchor": "end"}, ax).textContent = (opts.yfmt || fmt)(t);
    }
    el("line", {x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b}, ax);
    el("line", {x1: m.l, x2: m.l, y1: m.t, y2: H - m.b}, ax);
    if (opts.xlabel) el("text", {x: (W + m.l) / 2, y: H - 4, "text-anchor": "middle"}, ax).textContent = opts.xlabel;
    series.forEach((s, i) => {
      const b = (s.band || []).filter((q) => q[1] != null && q[2] != null);
      if (!b.length) return;
      const d = b.map((q, j) => `${j ? "L" : "M"}${sx(q[0]).toFixed(1)},${sy(q[2]).toFixed(1)}`).join("") +
        b.slice().reverse().map((q) => `L${sx(q[0]).toFixed(1)},${sy(q[1]).toFixed(1)}`).join("") + "Z";
      el("path", {d, fill: s.color || COLORS[i % COLORS.length], "fill-opacity": 0.15, stroke: "none",
                  class: "band", "data-n": b.length}, svg);
    });
    (opts.marks || []).forEach((mk, k) => {
      const X = sx(mk.x).toFixed(1);
      el("line", {x1: X, x2: X, y1: m.t, y2: H - m.b, stroke: "#b3261e", "stroke-dasharray": "4 3",
                  class: "mark", "data-label": mk.label}, svg);
      el("text", {x: +X + 3, y: m.t + 10 + 12 * k, fill: "#b3261e"}, svg).textContent = mk.label;
    });
    series.forEach((s, i) => {
      const p = s.points.filter((q) => q[1] != null && (!opts.xlog || q[0] > 0));
      if (!p.length) return;
      let d = "";
      p.forEach((q, j) => {
        const X = sx(q[0]).toFixed(1), Y = sy(q[1]).toFixed(1);
        if (j === 0) d += `M${X},${Y}`;
        else d += opts.step ? `H${X}V${Y}` : `L${X},${Y}`;
      });
      const path = el("path", {d, fill: "none", stroke: s.color || COLORS[i % COLORS.length],
                               "stroke-width": 1.6, class: "series", "data-n": p.length}, svg);
      el("title", {}, path).textContent = s.name;
    });
    const legend = document.createElement("div");
    legend.className = "legend";
    series.forEach((s, i) => {
      const span = document.createElement("span");
      span.innerHTML = `<i style="background:${s.color || COLORS[i % COLORS.length]}"></i>`;
      span.appendChild(document.createTextNode(s.name));
      legend.appendChild(span);
    });
    container.appendChild(legend);
    return svg;
  }
  // One device's heat map: cells [[ti, oi, ios, bytes]] on a time_bins x offset_bins grid.
  function heat(container, d) {
    const W = 460, H = 220, m = {l: 52, b: 28};
    const c = document.createElement("canvas");
    c.width = W; c.height = H;
    container.appendChild(c);
    const ctx = c.getContext("2d");
    const cw = (W - m.l) / d.time_bins, ch = (H - m.b) / d.offset_bins;
    const max = Math.max(1, ...d.cells.map((x) => x[2]));
    for (const [ti, oi, n] of d.cells) {
      const a = Math.log1p(n) / Math.log1p(max);
      ctx.fillStyle = `hsl(${240 - 240 * a}, 85%, ${92 - 45 * a}%)`;
      ctx.fillRect(m.l + ti * cw, H - m.b - (oi + 1) * ch, Math.ceil(cw), Math.ceil(ch));
    }
    ctx.fillStyle = "#444"; ctx.font = "11px sans-serif";
    ctx.fillText(`${d.t0_s.toFixed(2)} s`, m.l, H - 10);
    const tEnd = d.t0_s + d.t_step_s * d.time_bins;
    ctx.textAlign = "right"; ctx.fillText(`${tEnd.toFixed(2)} s`, W - 2, H - 10);
    ctx.fillText(fmtBytes(d.offset0), m.l - 4, H - m.b);
    ctx.fillText(fmtBytes(d.offset0 + d.offset_step * d.offset_bins), m.l - 4, 10);
    c.setAttribute("data-cells", d.cells.length);
    return c;
  }
  function fmtBytes(b) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (+b.toPrecision(3)) + " " + u[i];
  }
  return {line, heat, fmtNs, fmt, fmtBytes, COLORS};
})();
