// karmada-quota dashboard: the quota page's usage-over-time chart. No dependencies.
// Reads the quota's history JSON (the section's data-history URL), draws one SVG line chart
// per resource (used, reserved, hard dashed; each member cluster's placed usage on demand)
// with axes in the resource's unit, a legend, a one-line summary and a small table; redraws
// on every live update (the "kq:snapshot" event dashboard.js sends) and every 15 s.
// Every element is built with the DOM (no inline style or script: the page's CSP allows
// none); each line carries its data as attributes (data-points, data-last, data-steps).
(function () {
  "use strict";
  var root = document.getElementById("history");
  if (!root) return;
  var SVG = "http://www.w3.org/2000/svg";
  var api = root.getAttribute("data-history");
  var charts = document.getElementById("history-charts");
  var sourceEl = document.getElementById("history-source");
  var noteEl = document.getElementById("history-note");
  var toggle = document.getElementById("history-clusters");
  var state = { range: root.getAttribute("data-range") || "1h", clusters: false };
  var W = 520, H = 250, M = { l: 50, r: 22, t: 26, b: 30 };
  var CLUSTER_COLORS = 8;

  function el(ns, name, attrs, parent, text) {
    var e = ns ? document.createElementNS(ns, name) : document.createElement(name);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function svg(name, attrs, parent, text) { return el(SVG, name, attrs, parent, text); }
  function html(name, attrs, parent, text) { return el(null, name, attrs, parent, text); }

  function fmt(v) {
    if (v === 0) return "0";
    var a = Math.abs(v);
    if (a >= 1000) return Math.round(v).toLocaleString("en-US");
    if (a >= 100) return v.toFixed(0);
    return String(+v.toPrecision(3));
  }
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function clock(t, seconds) {
    var d = new Date(t * 1000);
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + (seconds ? ":" + pad(d.getSeconds()) : "");
  }

  // A round step (1, 2 or 5 × 10ⁿ) giving about `count` ticks over `span`.
  function niceStep(span, count) {
    var raw = span / count, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  }
  var TIME_STEPS = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600];
  function timeStep(span) {
    for (var i = 0; i < TIME_STEPS.length; i++) if (span / TIME_STEPS[i] <= 7) return TIME_STEPS[i];
    return 43200;
  }

  // Values that follow one another, repeats folded: the steps a line shows.
  function steps(points) {
    var out = [];
    points.forEach(function (p) { if (!out.length || out[out.length - 1] !== p[1]) out.push(p[1]); });
    return out;
  }

  // The lines of one resource: [{key, label, cls, points}].
  function linesOf(r) {
    var lines = [
      { key: "hard", label: "hard (limit)", cls: "hard", points: r.hard },
      { key: "used", label: "used", cls: "used", points: r.used },
      { key: "reserved", label: "reserved", cls: "reserved", points: r.reserved }
    ];
    (r.clusters || []).forEach(function (c, i) {
      lines.push({ key: "cluster:" + c.cluster, label: c.cluster, cls: "cluster c" + (i % CLUSTER_COLORS), points: c.used, cluster: c.cluster });
    });
    return lines;
  }

  // The time axis: the range, or from just before the first sample when the history is
  // younger than the range (a controller that just started), at least 10 s.
  function domain(chart) {
    var first = Infinity;
    chart.resources.forEach(function (r) {
      linesOf(r).forEach(function (l) { if (l.points.length && l.points[0][0] < first) first = l.points[0][0]; });
    });
    var span = Math.max(10, chart.to - first);
    var from = Math.max(chart.from, Math.floor(chart.to - span * 1.05));
    return { from: from, to: chart.to, first: first, cropped: from > chart.from };
  }

  function draw(figure, r, chart, range) {
    var lines = linesOf(r), dom = domain(chart), from = dom.from, to = dom.to;
    var span = dom.cropped ? "since " + clock(dom.first, to - from < 600) : "in the last " + range;
    var max = 0;
    lines.forEach(function (l) { l.points.forEach(function (p) { if (p[1] > max) max = p[1]; }); });
    var yStep = niceStep(max > 0 ? max * 1.05 : 1, 5);
    var yMax = Math.max(yStep, Math.ceil((max * 1.05) / yStep) * yStep);
    var pw = W - M.l - M.r, ph = H - M.t - M.b;
    function x(t) { return M.l + ((t - from) / Math.max(1, to - from)) * pw; }
    function y(v) { return M.t + ph - (v / yMax) * ph; }

    var used = r.used.length ? r.used[r.used.length - 1][1] : null;
    var hard = r.hard.length ? r.hard[r.hard.length - 1][1] : null;
    var reserved = r.reserved.length ? r.reserved[r.reserved.length - 1][1] : null;
    var peak = r.used.reduce(function (m, p) { return Math.max(m, p[1]); }, 0);
    var summary = used === null ? "no samples " + span
      : "now " + fmt(used) + (hard !== null ? " of " + fmt(hard) : "") + " " + r.unit + " used"
        + (reserved ? ", " + fmt(reserved) + " reserved" : "")
        + " · peak " + fmt(peak) + " " + span;

    var head = html("figcaption", {}, figure);
    html("code", { "class": "res-title" }, head, r.resource);
    html("span", { "class": "summary" }, head, summary);

    var id = "hc-" + r.resource.replace(/[^a-zA-Z0-9]/g, "-");
    var s = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-labelledby": id + "-t", "class": "hchart-svg" }, figure);
    svg("title", { id: id + "-t" }, s, r.resource + " (" + r.unit + "): " + summary);

    // Grid and y axis, in the resource's unit.
    var axis = svg("g", { "class": "axis" }, s);
    for (var v = 0; v <= yMax + yStep / 2; v += yStep) {
      svg("line", { x1: M.l, x2: W - M.r, y1: y(v), y2: y(v), "class": v === 0 ? "base" : "grid" }, axis);
      svg("text", { x: M.l - 6, y: y(v) + 4, "text-anchor": "end" }, axis, fmt(v));
    }
    svg("text", { x: M.l - 6, y: 12, "text-anchor": "end", "class": "unit" }, axis, r.unit);
    var ts = timeStep(to - from);
    for (var t = Math.ceil(from / ts) * ts; t <= to; t += ts) {
      svg("line", { x1: x(t), x2: x(t), y1: M.t + ph, y2: M.t + ph + 4, "class": "tick" }, axis);
      var near = x(t) > W - M.r - 24;
      svg("text", { x: near ? W - 2 : x(t), y: H - 8, "text-anchor": near ? "end" : "middle" }, axis, clock(t, ts < 60));
    }

    // Lines, drawn as steps (a value holds until the next sample); the last value runs on
    // to the end of the range when it is recent.
    var plot = svg("g", { "class": "lines" }, s);
    var order = lines.slice(3).concat([lines[2], lines[1], lines[0]]);
    order.forEach(function (l) {
      var pts = l.points;
      if (!pts.length) return;
      var d = "M" + x(pts[0][0]).toFixed(1) + " " + y(pts[0][1]).toFixed(1);
      for (var i = 1; i < pts.length; i++) {
        d += "H" + x(pts[i][0]).toFixed(1) + "V" + y(pts[i][1]).toFixed(1);
      }
      var last = pts[pts.length - 1];
      if (to - last[0] <= Math.max(60, 3 * chart.step)) d += "H" + x(to).toFixed(1);
      svg("path", {
        d: d, "class": "line " + l.cls, "data-line": l.key,
        "data-points": pts.length, "data-last": last[1], "data-steps": steps(pts).join(",")
      }, plot);
      if (pts.length === 1) svg("circle", { cx: x(last[0]), cy: y(last[1]), r: 2.5, "class": "dot-" + l.cls.split(" ")[0] }, plot);
    });

    // Legend and the same numbers as a table.
    var legend = html("ul", { "class": "legend" }, figure);
    lines.forEach(function (l) {
      if (!l.points.length) return;
      var li = html("li", {}, legend);
      html("span", { "class": "sw " + l.cls }, li);
      li.appendChild(document.createTextNode(l.label));
    });
    var details = html("details", { "class": "history-table" }, figure);
    html("summary", {}, details, "Table");
    var table = html("table", {}, details);
    var hr = html("tr", {}, html("thead", {}, table));
    ["line", "now", "lowest", "peak", "points"].forEach(function (h) { html("th", {}, hr, h); });
    var body = html("tbody", {}, table);
    lines.forEach(function (l) {
      if (!l.points.length) return;
      var vals = l.points.map(function (p) { return p[1]; });
      var tr = html("tr", { "data-line": l.key }, body);
      html("th", {}, tr, l.label);
      html("td", {}, tr, fmt(vals[vals.length - 1]) + " " + r.unit);
      html("td", {}, tr, fmt(Math.min.apply(null, vals)));
      html("td", {}, tr, fmt(Math.max.apply(null, vals)));
      html("td", {}, tr, String(vals.length));
    });
  }

  function render(h) {
    sourceEl.textContent = "Source: " + h.sourceText + ".";
    root.setAttribute("data-source", h.source);
    if (h.note) { noteEl.textContent = h.note; noteEl.hidden = false; } else { noteEl.hidden = true; noteEl.textContent = ""; }
    while (charts.firstChild) charts.removeChild(charts.firstChild);
    if (!h.chart.resources.length) {
      html("p", { "class": "empty" }, charts, "No history of this quota yet.");
    }
    h.chart.resources.forEach(function (r) {
      var fig = html("figure", { "class": "hchart", "data-resource": r.resource, "data-unit": r.unit }, charts);
      draw(fig, r, h.chart, h.range);
    });
    root.setAttribute("data-loaded", h.range + (h.clusters ? "+clusters" : ""));
    window.kqHistoryLoads = (window.kqHistoryLoads || 0) + 1;
  }

  var seq = 0, busy = false, again = false;
  function load() {
    if (busy) { again = true; return; }
    busy = true;
    var mine = ++seq;
    var url = api + "?range=" + encodeURIComponent(state.range) + "&clusters=" + state.clusters;
    fetch(url, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
      .then(function (resp) {
        return resp.json().then(function (body) { return { ok: resp.ok, status: resp.status, body: body }; });
      })
      .then(function (a) {
        if (mine !== seq) return;
        if (!a.ok) { sourceEl.textContent = "History unavailable (HTTP " + a.status + "): " + (a.body.error || ""); return; }
        render(a.body);
      })
      .catch(function (e) { sourceEl.textContent = "History unavailable: " + e; })
      .then(function () {
        busy = false;
        if (again) { again = false; load(); }
      });
  }

  root.querySelectorAll("button.range").forEach(function (b) {
    b.addEventListener("click", function () {
      state.range = b.getAttribute("data-range");
      root.querySelectorAll("button.range").forEach(function (o) {
        o.setAttribute("aria-pressed", o === b ? "true" : "false");
      });
      load();
    });
  });
  if (toggle) toggle.addEventListener("change", function () { state.clusters = toggle.checked; load(); });
  document.addEventListener("kq:snapshot", load);
  setInterval(load, 15000);
  load();
})();
