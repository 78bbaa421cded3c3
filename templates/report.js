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
