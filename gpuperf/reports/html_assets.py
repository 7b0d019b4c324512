"""The report's CSS and its one small script (table sorting). Inline strings, so the page needs
no file beside it and the package needs no data files."""

CSS = """
:root {
  --ink: #0f172a; --ink2: #334155; --mute: #64748b; --line: #e2e8f0; --bg: #f4f6fa;
  --card: #ffffff; --accent: #2563eb; --ok: #15803d; --bad: #b91c1c; --warn: #b45309;
}
* { box-sizing: border-box; }
html { scroll-behavior: smooth; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
.hero { background: linear-gradient(135deg, #0f172a 0%, #1e3a8a 100%); color: #f8fafc;
  padding: 34px 0 30px; }
.wrap { max-width: 1320px; margin: 0 auto; padding: 0 28px; }
.eyebrow { text-transform: uppercase; letter-spacing: .12em; font-size: 12px; color: #93c5fd;
  font-weight: 600; }
.hero h1 { margin: 6px 0 4px; font-size: 30px; font-weight: 700; letter-spacing: -.01em; }
.hero .sub { color: #cbd5e1; font-size: 15px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 14px;
  margin-top: 24px; }
.card { background: rgba(255,255,255,.08); border: 1px solid rgba(255,255,255,.14);
  border-radius: 12px; padding: 14px 16px; }
.card .k { font-size: 12px; color: #bfdbfe; text-transform: uppercase; letter-spacing: .06em; }
.card .v { font-size: 26px; font-weight: 700; margin-top: 2px; font-variant-numeric: tabular-nums; }
.card .v small { font-size: 14px; font-weight: 500; color: #cbd5e1; margin-left: 3px; }
.card .d { font-size: 12.5px; color: #cbd5e1; margin-top: 2px; }
.card.gpu .v { font-size: 22px; }
.pill { display: inline-block; padding: 1px 9px; border-radius: 999px; font-size: 12px;
  font-weight: 600; }
.pill.ok { background: #dcfce7; color: var(--ok); }
.pill.bad { background: #fee2e2; color: var(--bad); }
.warnings { margin-top: 18px; display: grid; gap: 8px; }
.warning { background: #fffbeb; color: #78350f; border-left: 4px solid #f59e0b;
  border-radius: 8px; padding: 9px 14px; font-size: 14px; }
nav.toc { position: sticky; top: 0; z-index: 10; background: rgba(255,255,255,.92);
  backdrop-filter: blur(6px); border-bottom: 1px solid var(--line); }
nav.toc .wrap { display: flex; gap: 22px; overflow-x: auto;
  padding-top: 10px; padding-bottom: 10px; }
nav.toc a { color: var(--ink2); text-decoration: none; font-size: 14px; font-weight: 500;
  white-space: nowrap; }
nav.toc a:hover { color: var(--accent); }
section { background: var(--card); border: 1px solid var(--line); border-radius: 14px;
  padding: 22px 26px; margin: 22px 0; box-shadow: 0 1px 2px rgba(15,23,42,.04); }
section h2 { margin: 0 0 4px; font-size: 20px; letter-spacing: -.01em; }
section h3 { margin: 20px 0 4px; font-size: 15px; color: var(--ink2); }
.lede { color: var(--mute); margin: 0 0 12px; font-size: 14px; max-width: 900px; }
.note { color: var(--mute); font-size: 13px; margin: 6px 0 0; }
.grid2 { display: grid; grid-template-columns: 1fr 1fr; gap: 24px; }
@media (max-width: 900px) { .grid2 { grid-template-columns: 1fr; } }
.figure { width: 100%; }
table.data { border-collapse: collapse; width: 100%; font-size: 13px;
  font-variant-numeric: tabular-nums; }
table.data th, table.data td { padding: 5px 8px; border-bottom: 1px solid var(--line);
  text-align: left; white-space: nowrap; }
table.data td.n, table.data th.n { text-align: right; }
table.data thead th { position: sticky; top: 0; background: #f8fafc; color: var(--ink2);
  font-weight: 600; border-bottom: 2px solid #cbd5e1; white-space: normal; vertical-align: bottom; }
table.sortable thead th { cursor: pointer; user-select: none; }
table.sortable thead th:hover { color: var(--accent); }
table.sortable thead th[data-dir="asc"]::after { content: " ▲"; font-size: 10px; }
table.sortable thead th[data-dir="desc"]::after { content: " ▼"; font-size: 10px; }
table.data tbody tr:hover { background: #f1f5f9; }
table.data tfoot td { font-weight: 600; border-top: 2px solid #cbd5e1; border-bottom: 0; }
.scroll { max-height: 620px; overflow: auto; border: 1px solid var(--line); border-radius: 10px; }
.bar { display: inline-block; height: 8px; background: var(--accent); border-radius: 4px;
  vertical-align: middle; margin-left: 6px; opacity: .75; }
.b-compute { color: #1d4ed8; font-weight: 600; } .b-memory { color: #b45309; font-weight: 600; }
.b-latency { color: #b91c1c; font-weight: 600; } .b-comm { color: #7e22ce; font-weight: 600; }
.dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 6px; }
.kvgrid { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 10px; }
.kvt { background: #f8fafc; border: 1px solid var(--line); border-radius: 8px; padding: 7px 11px; }
.kvt .k { font-size: 12px; color: var(--mute); }
.kvt .v { font-size: 15px; font-weight: 600; font-variant-numeric: tabular-nums; }
table.kv { border-collapse: collapse; font-size: 13.5px; }
table.kv th { text-align: left; color: var(--mute); font-weight: 500; padding: 4px 18px 4px 0;
  vertical-align: top; white-space: nowrap; }
table.kv td { padding: 4px 0; vertical-align: top; }
table.src td.s { color: var(--mute); font-size: 12.5px; white-space: normal; max-width: 640px; }
details { margin-top: 12px; }
details > summary { cursor: pointer; font-weight: 600; color: var(--ink2); padding: 4px 0; }
ul.assume { margin: 6px 0 0 18px; padding: 0; color: var(--ink2); font-size: 14px; }
ul.assume li { margin: 3px 0; }
code { background: #f1f5f9; padding: 1px 5px; border-radius: 4px; font-size: 12.5px; }
footer { color: var(--mute); font-size: 12.5px; text-align: center; padding: 10px 0 36px; }
"""

# Sort a table on header click: numbers by data-v, text otherwise; click again to reverse.
SORT_JS = """
(function () {
  function key(cell) {
    var v = cell.getAttribute('data-v');
    if (v !== null) { var f = parseFloat(v); return isNaN(f) ? -Infinity : f; }
    return cell.textContent.trim().toLowerCase();
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener('click', function () {
        var dir = th.getAttribute('data-dir') === 'desc' ? 'asc' : 'desc';
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute('data-dir'); });
        th.setAttribute('data-dir', dir);
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          var c = x < y ? -1 : x > y ? 1 : 0;
          return dir === 'asc' ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""
