// The dashboard: the run list, a run's page, a comparison of several runs and a device
// model's firmware trend (trend.js), from the JSON API.
"use strict";
const app = document.getElementById("app");
const FILTERS = ["op", "stream", "device", "min_bytes", "max_bytes", "start", "end"];

async function api(path) {
  const headers = {};
  const token = localStorage.getItem("iotape-token");
  if (token) headers.Authorization = "Bearer " + token;
  const r = await fetch(path, {headers});
  if (r.status === 401) {
    const t = prompt("This server needs its access token (IOTAPE_TOKEN):");
    if (t) { localStorage.setItem("iotape-token", t); return api(path); }
  }
  const body = await r.json();
  if (!r.ok) throw new Error(`${r.status}: ${body.detail || r.statusText}`);
  return body;
}
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const h = (tag, html, cls) => { const e = document.createElement(tag); if (html != null) e.innerHTML = html; if (cls) e.className = cls; return e; };
const card = (parent, title) => { const c = h("div", `<h3>${esc(title)}</h3>`, "card"); parent.appendChild(c); return c; };
const groupName = (g) => `${g.op_name} / ${g.stream_name}`;

function route() {
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const q = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  app.innerHTML = "";
  const fail = (e) => app.appendChild(h("p", esc(e.message), "error"));
  if (parts[0] === "run" && parts[1]) return runPage(decodeURIComponent(parts[1]), q).catch(fail);
  if (parts[0] === "compare") return comparePage(q).catch(fail);
  if (parts[0] === "trend" && parts[1]) return trendPage(decodeURIComponent(parts[1]), q).catch(fail);
  if (parts[0] === "tiering" && parts[1]) return tieringPage(decodeURIComponent(parts[1]), q).catch(fail);
  return listPage().catch(fail);
}

function filterQuery(q) {
  const out = new URLSearchParams();
  for (const k of FILTERS) if (q.get(k)) out.set(k, q.get(k));
  return out;
}

function filterForm(q, onApply) {
  const f = h("form", null, "filters");
  for (const k of FILTERS) {
    const l = h("label", esc(k));
    const i = document.createElement("input");
    i.name = k; i.value = q.get(k) || "";
    i.placeholder = {op: "read", stream: "db-read", device: "sda", start: "s", end: "s"}[k] || "";
    l.appendChild(i); f.appendChild(l);
  }
  f.appendChild(h("button", "apply"));
  f.onsubmit = (ev) => {
    ev.preventDefault();
    const n = new URLSearchParams(q);
    for (const k of FILTERS) { const v = f.elements[k].value.trim(); if (v) n.set(k, v); else n.delete(k); }
    onApply(n);
  };
  return f;
}

async function listPage() {
  const runs = await api("/runs");
  app.appendChild(h("h1", "Runs"));
  if (!runs.length) { app.appendChild(h("p", "No runs in the store yet: <code>iotape ingest FILE</code>.", "muted")); return; }
  const models = [...new Set(runs.flatMap((r) => r.devices.map((d) => d.model)).filter(Boolean))].sort();
  if (models.length) {
    app.appendChild(h("p", "Firmware trends per device model: " + models.map((m) => `<a class="trend-link" href="#/trend/${encodeURIComponent(m)}">${esc(m)}</a>`).join(" · "), null));
  }
  const t = h("table");
  t.innerHTML = "<tr><th></th><th>name</th><th class=l>id</th><th class=l>kind</th><th class=l>host</th><th class=l>start (UTC)</th><th>duration</th><th>events</th><th class=l>devices (model / firmware)</th></tr>";
  for (const r of runs) {
    const devs = r.devices.map((d) => `${esc(d.name)}: ${esc(d.model || "?")} / ${esc(d.firmware || "?")}`).join("<br>");
    const start = new Date(r.start_ns / 1e6).toISOString().replace("T", " ").slice(0, 19);
    const tr = h("tr", `<td><input type=checkbox value="${esc(r.id)}"></td><td class=l><a href="#/run/${encodeURIComponent(r.id)}">${esc(r.name)}</a></td><td class=l><code>${esc(r.id)}</code></td><td class=l>${esc(r.kind)}</td><td class=l>${esc(r.host)}</td><td class=l>${start}</td><td>${(r.duration_ns / 1e9).toFixed(2)} s</td><td>${r.events.toLocaleString()}</td><td class=l>${devs}</td>`);
    t.appendChild(tr);
  }
  app.appendChild(t);
  const b = h("button", "compare selected (first = base)");
  b.style.marginTop = ".8em";
  b.onclick = () => {
    const ids = [...t.querySelectorAll("input:checked")].map((i) => i.value);
    if (ids.length < 2) { alert("Select two or more runs."); return; }
    location.hash = "#/compare?runs=" + ids.map(encodeURIComponent).join(",");
  };
  app.appendChild(b);
}

function cdfSeries(groups) {
  return groups.map((g) => ({name: g.name, points: g.cdf}));
}

// The API's histogram has 64 buckets per power of two; a chart reads better with 8:
// fraction of requests per eighth of an octave.
function coarse(g) {
  const bins = new Map();
  for (const [lo, hi, n] of g.histogram) {
    const k = Math.floor(Math.log2(Math.max(1, (lo + hi) / 2)) * 8);
    bins.set(k, (bins.get(k) || 0) + n);
  }
  return [...bins.entries()].sort((a, b) => a[0] - b[0]).map(([k, n]) => [Math.pow(2, (k + 0.5) / 8), n / g.count]);
}

// A repaired trace has holes: say so before any chart, with where and how much.
function gapsNote(gaps) {
  const events = gaps.reduce((n, g) => n + (g.events || 0), 0);
  const chunks = gaps.reduce((n, g) => n + (g.chunks || 0), 0);
  const div = h("div", `<p class=fail id="gaps">This trace was repaired: ${chunks.toLocaleString()} chunk${chunks === 1 ? "" : "s"} (${events.toLocaleString()} events) lost in ${gaps.length} gap${gaps.length === 1 ? "" : "s"}.</p>`);
  const t = h("table");
  const s = (ns) => (ns == null ? "–" : `${(ns / 1e9).toFixed(3)} s`);
  t.innerHTML = "<tr><th class=l>bytes</th><th class=l>chunks</th><th>from</th><th>to</th><th>events lost</th></tr>" +
    gaps.map((g) => `<tr><td class=l>${g.offset.toLocaleString()}..${(g.offset + g.length).toLocaleString()}</td><td class=l>${g.chunks ? `${g.first_chunk}..${g.first_chunk + g.chunks - 1}` : "none"}</td><td>${s(g.after_ns)}</td><td>${s(g.before_ns)}</td><td>${g.events_exact ? "" : "≥ "}${(g.events || 0).toLocaleString()}</td></tr>`).join("");
  div.appendChild(t);
  return div;
}

async function runPage(ref, q) {
  const fq = filterQuery(q);
  const qs = fq.toString() ? "?" + fq.toString() : "";
  const enc = encodeURIComponent(ref);
  const run = await api(`/runs/${enc}${qs}`);
  app.appendChild(h("h1", `Run <b>${esc(run.name)}</b> <span class=muted>${esc(run.id)} · ${esc(run.kind)} · ${run.events.toLocaleString()} events · ${run.devices.map((d) => esc(`${d.name} ${d.model} fw ${d.firmware}`)).join(", ")}</span>`));
  app.appendChild(filterForm(q, (n) => { location.hash = `#/run/${enc}?${n}`; }));
  const gaps = (run.parameters && run.parameters.gaps) || [];
  if (gaps.length) app.appendChild(gapsNote(gaps));
  app.appendChild(h("p", `<a id="tiering-link" href="#/tiering/${enc}">What would an SSD tier or cache do with this run? (tiering)</a>`));
  const sep = qs ? "&" : "?";
  const [lat, ts, hm, vd] = await Promise.all([
    api(`/runs/${enc}/latency${qs}`), api(`/runs/${enc}/timeseries${qs}`),
    api(`/runs/${enc}/heatmap${qs}${sep}time_bins=120&offset_bins=64`), api(`/runs/${enc}/verdict${qs}`),
  ]);
  // Verdict.
  app.appendChild(h("h2", `Verdict (${esc(vd.mode)}): <span id="verdict" class="${vd.result}">${vd.result.toUpperCase()}</span>`));
  const vt = h("table");
  vt.innerHTML = "<tr><th class=l>check</th><th>value</th><th>limit</th><th>requests</th><th class=l>result</th></tr>" +
    vd.checks.map((c) => `<tr><td>${esc(c.check)}</td><td>${c.value == null ? "–" : c.value.toFixed(3)}</td><td>${c.limit}</td><td>${c.requests}</td><td class="l ${c.pass == null ? "unknown" : c.pass ? "pass" : "fail"}">${c.pass == null ? "no data" : c.pass ? "pass" : "fail"}</td></tr>`).join("") +
    vd.per_device.map((d) => `<tr><td colspan=4 class=l>device ${esc(d.name)}</td><td class="l ${d.result}">${d.result}</td></tr>`).join("");
  app.appendChild(vt);
  // Latency, per op and stream.
  for (const [metric, title] of [["device", "Device time"], ["queue", "Queue time"]]) {
    const m = lat[metric];
    app.appendChild(h("h2", `${title} <span class=muted>(${m.all.count.toLocaleString()} requests; p50 ${m.all.percentiles ? Charts.fmtNs(m.all.percentiles.p50) : "–"}, p99 ${m.all.percentiles ? Charts.fmtNs(m.all.percentiles.p99) : "–"}; histogram error ≤ ${(lat.histogram_scheme.relative_error_bound * 100).toFixed(2)} %)</span>`));
    const grid = h("div", null, "grid");
    app.appendChild(grid);
    const groups = [{name: "all", ...m.all}, ...m.groups.map((g) => ({...g, name: groupName(g)}))];
    Charts.line(card(grid, `${title}: CDF per op / stream`), cdfSeries(groups), {xlog: true, xfmt: Charts.fmtNs, ymin: 0, ymax: 1, step: true, xlabel: "latency"}).setAttribute("data-chart", `cdf-${metric}`);
    const hist = groups.slice(1).map((g) => ({name: g.name, points: coarse(g)}));
    Charts.line(card(grid, `${title}: histogram per op / stream (fraction per 1/8 octave)`), hist, {xlog: true, xfmt: Charts.fmtNs, xlabel: "latency"}).setAttribute("data-chart", `hist-${metric}`);
    if (metric === "device") {
      const t = h("table");
      t.innerHTML = "<tr><th class=l>op / stream</th><th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>p99.99</th><th>max</th></tr>" +
        groups.filter((g) => g.count).map((g) => `<tr><td>${esc(g.name)}</td><td>${g.count.toLocaleString()}</td><td>${Charts.fmtNs(g.mean_ns)}</td>${["p50", "p90", "p99", "p99.9", "p99.99", "max"].map((k) => `<td>${Charts.fmtNs(g.percentiles[k])}</td>`).join("")}</tr>`).join("");
      app.appendChild(t);
    }
  }
  // Time series.
  app.appendChild(h("h2", `Over time <span class=muted>(${ts.interval_s} s intervals)</span>`));
  const tg = h("div", null, "grid");
  app.appendChild(tg);
  const P = ts.points;
  Charts.line(card(tg, "IOPS"), [{name: "IOPS", points: P.map((p) => [p.t_s, p.iops])}], {xlabel: "s"}).setAttribute("data-chart", "iops");
  Charts.line(card(tg, "MB/s"), [{name: "MB/s", points: P.map((p) => [p.t_s, p.mb_s])}], {xlabel: "s"}).setAttribute("data-chart", "mbs");
  Charts.line(card(tg, "Queue depth at the device (mean)"), [{name: "queue depth", points: P.map((p) => [p.t_s, p.queue_depth])}], {xlabel: "s"}).setAttribute("data-chart", "qd");
  Charts.line(card(tg, "Device latency"), [
    {name: "p50", points: P.map((p) => [p.t_s, p.p50_ns])}, {name: "p99", points: P.map((p) => [p.t_s, p.p99_ns])},
    {name: "mean", points: P.map((p) => [p.t_s, p.lat_mean_ns])}], {xlabel: "s", yfmt: Charts.fmtNs}).setAttribute("data-chart", "lat-time");
  // Heat maps.
  app.appendChild(h("h2", "Accesses over offset × time"));
  const hg = h("div", null, "grid");
  app.appendChild(hg);
  for (const d of hm.devices) Charts.heat(card(hg, `${d.name}: ${d.ios.toLocaleString()} requests`), d);
  app.setAttribute("data-ready", "run");
}

// Which bar decided a metric's flag (analyses/comparison.py reason()).
const RULES = {noise: "noise", threshold: "threshold", min_effect: "min effect"};
function decided(p, fmtV) {
  if (p.decided_by == null) return "–";
  const bar = p.min_change == null ? "no base" : fmtV(p.min_change, p.unit);
  return `${p.regression || p.improvement ? "over" : "within"} ${RULES[p.decided_by]} (${bar})`;
}

async function comparePage(q) {
  const ids = (q.get("runs") || "").split(",").filter(Boolean);
  if (ids.length < 2) throw new Error("a comparison needs two or more runs: #/compare?runs=BASE,CANDIDATE");
  const fq = filterQuery(q);
  const qs = fq.toString() ? "&" + fq.toString() : "";
  app.appendChild(h("h1", "Comparison"));
  app.appendChild(filterForm(q, (n) => { location.hash = `#/compare?${n}`; }));
  const lats = await Promise.all(ids.map((id) => api(`/runs/${encodeURIComponent(id)}/latency?cdf_points=400${qs}`)));
  const grid = h("div", null, "grid");
  app.appendChild(grid);
  const groupKeys = [...new Set(lats.flatMap((l) => l.device.groups.map(groupName)))];
  Charts.line(card(grid, "Device time CDF, all requests"), lats.map((l) => ({name: l.run.name, points: l.device.all.cdf})), {xlog: true, xfmt: Charts.fmtNs, ymin: 0, ymax: 1, step: true}).setAttribute("data-chart", "cmp-cdf-all");
  for (const key of groupKeys) {
    const series = lats.map((l) => ({name: l.run.name, points: (l.device.groups.find((g) => groupName(g) === key) || {cdf: []}).cdf}));
    Charts.line(card(grid, `CDF: ${key}`), series, {xlog: true, xfmt: Charts.fmtNs, ymin: 0, ymax: 1, step: true}).setAttribute("data-chart", "cmp-cdf");
  }
  // One call for every candidate: each one's comparison with the base and its verdict.
  const cmp = await api(`/compare?base=${encodeURIComponent(ids[0])}${ids.slice(1).map((c) => "&candidate=" + encodeURIComponent(c)).join("")}${qs}`);
  const cands = cmp.candidates || [cmp];
  const baseVerdict = cmp.base && cmp.base.verdict ? cmp.base.verdict : cmp.base_verdict;
  app.appendChild(h("p", `base <b>${esc(lats[0].run.name)}</b>: Jetstress <span class="${baseVerdict.result}">${baseVerdict.result.toUpperCase()}</span>`));
  for (const c of cands) {
    const word = !c.comparable ? "NOT COMPARABLE" : c.regression ? "REGRESSION" : "no regression";
    const cls = !c.comparable ? "unknown" : c.regression ? "fail" : "pass";
    app.appendChild(h("h2", `${esc(c.candidate.name)} vs ${esc(c.base.name)}: <span id="regression-${esc(c.candidate.id)}" class="${cls}">${word}</span> · Jetstress <span class="verdict ${c.verdict.result}">${c.verdict.result.toUpperCase()}</span> <span class=muted>(${(c.confidence * 100).toFixed(0)} % intervals, ${esc(c.intervals)}; flag over ${c.threshold_pct} % and over ${Charts.fmtNs(c.min_effect_ns)} (${c.min_effect_iops} IO/s for IOPS) on ${esc(c.metrics.join(", "))}; workload: ${esc(c.workload)}; paired by ${esc(c.paired_by)})</span>`));
    for (const g of c.groups) {
      app.appendChild(h("p", `model <b>${esc(g.model)}</b>: firmware ${esc(g.base_firmware.join(", "))} → ${esc(g.candidate_firmware.join(", "))}`));
      const t = h("table", null, "regression");
      const fmtV = (v, unit) => (v == null ? "–" : unit === "IO/s" ? v.toFixed(1) : Charts.fmtNs(Math.abs(v)));
      const sign = (v) => (v == null ? "" : v >= 0 ? "+" : "−");
      t.innerHTML = "<tr><th class=l>op / stream</th><th>metric</th><th>base</th><th>candidate</th><th>Δ</th><th>Δ %</th><th>interval of Δ</th><th class=l>flag</th><th class=l>decided by</th></tr>" +
        g.rows.flatMap((r) => r.metrics.map((p) => `<tr class="${p.regression ? "reg" : p.improvement ? "imp" : ""}"><td>${esc(groupName(r))}</td><td>${p.level}</td><td>${fmtV(p.base, p.unit)}</td><td>${fmtV(p.candidate, p.unit)}</td><td>${sign(p.delta)}${fmtV(p.delta, p.unit)}</td><td>${p.delta_pct == null ? "–" : p.delta_pct.toFixed(1)}</td><td>${p.ci_low == null ? "–" : `[${sign(p.ci_low)}${fmtV(p.ci_low, p.unit)}, ${sign(p.ci_high)}${fmtV(p.ci_high, p.unit)}]`}</td><td class=l>${p.regression ? "regression" : p.improvement ? "improvement" : ""}</td><td class=l>${decided(p, fmtV)}</td></tr>`)).join("");
      app.appendChild(t);
    }
  }
  app.setAttribute("data-ready", "compare");
}

window.addEventListener("hashchange", route);
route();
