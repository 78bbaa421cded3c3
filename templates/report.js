// Sorting and filtering of the ops table. Reads only the DOM; no data is injected into this script.
(function () {
  "use strict";
  var table = document.getElementById("ops-table");
  if (!table) return;
  var tbody = table.tBodies[0];
  var rows = Array.prototype.slice.call(tbody.rows);
  var heads = table.tHead.rows[0].cells;

  function cellKey(row, index, numeric) {
    var cell = row.cells[index];
    if (!numeric) return cell.textContent.trim().toLowerCase();
    var v = cell.getAttribute("data-v");
    return v === null || v === "" ? null : parseFloat(v);
  }

  Array.prototype.forEach.call(heads, function (th, index) {
    var kind = th.getAttribute("data-sort");
    if (!kind) return;
    th.title = "Click to sort";
    th.addEventListener("click", function () {
      var descending = th.getAttribute("aria-sort") !== "descending";
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      var numeric = kind === "num";
      rows.sort(function (a, b) {
        var x = cellKey(a, index, numeric), y = cellKey(b, index, numeric);
        if (x === y) return 0;
        if (x === null) return 1;  // unknown values always last
        if (y === null) return -1;
        return (x < y ? -1 : 1) * (descending ? -1 : 1);
      });
      rows.forEach(function (r) { tbody.appendChild(r); });
    });
  });

  var query = document.getElementById("ops-filter");
  var bound = document.getElementById("ops-bound");
  var stepOnly = document.getElementById("ops-step-only");
  var count = document.getElementById("ops-count");
  function apply() {
    var q = (query.value || "").toLowerCase();
    var b = bound.value;
    var shown = 0;
    rows.forEach(function (r) {
      var ok = (!q || r.getAttribute("data-search").indexOf(q) >= 0) &&
               (!b || r.getAttribute("data-bound") === b) &&
               (!stepOnly.checked || r.getAttribute("data-instep") === "1");
      r.hidden = !ok;
      if (ok) shown += 1;
    });
    count.textContent = shown + " of " + rows.length + " ops shown";
  }
  // The other columns on request (CSS :has() does it too; this covers browsers without it).
  var all = document.getElementById("ops-all");
  if (all) all.addEventListener("change", function () { table.classList.toggle("all-cols", all.checked); });
  query.addEventListener("input", apply);
  bound.addEventListener("change", apply);
  stepOnly.addEventListener("change", apply);
  apply();
})();

// Click-to-zoom on the scopes icicle: a click spreads the cell's span over the width (its ancestors span it
// whole, cells outside are hidden); a click on the top row zooms back out. Spans are the cells' data-x0/x1.
(function () {
  "use strict";
  var chart = document.getElementById("scopes-icicle");
  if (!chart) return;
  var width = chart.viewBox.baseVal.width;
  var cells = Array.prototype.slice.call(chart.querySelectorAll("svg.sc"));
  function num(c, name) { return parseFloat(c.getAttribute(name)); }
  function zoom(target) {
    var a = num(target, "data-x0"), b = num(target, "data-x1"), d = num(target, "data-depth");
    cells.forEach(function (c) {
      var x0 = num(c, "data-x0"), x1 = num(c, "data-x1"), depth = num(c, "data-depth");
      var above = depth < d && x0 <= a + 1e-9 && x1 >= b - 1e-9;
      var n0 = above ? 0 : Math.max((x0 - a) / (b - a), 0), n1 = above ? 1 : Math.min((x1 - a) / (b - a), 1);
      var shown = n1 > n0 && (depth >= d || above);
      c.style.display = shown ? "" : "none";
      if (shown) { c.setAttribute("x", (n0 * width).toFixed(2)); c.setAttribute("width", Math.max((n1 - n0) * width, 0.5).toFixed(2)); }
    });
  }
  cells.forEach(function (c) { c.style.cursor = "pointer"; c.addEventListener("click", function () { zoom(c); }); });
})();
