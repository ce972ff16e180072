// The trend page of a device model: each op / stream's percentiles over firmware versions,
// with their confidence bands and the change points GET /history found.
"use strict";
async function trendPage(model, q) {
  const fq = filterQuery(q);
  for (const k of ["tag", "order"]) if (q.get(k)) fq.set(k, q.get(k));
  fq.set("model", model);
  const hist = await api(`/history?${fq}`);
  app.appendChild(h("h1", `Firmware trend: <b>${esc(hist.model)}</b> <span class=muted>${hist.versions.length} versions (from ${esc(hist.version_from)}, by ${esc(hist.order)}); ${(hist.confidence * 100).toFixed(0)} % intervals</span>`));
  app.appendChild(filterForm(q, (n) => { location.hash = `#/trend/${encodeURIComponent(model)}?${n}`; }));
  app.appendChild(h("p", esc(hist.method.change_points), "muted"));
  const index = new Map(hist.versions.map((v, i) => [v.version, i]));
  const names = hist.versions.map((v) => v.version);
  const grid = h("div", null, "grid");
  app.appendChild(grid);
  const levels = (q.get("levels") || "p50,p99").split(",");
  for (const g of hist.groups) {
    const series = levels.map((lv) => ({
      name: lv,
      points: g.points.map((p) => [index.get(p.version), p[lv].value]),
      band: g.points.map((p) => [index.get(p.version), p[lv].ci_low, p[lv].ci_high]),
    }));
    const marks = [];
    for (const lv of levels) {
      for (const cp of g.change_points[lv] || []) {
        // Between the last version before the change and the first after it.
        marks.push({x: index.get(cp.version) - 0.5, label: `${lv} ${cp.change_pct >= 0 ? "+" : ""}${cp.change_pct.toFixed(0)} % at ${cp.version}`});
      }
    }
    const c = card(grid, `${g.op_name} / ${g.stream_name}`);
    Charts.line(c, series, {xticks: names.map((_, i) => i), xfmt: (x) => names[x] ?? "", yfmt: Charts.fmtNs, xlabel: "version", ymin: 0, marks})
      .setAttribute("data-chart", `trend-${g.op_name}-${g.stream_name}`);
    const t = h("table");
    t.innerHTML = "<tr><th class=l>version</th><th>runs</th><th>IOPS</th><th>change points</th></tr>" +
      g.points.map((p) => {
        const cps = Object.entries(g.change_points).flatMap(([m, l]) => l.filter((x) => x.version === p.version).map((x) => `${m} ${x.change_pct >= 0 ? "+" : ""}${x.change_pct.toFixed(1)} %`));
        return `<tr><td>${esc(p.version)}</td><td>${p.runs.length}</td><td>${p.iops.value.toFixed(1)}</td><td class="l ${cps.length ? "fail" : ""}">${esc(cps.join(", "))}</td></tr>`;
      }).join("");
    c.appendChild(t);
  }
  app.setAttribute("data-ready", "trend");
}
