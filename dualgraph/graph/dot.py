"""Graphs as Graphviz DOT text (render with ``dot -Tsvg``); subgraphs become clusters."""
from __future__ import annotations

from .._helpers import short_location
from .ir import Graph, Value, subgraphs, type_str
from .printer import format_attr, format_operand


def to_dot(graph: Graph, name: str = "graph") -> str:
    """DOT text for ``graph``: one box per node, one edge per value use, typed labels.

    >>> g = Graph(); x = g.add_input((2,), "float32"); g.set_outputs(g.add_node("exp", [x]))
    >>> print(to_dot(g).splitlines()[0])
    digraph "graph" {
    """
    lines = [f"digraph {_quote(name)} {{", "  node [shape=box, fontname=monospace];"]
    _emit(graph, "g", lines, "  ")
    lines.append("}")
    return "\n".join(lines)


def _emit(graph: Graph, prefix: str, lines: list, ind: str) -> None:
    """Append ``graph``'s nodes and edges; ``prefix`` keeps DOT ids of subgraphs apart."""
    ids: dict[Value, str] = {}
    for k, v in enumerate(graph.inputs):
        ids[v] = f"{prefix}_in{k}"
        lines.append(f"{ind}{ids[v]} [shape=ellipse, label={_quote(repr(v))}];")
    for k, v in enumerate(graph.constants):
        ids[v] = f"{prefix}_c{k}"
        lines.append(f"{ind}{ids[v]} [style=filled, fillcolor=lightgrey, "
                     f"label={_quote(repr(v))}];")
    for i, node in enumerate(graph.nodes):
        nid = f"{prefix}_n{i}"
        literals = [format_operand(x) for x in node.inputs if not isinstance(x, Value)]
        attrs = [f"{k}={format_attr(v, k)}" for k, v in node.attrs.items()]
        text = [node.op.name + (f"({', '.join(literals + attrs)})" if literals + attrs else "")]
        text += [f"%{v.name}: {type_str(v.shape, v.dtype)}" for v in node.outputs]
        if node.location:
            text.append(short_location(node.location))
        lines.append(f"{ind}{nid} [label={_quote(chr(10).join(text))}];")
        for x in node.inputs:
            if isinstance(x, Value):
                lines.append(f"{ind}{ids[x]} -> {nid};")
        for v in node.outputs:
            ids[v] = nid
        for j, (label, sub) in enumerate(subgraphs(node.attrs)):
            sub_prefix = f"{nid}_s{j}"
            lines.append(f"{ind}subgraph cluster_{sub_prefix} {{")
            lines.append(f"{ind}  label={_quote('@' + label)};")
            _emit(sub, sub_prefix, lines, ind + "  ")
            lines.append(f"{ind}}}")
            lines.append(f"{ind}{sub_prefix}_out -> {nid} [style=dashed];")
    out = f"{prefix}_out"
    lines.append(f"{ind}{out} [shape=ellipse, label=\"return\"];")
    for v in graph.outputs:
        lines.append(f"{ind}{ids[v]} -> {out};")


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
