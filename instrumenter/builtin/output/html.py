"""``report.html``: the run on one page that opens from disk, offline, in any browser.

Written beside ``summary.json`` by every reading of a built-in run (and by ``autoitt report DIR --html``).
What the page holds, each from what the reading already made: the one-screen summary (the terminal's own
rendering, :func:`.render.render`, its tables as HTML tables and its lines as paragraphs: :func:`summary_html`), the step-time chart (``steps.svg`` itself,
inline), each step loop's phases as bars, a flame graph (an icicle: the run's root at the top) of the sampled
stacks per region (``[step]``, ``[outside collection]``, each evaluation...: the first frame of each folded
stack), with search and zoom, and the operator, hotspot and your-code tables (sortable: click a heading).

Self-contained: the scripts and styles are inline (d3 and d3-flame-graph, vendored in ``vendor/`` with their
licences: its README says which and why), and a Content-Security-Policy forbids the page any request, so
it works offline and shows nothing of the machine it is opened on to anyone. The page says on itself whether
it ran clean: ``#autoitt-status`` holds ``data-errors`` and ``data-blocked`` (scripts that failed or wrote an
error to the console, requests the policy refused), what the browser test reads.

Bounded, whatever the run: the flame graph keeps at most :data:`FLAME_NODES` frames (the smallest folded into
their parent), ``steps.svg`` and the tables are bounded already; a page of a long run stays well under
:data:`MAX_BYTES`.
"""

from __future__ import annotations

import io
import json
from importlib import resources
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from ...profile.console import duration, printable
from ...profile.instrumentation import Instrumentation
from ..samples.sampling import OUTSIDE_ROOT
from ..statistics.summary import BuiltinSummary, Hotspot, TaskStats
from .notes import thin_phase_split

#: frames the flame graph keeps over all regions: the most sampled, each with its ancestors
FLAME_NODES = 20000
#: what a page stays under (the vendored scripts are 0.35 MB of it)
MAX_BYTES = 6 * 1024 * 1024

_VENDOR = ("d3-7.9.0.min.js", "d3-flamegraph-4.1.3.min.js")
_VENDOR_CSS = "d3-flamegraph-4.1.3.css"

#: no request of any kind: inline scripts and styles, images from data: URLs (the page has none)
_POLICY = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 2em 3em; color: #222; }
h1 { font-size: 1.4em; margin: 0.8em 0 0.2em; }
h2 { font-size: 1.15em; margin: 1.6em 0 0.5em; border-bottom: 1px solid #ddd; }
nav a { margin-right: 1em; }
#autoitt-status { color: #777; font-size: 0.85em; }
pre.summary { font-size: 12px; line-height: 1.3; overflow-x: auto; background: #fff; }
div.summary p { margin: 0.25em 0; }
div.summary p.note { color: #666; font-size: 0.9em; }
table.summary { border-collapse: collapse; font-size: 13px; margin: 0.6em 0; }
table.summary caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
table.summary th { text-align: left; border-bottom: 2px solid #ccc; padding: 3px 8px; vertical-align: bottom; }
table.summary td { border-bottom: 1px solid #eee; padding: 2px 8px; overflow-wrap: anywhere; }
table.summary th.num, table.summary td.num { text-align: right; white-space: nowrap; }
table.sortable { border-collapse: collapse; font-size: 13px; }
table.sortable th { cursor: pointer; text-align: left; border-bottom: 2px solid #ccc; padding: 3px 8px; }
table.sortable th.num, table.sortable td.num { text-align: right; }
table.sortable td { border-bottom: 1px solid #eee; padding: 2px 8px; max-width: 52em; overflow-wrap: anywhere; }
.bar { display: inline-block; height: 0.9em; background: #4e79a7; vertical-align: middle; }
.phase td { padding: 2px 8px; }
#flame-controls > * { margin-right: 0.6em; }
#flame-details { min-height: 1.3em; font-size: 13px; color: #444; margin: 0.3em 0; }
"""

_APP = r"""
(function () {
  var status = document.getElementById('autoitt-status');
  var data = JSON.parse(document.getElementById('flame-data').textContent);
  var names = Object.keys(data);
  var select = document.getElementById('flame-region');
  var holder = document.getElementById('flame-chart');
  var search = document.getElementById('flame-search');
  var chart = null;
  names.forEach(function (name) {
    var option = document.createElement('option');
    option.value = name;
    option.textContent = name + ' (' + data[name].value + ' samples)';
    select.appendChild(option);
  });
  function show(name) {
    holder.innerHTML = '';
    if (!data[name]) { holder.textContent = 'No samples were taken.'; return; }
    chart = flamegraph().width(Math.max(holder.clientWidth, 600)).cellHeight(18).minFrameSize(1)
      .transitionDuration(0).inverted(true).sort(true).selfValue(false)
      .setDetailsElement(document.getElementById('flame-details'));
    d3.select(holder).datum(data[name]).call(chart);
    if (search.value) chart.search(search.value);
  }
  select.addEventListener('change', function () { show(select.value); });
  search.addEventListener('input', function () {
    if (!chart) return;
    if (search.value) chart.search(search.value); else chart.clear();
  });
  document.getElementById('flame-reset').addEventListener('click', function () { if (chart) chart.resetZoom(); });
  if (names.length) show(names[0]); else show(null);

  // sortable tables: a click on a heading sorts by it (numbers by their data-value), again the other way
  Array.prototype.forEach.call(document.querySelectorAll('table.sortable'), function (table) {
    Array.prototype.forEach.call(table.querySelectorAll('th'), function (th, column) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var down = th.getAttribute('data-order') !== 'desc';
        rows.sort(function (a, b) {
          var x = a.cells[column], y = b.cells[column];
          var p = x.getAttribute('data-value'), q = y.getAttribute('data-value');
          var order = p !== null && q !== null ? parseFloat(p) - parseFloat(q)
                                               : x.textContent.localeCompare(y.textContent);
          return down ? -order : order;
        });
        th.setAttribute('data-order', down ? 'desc' : 'asc');
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });

  // #selftest-zoom (the browser test): click the widest frame below the root, and say its width before and after
  function settle() {
    if (location.hash === '#selftest-zoom' && chart) {
      // the widest frame below the root that is less than the whole width (its share from the layout)
      var frames = Array.prototype.slice.call(holder.querySelectorAll('g.frame'));
      var narrower = frames.filter(function (g) {
        var d = g.__data__;
        return d && d.depth >= 1 && d.x1 - d.x0 < 0.9;
      });
      narrower.sort(function (a, b) { return (b.__data__.x1 - b.__data__.x0) - (a.__data__.x1 - a.__data__.x0); });
      var target = narrower[0];
      if (target) {
        var width = function () { return parseFloat(target.querySelector('rect').getAttribute('width')); };
        status.setAttribute('data-zoom-before', width().toFixed(1));
        target.dispatchEvent(new MouseEvent('click', {bubbles: true}));
        setTimeout(function () {
          status.setAttribute('data-zoom-after', width().toFixed(1));
          status.setAttribute('data-chart-width', holder.querySelector('svg').getAttribute('width'));
          finish();
        }, 1000);
        return;
      }
    }
    finish();
  }
  function finish() {
    status.setAttribute('data-frames', holder.querySelectorAll('g.frame').length);
    window.autoittFinish();
  }
  // after the chart's first drawing, whose frames grow into place (d3's transitions: 250 ms)
  window.addEventListener('load', function () { setTimeout(settle, 1000); });
})();
"""

#: first in <head>: what goes wrong is counted from the start. In the self-test, animation frames are timers:
#: headless Chromium's virtual time (the browser test) does not always run animation frames, which d3's
#: transitions wait for (d3-timer binds requestAnimationFrame as it loads: after this)
_WATCH = """
if (location.hash.indexOf('#selftest') === 0) {
  window.requestAnimationFrame = function (f) { return setTimeout(function () { f(performance.now()); }, 16); };
}
window.autoittErrors = []; window.autoittBlocked = [];
window.addEventListener('error', function (e) { window.autoittErrors.push(String(e.message)); });
window.addEventListener('unhandledrejection', function (e) { window.autoittErrors.push(String(e.reason)); });
(function (original) {  // what a script says on the console as an error counts as one
  console.error = function () {
    window.autoittErrors.push(Array.prototype.join.call(arguments, ' '));
    return original.apply(console, arguments);
  };
})(console.error);
document.addEventListener('securitypolicyviolation', function (e) { window.autoittBlocked.push(e.blockedURI); });
window.autoittFinish = function () {  // the status line's last word, once the page has done its work
  var status = document.getElementById('autoitt-status');
  var errors = window.autoittErrors.length, blocked = window.autoittBlocked.length;
  status.setAttribute('data-errors', errors);
  status.setAttribute('data-blocked', blocked);
  status.textContent = errors || blocked ? errors + ' script error(s), ' + blocked + ' blocked request(s): '
    + window.autoittErrors.concat(window.autoittBlocked).join('; ') : 'page ready';
};
"""


def _vendored(name: str) -> str:
    return resources.files(__package__).joinpath("vendor", name).read_text(encoding="utf-8")


def html_text(value: object) -> str:
    """Text from a trace or the user as HTML character data: printable, and ``<``, ``>``, ``&`` escaped."""
    return printable(str(value)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _script_json(value: object) -> str:
    """JSON to place inside a <script> element: ``</`` cannot end it early."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def flame_trees(folded: Iterable[str], budget: int = FLAME_NODES) -> Dict[str, dict]:
    """Per region (the first frame of each folded stack line ``region;a;b 12``), its tree of frames as
    d3-flame-graph takes it: ``{"name", "value", "children"}`` with ``value`` the samples at or below the frame.
    At most ``budget`` frames over all regions: the most sampled (a frame before its children), the others'
    samples left in their parent."""
    roots: Dict[str, dict] = {}
    for line in folded:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        node = roots.setdefault(frames[0], {"name": frames[0], "value": 0, "kids": {}})
        node["value"] += int(count)
        for frame in frames[1:]:
            node = node["kids"].setdefault(frame, {"name": frame, "value": 0, "kids": {}})
            node["value"] += int(count)
    # the most sampled frames first, across regions; a child never outranks its parent (value <= parent's)
    order = sorted(((node["value"], id(node), node) for root in roots.values() for node in _walk(root)),
                   key=lambda item: -item[0])
    kept = {id(node) for _, _, node in order[:budget]}
    # the training's regions first, the most sampled first; start-up and the rest after it last
    ordered = sorted(roots.items(), key=lambda item: (item[0] == OUTSIDE_ROOT, -item[1]["value"]))
    return {name: _pruned(root, kept) for name, root in ordered}


def _walk(node: dict):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current["kids"].values())


def _pruned(node: dict, kept: set) -> dict:
    children = [_pruned(child, kept) for child in node["kids"].values() if id(child) in kept]
    return {"name": node["name"], "value": node["value"], **({"children": children} if children else {})}


def _summary_text(summary: BuiltinSummary, script: str, result_dir: Path,
                  instrumentation: Optional[Instrumentation]) -> str:
    """The one-screen summary as the terminal shows it (the result files left out: not all are written yet)."""
    from .render import render

    return summary_html(lambda console: render(summary, console, script=script, result_dir=result_dir,
                                               instrumentation=instrumentation, files=False))


def _phases(summary: BuiltinSummary) -> str:
    parts = []
    for step in summary.steps:
        if not step.phases:
            continue
        rows = []
        for name, phase in step.phases.items():
            width = max(0.0, min(1.0, phase.get("share", 0.0))) * 400
            rows.append(f'<tr class="phase"><td>{html_text(name)}</td><td class="num">'
                        f'{duration(phase.get("seconds_per_step", 0.0))}</td><td class="num">'
                        f'{phase.get("share", 0.0):.0%}</td><td><span class="bar" style="width:{width:.0f}px">'
                        '</span></td></tr>')
        thin = thin_phase_split(summary.sampling, step.label)
        parts.append(f"<h3>{html_text(step.label)}: per step, over {step.phase_steps:,} steady steps</h3>"
                     f"<table>{''.join(rows)}</table>" + (f"<p>note: {html_text(thin)}</p>" if thin else ""))
    return "".join(parts) or "<p>No phases: no steady step recorded its operators.</p>"


def _table(columns: List[str], rows: List[List[object]], numeric: set) -> str:
    """A sortable table; cells of ``numeric`` columns are seconds, shown as durations, sorted by value."""
    head = "".join(f'<th class="{"num" if i in numeric else ""}">{html_text(c)}</th>'
                   for i, c in enumerate(columns))
    body = []
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            if i in numeric and isinstance(value, (int, float)):
                cells.append(f'<td class="num" data-value="{value:.9g}">{duration(value)}</td>')
            else:
                cells.append(f"<td>{html_text(value if value is not None else '')}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _operators(operators: List[TaskStats]) -> str:
    if not operators:
        return "<p>No operator tasks (PyTorch's, with emit_itt) were recorded.</p>"
    return _table(["operator", "count", "self, oneDNN's included", "self", "total", "mean"],
                  [[t.label or t.name, t.count, t.self_with_library_s, t.self_s, t.total_s, t.mean_s] for t in operators],
                  {2, 3, 4, 5})


def _hotspots(rows: List[Hotspot], lines: bool = False) -> str:
    if not rows:
        return "<p>No samples.</p>"
    if lines:
        return _table(["line", "function", "CPU at the line", "its own", "waiting (off-CPU, est.)"],
                      [[f"{h.file}:{h.line}", h.function, h.total_s, h.self_s, h.off_cpu_s] for h in rows], {2, 3, 4})
    return _table(["function", "where", "self CPU", "total CPU"],
                  [[h.function, f"{h.file}:{h.line}" if h.file else h.library, h.self_s, h.total_s] for h in rows],
                  {2, 3})


#: a page without a script of its own: its status line is done once it has loaded
_FINISH = "window.addEventListener('load', function () { window.autoittFinish(); });"


def page(title: str, heading: str, body: str, *, style: str = "", scripts: str = f"<script>{_FINISH}</script>"
         ) -> str:
    """A page of autoitt's (report.html, ``autoitt compare --html``): the policy that forbids it any request,
    the script watching what goes wrong (first in <head>), the styles (``style`` added), the heading and the
    ``#autoitt-status`` line, ``body`` (HTML), then ``scripts`` (HTML), whose work ends with
    ``autoittFinish()``."""
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">',
        f"<title>{html_text(title)}</title><script>{_WATCH}</script><style>{_STYLE}{style}</style></head><body>",
        f'<h1>{html_text(heading)}</h1><p id="autoitt-status">loading…</p>', body, scripts,
        "</body></html>\n",
    ])


class _PageConsole:
    """What a renderer prints (:func:`.render.render`, the comparison's), as HTML: each rich Table a real
    ``<table>`` (its title the caption, its figure columns right-aligned), each line of text a paragraph
    (dim text, the notes under a table, in grey); anything else as the terminal would draw it, in a
    ``<pre>``. A page's width is the reader's: nothing is cut or folded to a terminal's."""

    def __init__(self) -> None:
        self.parts: List[str] = []

    def print(self, renderable: object = "", *args, **kwargs) -> None:
        from rich.table import Table
        from rich.text import Text

        if isinstance(renderable, Table):
            self.parts.append(self._table(renderable))
        elif isinstance(renderable, (str, Text)):
            text = Text.from_markup(renderable) if isinstance(renderable, str) else renderable
            dim = any("dim" in str(span.style) for span in text.spans) or "dim" in str(text.style)
            self.parts.append(f'<p class="{"note" if dim else "line"}">{html_text(text.plain)}</p>')
        else:
            self.parts.append(f'<pre class="summary">{html_text(_drawn(renderable))}</pre>')

    @staticmethod
    def _table(table) -> str:
        from rich.text import Text

        def plain(cell) -> str:
            return (Text.from_markup(cell) if isinstance(cell, str) else cell).plain if cell is not None else ""

        right = [column.justify == "right" for column in table.columns]
        head = "".join(f'<th class="{"num" if r else ""}">{html_text(plain(column.header))}</th>'
                       for column, r in zip(table.columns, right))
        rows = list(zip(*(list(column._cells) for column in table.columns)))
        body = "".join("<tr>" + "".join(f'<td class="{"num" if r else ""}">{html_text(plain(cell))}</td>'
                                        for cell, r in zip(row, right)) + "</tr>" for row in rows)
        caption = f"<caption>{html_text(plain(table.title))}</caption>" if table.title else ""
        return f'<table class="summary">{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    def html(self) -> str:
        return f'<div class="summary">{"".join(self.parts)}</div>'


def _drawn(renderable: object) -> str:
    """``renderable`` as a 120-column terminal draws it, as text."""
    from rich.console import Console

    console = Console(record=True, width=120, file=io.StringIO(), highlight=False, emoji=False)
    console.print(renderable)
    return console.export_text()


def summary_html(draw) -> str:
    """What ``draw(console)`` prints, as HTML (:class:`_PageConsole`)."""
    console = _PageConsole()
    draw(console)
    return console.html()


def report_html(summary: BuiltinSummary, *, script: str, result_dir: Path, instrumentation: Optional[Instrumentation],
                svg: str, folded: Iterable[str]) -> str:
    """The page (the module's contents): ``svg`` is steps.svg's text, ``folded`` the folded stacks'."""
    body = "".join([
        '<nav><a href="#summary">Summary</a><a href="#steps">Step time</a><a href="#phases">Phases</a>'
        '<a href="#flame">Flame graph</a><a href="#operators">Operators</a><a href="#hotspots">Hotspots</a>'
        '<a href="#lines">Your code</a></nav>',
        '<h2 id="summary">Summary</h2>', _summary_text(summary, script, result_dir, instrumentation),
        '<h2 id="steps">Step time</h2>', svg,
        '<h2 id="phases">Phases</h2>', _phases(summary),
        '<h2 id="flame">Flame graph of the sampled stacks, by region</h2>',
        '<div id="flame-controls"><label>region <select id="flame-region"></select></label>'
        '<label>search <input id="flame-search" type="search" placeholder="a function, a file"></label>'
        '<button id="flame-reset" type="button">reset zoom</button> click a frame to zoom into it</div>',
        '<div id="flame-details"></div><div id="flame-chart"></div>',
        '<h2 id="operators">Operators</h2>', _operators(summary.operators),
        '<h2 id="hotspots">Hotspots: sampled CPU time over the collected training</h2>', _hotspots(summary.hotspots),
        '<h2 id="lines">Your code</h2>', _hotspots(summary.hotspot_lines, lines=True),
    ])
    scripts = "".join(f"<script>{_vendored(file)}</script>" for file in _VENDOR)
    return page(f"autoitt: {Path(script).name}", f"autoitt profile of {script}", body,
                style=_vendored(_VENDOR_CSS), scripts=scripts + f'<script type="application/json" id="flame-data">'
                f"{_script_json(flame_trees(folded))}</script><script>{_APP}</script>")
