// karmada-quota dashboard: live updates over Server-Sent Events and the filter box.
// No dependencies. Each `snapshot` event carries every quota's resource rows; they are
// written into the bars in place, then the page's structural parts (data-fragment) are
// refreshed from a fresh rendering of the same URL. The page is never reloaded.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var filter = document.getElementById("filter");

  function setText(root, sel, text) {
    var el = root.querySelector(sel);
    if (el && el.textContent !== text) el.textContent = text;
  }

  // The bars' widths come as data-width (percent): the Content-Security-Policy allows no
  // inline style attribute, so the script sets them.
  function applyWidths(root) {
    root.querySelectorAll("[data-width]").forEach(function (el) {
      el.style.width = el.getAttribute("data-width") + "%";
    });
  }
  applyWidths(document);

  function applyRows(update) {
    var byKey = {};
    update.rows.forEach(function (r) { byKey[r.key] = r; });
    document.querySelectorAll("[data-row]").forEach(function (el) {
      var r = byKey[el.getAttribute("data-row")];
      if (!r) return;
      setText(el, ".v-used", r.used);
      setText(el, ".v-reserved", r.reserved);
      setText(el, ".v-hard", r.hard);
      setText(el, ".v-free", r.free);
      setText(el, ".v-pct", r.percent);
      var used = el.querySelector(".seg.used"), reserved = el.querySelector(".seg.reserved");
      used.setAttribute("data-width", r.usedWidth);
      reserved.setAttribute("data-width", r.reservedWidth);
      used.style.width = r.usedWidth + "%";
      reserved.style.width = r.reservedWidth + "%";
      el.className = "res level-" + r.level;
    });
    var gen = document.getElementById("generated");
    if (gen) { gen.textContent = update.generated; gen.setAttribute("datetime", update.generated); }
  }

  var fetching = false, again = false;
  function refreshFragments() {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (resp) { return resp.ok ? resp.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-fragment]").forEach(function (el) {
          var fresh = doc.querySelector('[data-fragment="' + el.getAttribute("data-fragment") + '"]');
          if (fresh && fresh.innerHTML !== el.innerHTML) { el.innerHTML = fresh.innerHTML; applyWidths(el); }
        });
        applyFilter();
      })
      .catch(function () {})
      .then(function () {
        fetching = false;
        if (again) { again = false; refreshFragments(); }
      });
  }

  function applyFilter() {
    if (!filter) return;
    var terms = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    document.querySelectorAll("[data-search]").forEach(function (card) {
      var text = card.getAttribute("data-search");
      card.hidden = !terms.every(function (t) { return text.indexOf(t) >= 0; });
    });
    document.querySelectorAll("[data-group]").forEach(function (g) {
      g.hidden = g.querySelector("[data-search]:not([hidden])") === null;
    });
    try { sessionStorage.setItem("kq-filter", filter.value); } catch (e) {}
  }

  if (filter) {
    try { filter.value = sessionStorage.getItem("kq-filter") || ""; } catch (e) {}
    filter.addEventListener("input", applyFilter);
    applyFilter();
  }

  if (!window.EventSource) return;
  var source = new EventSource("/events");
  source.addEventListener("open", function () {
    if (live) { live.textContent = "live"; live.className = "live on"; }
  });
  source.addEventListener("error", function () {
    if (live) { live.textContent = "reconnecting…"; live.className = "live off"; }
  });
  source.addEventListener("snapshot", function (ev) {
    var update;
    try { update = JSON.parse(ev.data); } catch (e) { return; }
    var gen = document.getElementById("generated");
    // The first event usually repeats the snapshot the page was rendered from.
    var same = gen && gen.getAttribute("datetime") === update.generated;
    applyRows(update);
    window.kqUpdates = (window.kqUpdates || 0) + 1;
    // The quota page's chart (history.js) redraws from its own JSON.
    if (!same) document.dispatchEvent(new CustomEvent("kq:snapshot"));
    // The Report page is not live: refetching it would re-run its Prometheus queries.
    if (!same && document.body.getAttribute("data-page") !== "report") refreshFragments();
  });
})();
