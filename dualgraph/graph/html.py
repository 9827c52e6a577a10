"""Graphs as one self-contained HTML page: the graphs side by side (before and after the
passes, say), each node with its op, attrs, output names, shapes and dtypes and the user's
source line (tooltip and a details panel), subgraphs as clusters (filled for fused groups,
dashed for control-flow bodies) and, given a memory plan, its buffers in a table whose rows
highlight the values sharing each buffer.

The page loads nothing from the network. Where Graphviz's ``dot`` program is installed the
graphs are its SVG, embedded; otherwise (or with ``layout="js"``) the page's own script
(``page.js``, beside this module, with the template ``page.html``) lays them out as SVG.
Both draw ``dot.drawing``, which the page also holds as JSON.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import string
import subprocess
from pathlib import Path

from .._helpers import write_atomic
from .dot import drawing, to_dot
from .ir import Graph

_HERE = Path(__file__).parent
DOT_SECONDS = 60   # Graphviz's time per graph; past it (huge graphs) the page lays it out
_SVG_START = re.compile(r"<svg\b")
_AUTO_ID = re.compile(r' id="(?:graph|node|edge|clust)\d+"')   # Graphviz's numbering


def to_html(graph: Graph, path, plan=None, title: str | None = None, layout: str = "auto",
            sources: bool = True) -> str:
    """Write ``graph`` to ``path`` as a self-contained HTML page (atomically) and return
    the path. ``plan`` (the graph's ``passes.MemoryPlan``) adds its buffers; ``layout``:
    ``"auto"`` (Graphviz where ``dot`` is installed, else the page's script), ``"dot"`` or
    ``"js"``; ``sources=False`` leaves out the text of source lines (for a graph loaded
    from a file, whose locations name another machine's files).

    >>> import dualgraph as dg, os, tempfile
    >>> g = dg.jit.trace(lambda x: dg.tanh(x) * 2, dg.ones(3)).graph
    >>> path = g.to_html(os.path.join(tempfile.mkdtemp(), "graph.html"))
    >>> "tanh" in open(path).read()
    True
    """
    return write_html(path, [("graph", graph)], plan, title or "graph", layout, sources)


def write_html(path, graphs, plan=None, title: str = "graph", layout: str = "auto",
               sources: bool = True) -> str:
    """Write a page showing ``graphs``, ``[(heading, Graph), ...]`` side by side, to
    ``path`` (atomically); ``plan`` is the memory plan of the last one. Returns the path.
    See ``to_html``."""
    write_atomic(path, render_html(graphs, plan, title, layout, sources).encode("utf-8"))
    return os.fspath(path)


def render_html(graphs, plan=None, title: str = "graph", layout: str = "auto",
                sources: bool = True) -> str:
    """The page ``write_html`` writes, as text."""
    if layout not in ("auto", "dot", "js"):
        raise ValueError(f"layout={layout!r}: give 'auto', 'dot' or 'js'")
    graphviz = shutil.which("dot") if layout != "js" else None
    if layout == "dot" and graphviz is None:
        raise RuntimeError("layout='dot' needs Graphviz's dot program on the PATH (install "
                           "graphviz), or use layout='auto' to lay the graph out in the page")
    panels, markup, notes = [], [], []
    for k, (heading, graph) in enumerate(graphs):
        planned = plan if k == len(graphs) - 1 else None
        svg = ""
        if graphviz:
            svg, failure = _svg(graphviz, to_dot(graph, heading, planned, sources, f"p{k}"))
            if failure:
                notes.append(f"{heading}: Graphviz failed ({failure}); laid out in the page.")
        panels.append({"heading": heading, "graphviz": bool(svg),
                       "drawing": drawing(graph, f"p{k}", planned, sources)})
        markup.append(f'    <section class="panel" id="panel{k}">\n'
                      f"      <h2>{html.escape(heading)}</h2>\n"
                      f'      <p class="note">{html.escape(_summary(graph))} '
                      '<button type="button" class="zoom">actual size</button></p>\n'
                      f'      <div class="canvas fit">{svg}</div>\n    </section>')
    note = " ".join(notes) or ("Laid out by Graphviz." if graphviz else
                               "Laid out in the page (Graphviz's dot was not found).")
    template = string.Template((_HERE / "page.html").read_text(encoding="utf-8"))
    return template.substitute(title=html.escape(title), note=html.escape(note),
                               panels="\n".join(markup), memory=_memory(plan),
                               data=_script_json({"title": title, "panels": panels}),
                               script=(_HERE / "page.js").read_text(encoding="utf-8"))


def _summary(graph: Graph) -> str:
    return (f"{len(graph.inputs)} inputs, {len(graph.constants)} constants, "
            f"{len(graph.nodes)} nodes, {len(graph.outputs)} outputs")


def _svg(graphviz: str, dot: str) -> tuple[str, str]:
    """(Graphviz's SVG of ``dot`` ready to embed, "") or ("", why it failed)."""
    try:
        done = subprocess.run([graphviz, "-Tsvg"], input=dot.encode("utf-8"),
                              capture_output=True, timeout=DOT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "", type(e).__name__
    text = done.stdout.decode("utf-8", "replace")
    start = _SVG_START.search(text)
    if done.returncode or start is None:
        return "", done.stderr.decode("utf-8", "replace").strip()[:200] or "no SVG"
    # (from <svg on: the XML prolog and doctype are not HTML; ids Graphviz numbers itself
    # would repeat from one panel to the next, and ours name every node and cluster)
    return _AUTO_ID.sub("", text[start.start():]), ""


def _memory(plan) -> str:
    """The memory plan as a table, a row per buffer (the page highlights a row's values)."""
    if plan is None:
        return ""
    rows = [f'    <tr data-buffer="{k}"><td>{k}</td><td>{html.escape(dtype)}</td>'
            f"<td>{html.escape(str(size))}</td><td>{html.escape(', '.join(values))}</td></tr>"
            for k, dtype, size, values in plan.table()]
    return ('<section id="memory">\n'
            f"  <h2>Memory plan</h2>\n  <p class=\"note\">{html.escape(plan.summary())}</p>\n"
            "  <table>\n    <tr><th>buffer</th><th>dtype</th><th>size</th><th>values</th></tr>\n"
            + "\n".join(rows) + "\n  </table>\n</section>")


def _script_json(data) -> str:
    """JSON safe inside a <script> element: no "</script>" or "<!--" can appear in it (every
    <, > and & is a JSON escape, which JSON.parse reads back as the same text)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
