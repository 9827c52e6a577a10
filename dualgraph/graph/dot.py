"""Graphs as Graphviz DOT text (render with ``dot -Tsvg``), and the drawing both DOT and
the HTML view (``graph/html.py``) are made from.

Each node is a box labelled with its op and attrs, its outputs' names and types (with the
memory plan's buffer when one is given) and the user's source location; its tooltip adds
the source line itself. A node's subgraphs become clusters: filled for a group of ops run
as one (a ``fused`` node), dashed for the bodies of control flow (an op with ``bodies``).
"""
from __future__ import annotations

import linecache
import re

from .._helpers import short_location
from .ir import Graph, Node, Value, subgraphs
from .printer import format_attr, format_operand

_LOCATION = re.compile(r"(.+):(\d+)")   # "path/model.py:14", maybe with " (vjp)" after it
MAX_LINE = 100   # label lines are cut here: a long attr (a big tuple) would widen the box


def to_dot(graph: Graph, name: str = "graph", plan=None, sources: bool = True,
           prefix: str = "g") -> str:
    """DOT text for ``graph``: one box per node, one edge per value use, typed labels.

    ``plan`` (a ``passes.MemoryPlan`` of this graph) adds each output's buffer to its
    label; ``sources=False`` leaves the source lines out of the tooltips (for a graph
    loaded from a file, whose locations name another machine's files); ``prefix`` starts
    every DOT id (ids are also the SVG elements' ids).

    >>> g = Graph(); x = g.add_input((2,), "float32"); g.set_outputs(g.add_node("exp", [x]))
    >>> print(to_dot(g).splitlines()[0])
    digraph "graph" {
    """
    lines = [f"digraph {_quote(name)} {{",
             "  graph [fontname=monospace, fontsize=10];",
             "  node [shape=box, fontname=monospace, fontsize=10];",
             "  edge [arrowsize=0.6];"]
    _emit(drawing(graph, prefix, plan, sources), lines, "  ")
    lines.append("}")
    return "\n".join(lines)


def drawing(graph: Graph, prefix: str = "g", plan=None, sources: bool = True) -> dict:
    """What a picture of ``graph`` shows, as plain data: ``{"items": [...]}``, one item per
    input, constant, node and the return, in the graph's order. An item has an ``id``
    (``prefix`` then its place), a ``kind`` (input, const, op, return), its label
    ``lines``, ``from`` (the ids of the items it reads) and, for nodes, ``location``,
    ``source`` (the line's text, unless ``sources=False``), ``tip`` (both, for a tooltip),
    ``buffers`` (its outputs' in ``plan``) and ``subs`` (a cluster per subgraph: id, label,
    kind, and its drawing).

    >>> g = Graph(); x = g.add_input((2,), "float32"); g.set_outputs(g.add_node("exp", [x]))
    >>> [(item["id"], item["lines"][0]) for item in drawing(g)["items"]]
    [('g_in0', '%x: f32[2]'), ('g_n0', 'exp'), ('g_out', 'return')]
    """
    buffer_of = {} if plan is None else {v.name: k for v, k in plan.assignment.items()}
    ids: dict[Value, str] = {}
    items = []
    for kind, values in (("input", graph.inputs), ("const", graph.constants)):
        for k, v in enumerate(values):
            ids[v] = f"{prefix}_{'in' if kind == 'input' else 'c'}{k}"
            items.append({"id": ids[v], "kind": kind, "lines": [repr(v)], "from": []})
    for i, node in enumerate(graph.nodes):
        nid = f"{prefix}_n{i}"
        buffers = [buffer_of.get(v.name) for v in node.outputs]
        item = {"id": nid, "kind": "op", "op": node.op.name,
                "lines": node_lines(node, buffers),
                "from": [ids[x] for x in node.inputs if isinstance(x, Value)],
                "location": node.location or "",
                "source": source_line(node.location) if sources else "",
                "buffers": [k for k in buffers if k is not None]}
        item["tip"] = (f"{node.location or node.op.name}: {item['source']}" if item["source"]
                       else node.location or node.op.name)
        subs = [{"id": f"cluster_{nid}_s{j}", "label": f"{node.op.name} @{label}",
                 "kind": "body" if node.op.bodies else "group",
                 "drawing": drawing(sub, f"{nid}_s{j}", None, sources)}
                for j, (label, sub) in enumerate(subgraphs(node.attrs))]
        if subs:
            item["subs"] = subs
        items.append(item)
        for v in node.outputs:
            ids[v] = nid
    items.append({"id": f"{prefix}_out", "kind": "return", "lines": ["return"],
                  "from": [ids[v] for v in graph.outputs]})
    return {"items": items}


def node_lines(node: Node, buffers=()) -> list[str]:
    """A node's label: ``op(literals, attrs)``, then ``%name: type`` per output (with
    ``buffer k`` where ``buffers`` gives one), then the short source location."""
    literals = [format_operand(x) for x in node.inputs if not isinstance(x, Value)]
    attrs = [f"{k}={format_attr(v, k)}" for k, v in node.attrs.items()]
    text = [node.op.name + (f"({', '.join(literals + attrs)})" if literals + attrs else "")]
    for v, k in zip(node.outputs, list(buffers) or [None] * len(node.outputs)):
        text.append(repr(v) + ("" if k is None else f"  buffer {k}"))
    if node.location:
        text.append(short_location(node.location))
    return [t if len(t) <= MAX_LINE else t[:MAX_LINE - 3] + "..." for t in text]


def source_line(location: str | None) -> str:
    """The text of the user's line that ``location`` (``path.py:LINE``) names, stripped;
    "" when the file can't be read (a location from another machine, ``<stdin>``)."""
    m = _LOCATION.match(location or "")
    return linecache.getline(m[1], int(m[2])).strip() if m else ""


_SHAPES = {"input": "shape=ellipse", "return": "shape=ellipse",
           "const": "style=filled, fillcolor=lightgrey"}
_CLUSTER_STYLES = {"body": "style=dashed", "group": 'style="filled,rounded"; fillcolor="#e8f0fe"'}


def _emit(picture: dict, lines: list, ind: str) -> None:
    """Append a drawing's items as DOT statements, each followed by the edges into it."""
    for item in picture["items"]:
        iid = item["id"]
        attrs = [f"id={iid}", f"label={_quote(chr(10).join(item['lines']))}"]
        if item["kind"] in _SHAPES:
            attrs.insert(1, _SHAPES[item["kind"]])
        else:
            attrs.append(f"tooltip={_quote(item['tip'])}")
        lines.append(f"{ind}{iid} [{', '.join(attrs)}];")
        lines += [f"{ind}{src} -> {iid};" for src in item["from"]]
        for sub in item.get("subs", ()):
            lines.append(f"{ind}subgraph {sub['id']} {{")
            lines.append(f"{ind}  id={sub['id']}; {_CLUSTER_STYLES[sub['kind']]};")
            lines.append(f"{ind}  label={_quote(sub['label'])};")
            _emit(sub["drawing"], lines, ind + "  ")
            lines.append(f"{ind}}}")
            lines.append(f"{ind}{sub['drawing']['items'][-1]['id']} -> {iid} [style=dashed];")


def _quote(text: str) -> str:
    # (a backslash is doubled: DOT reads \l, \N, \G in labels as escapes of its own)
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
