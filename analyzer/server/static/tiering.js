// The tiering page: #/tiering/RUN?policy=…&preset=…&capacity=…, from GET /runs/{run}/tiering.
// Uses app.js's helpers (api, h, card, esc) and charts.js.
"use strict";
const TIERING_PARAMS = ["policy", "preset", "unit", "capacity", "fast_run", "slow_run", "measured_run"];

async function tieringPage(ref, q) {
  const enc = encodeURIComponent(ref);
  const qs = new URLSearchParams();
  for (const k of TIERING_PARAMS) if (q.get(k)) qs.set(k, q.get(k));
  qs.set("sweep", "true");
  app.appendChild(h("h1", `Tiering: run <b>${esc(ref)}</b> <a class=muted href="#/run/${enc}">back to the run</a>`));
  const f = h("form", null, "filters");
  const choices = {policy: ["tiering", "lru", "s3fifo", "oracle", "belady"], preset: ["", "msa", "compellent", "fastvp", "easytier"]};
  for (const k of TIERING_PARAMS) {
    const l = h("label", esc(k));
    let i;
    if (choices[k]) {
      i = document.createElement("select");
      for (const c of choices[k]) { const o = document.createElement("option"); o.value = c; o.textContent = c || "(default)"; i.appendChild(o); }
    } else {
      i = document.createElement("input");
      i.placeholder = {unit: "4M", capacity: "10G", fast_run: "run", slow_run: "run", measured_run: "split replay"}[k];
    }
    i.name = k; i.value = q.get(k) || (k === "policy" ? "tiering" : "");
    l.appendChild(i); f.appendChild(l);
  }
  f.appendChild(h("button", "simulate"));
  f.onsubmit = (ev) => {
    ev.preventDefault();
    const n = new URLSearchParams();
    for (const k of TIERING_PARAMS) { const v = f.elements[k].value.trim(); if (v) n.set(k, v); }
    location.hash = `#/tiering/${enc}?${n}`;
  };
  app.appendChild(f);
  const r = await api(`/runs/${enc}/tiering?${qs}`);
  const p = r.params, hr = r.hit_ratio, pct = (v) => (v == null ? "–" : (100 * v).toFixed(1) + " %");
  app.appendChild(h("p", `policy <b>${esc(p.policy)}</b>${p.preset ? ", preset " + esc(p.preset) : ""}; unit ${Charts.fmtBytes(p.unit)}; fast tier ${Charts.fmtBytes(p.capacity)} (${r.capacity_units.toLocaleString()} units); simulator: ${esc(r.simulator)}` + (r.source ? `<br><span class=muted>source: ${esc(r.source)}</span>` : "")));
  const t = h("table");
  t.id = "tiering-hits";
  t.innerHTML = "<tr><th class=l>hit ratio</th><th>all</th><th>read</th><th>write</th></tr>" +
    ["count", "bytes"].map((k) => `<tr><td>by ${k}</td><td>${pct(hr[k].all)}</td><td>${pct(hr[k].read)}</td><td>${pct(hr[k].write)}</td></tr>`).join("") +
    `<tr><td>migrated / host I/O</td><td colspan=3>${pct(hr.migrated_share)} (${Charts.fmtBytes(hr.migrated_bytes)})</td></tr>` +
    `<tr><td>capacity for 80 % / 100 % of I/O</td><td colspan=3>${Charts.fmtBytes(r.skew.capacity_for_80pct_io)} / ${Charts.fmtBytes(r.skew.capacity_for_100pct_io)} of ${Charts.fmtBytes(r.skew.footprint_bytes)}</td></tr>`;
  app.appendChild(t);
  if (r.latency) {
    const L = r.latency, lt = h("table");
    lt.innerHTML = "<tr><th class=l>device latency</th><th>p50</th><th>p99</th><th>mean</th></tr>" +
      [["slow_only", "slow device"], ["projected", "projected (tiered)"], ["fast_only", "fast device"]].map(([k, n]) =>
        `<tr><td>${n}</td><td>${Charts.fmtNs(L[k].p50_ns)}</td><td>${Charts.fmtNs(L[k].p99_ns)}</td><td>${Charts.fmtNs(L[k].mean_ns)}</td></tr>`).join("") +
      (L.measured ? `<tr><td>measured (split replay)</td><td>${Charts.fmtNs(L.measured.p50_ns)}</td><td>${Charts.fmtNs(L.measured.p99_ns)}</td><td>${Charts.fmtNs(L.measured.mean_ns)}</td></tr>` +
        `<tr><td>projection error</td>${["p50", "p99", "mean"].map((k) => `<td>${L.error[k] == null ? "-" : (100 * L.error[k]).toFixed(1) + " %"}</td>`).join("")}</tr>` : "");
    app.appendChild(lt);
  }
  const g = h("div", null, "grid");
  app.appendChild(g);
  const T = r.timeline, at = (k) => T.t_s.map((x, i) => [x, T[k][i]]);
  Charts.line(card(g, "Fast-tier hit ratio over time"), [
    {name: "by count", points: at("hit_ratio_count")}, {name: "by bytes", points: at("hit_ratio_bytes")},
    {name: "reads (count)", points: at("hit_ratio_count_read")}, {name: "writes (count)", points: at("hit_ratio_count_write")}],
    {xlabel: "s", ymin: 0, ymax: 1}).setAttribute("data-chart", "tiering-hits");
  Charts.line(card(g, "Migrated bytes / host I/O"), [{name: "migrated share", points: at("migrated_share")}],
    {xlabel: "s"}).setAttribute("data-chart", "tiering-migrated");
  Charts.line(card(g, "Skew: share of I/O vs share of capacity"), [
    {name: "I/O count", points: r.skew.curve.map((c) => [c.capacity_share, c.io_share])},
    {name: "bytes", points: r.skew.curve.map((c) => [c.capacity_share, c.bytes_share])}],
    {ymin: 0, ymax: 1, xlabel: "share of touched capacity"}).setAttribute("data-chart", "tiering-skew");
  if (r.sweep) {
    Charts.line(card(g, `Hit ratio vs fast-tier size (${r.sweep.one_pass ? "one pass" : "one run per size"})`), [
      {name: "by count", points: r.sweep.points.map((x) => [x.capacity_bytes, x.hit_ratio_count])},
      {name: "by bytes", points: r.sweep.points.map((x) => [x.capacity_bytes, x.hit_ratio_bytes])}],
      {xlog: true, xfmt: Charts.fmtBytes, ymin: 0, ymax: 1, xlabel: "fast tier"}).setAttribute("data-chart", "tiering-sweep");
  }
  app.setAttribute("data-ready", "tiering");
}
