"""The verifier: one of the IR's two oracles (the other is the interpreter).

``verify(graph)`` checks the invariants every pass must preserve, and raises a
:class:`GraphError` naming the node (its printed line) and what is wrong:

- SSA: each Value is defined once (input, constant or node output) and names are unique;
- order: every node input is defined before the node (so the node list is topological);
- no dangling values: node inputs and graph outputs are values of this graph;
- types: constants match their arrays; each node's outputs are exactly what its op's shape
  rule gives when re-run on its inputs and attrs;
- ops and attrs: every op is the registry's, every attr name is one the op lists;
- subgraphs in attrs are verified the same way.
"""
from __future__ import annotations

import numpy as np

from ..ops.opdef import REGISTRY
from .ir import (Graph, GraphError, Node, Value, as_dtype, as_shape, check_attr, infer_types,
                 is_literal, subgraphs, type_str)
from .printer import format_node


def verify(graph: Graph) -> Graph:
    """Check ``graph``'s invariants (see the module docstring); returns it unchanged.

    >>> g = Graph(); x = g.add_input((3,), "float32"); g.set_outputs([x])
    >>> verify(g) is g
    True
    """
    _Checker(graph, "").run()
    return graph


class _Checker:
    def __init__(self, graph: Graph, where: str):
        self.graph = graph
        self.where = where          # "in @body of node 2: " for subgraphs
        self.defined: set[Value] = set()
        self.names: set[str] = set()
        self.rule_types: dict = {}   # the memo of infer_types (each rule runs once a call)

    def fail(self, problem: str, node_index=None, node=None):
        at = "" if node is None else f"node {node_index} `{_safe_line(node)}`: "
        raise GraphError(f"{self.where}{at}{problem}")

    def define(self, v, what: str, node_index=None, node=None):
        if not isinstance(v, Value):
            self.fail(f"{what} is a {type(v).__name__}, not a Value", node_index, node)
        if v in self.defined:
            self.fail(f"%{v.name} is defined twice (values are defined once)", node_index, node)
        if v.name in self.names:
            self.fail(f"two values are named %{v.name} (names are unique in a graph)",
                      node_index, node)
        try:
            well_formed = as_shape(v.shape) == v.shape and as_dtype(v.dtype) == v.dtype
        except GraphError:
            well_formed = False
        if not well_formed or not isinstance(v.shape, tuple):
            self.fail(f"{what} %{v.name} has a malformed type {v.shape!r} {v.dtype!r}",
                      node_index, node)
        self.defined.add(v)
        self.names.add(v.name)

    def run(self):
        g = self.graph
        for v in g.inputs:
            self.define(v, "graph input")
            if v.producer is not None:
                self.fail(f"graph input %{v.name} has a producer node")
        for v, arr in g.constants.items():
            self.define(v, "constant")
            if not isinstance(arr, np.ndarray) or arr.shape != v.shape or arr.dtype != v.dtype:
                got = (type_str(arr.shape, arr.dtype) if isinstance(arr, np.ndarray)
                       else type(arr).__name__)
                self.fail(f"constant {v!r} is bound to an array of type {got}")
        for i, node in enumerate(g.nodes):
            self.check_node(i, node)
        for v in g.outputs:
            if v not in self.defined:
                self.fail(f"graph output {v!r} is not defined in this graph")

    def check_node(self, i: int, node):
        if not isinstance(node, Node):
            self.fail(f"node {i} is a {type(node).__name__}, not a Node")
        op = node.op
        if REGISTRY.get(getattr(op, "name", None)) is not op:
            self.fail(f"op {op!r} is not the registry's op of that name", i, node)
        if node.attrs:   # (most nodes have none)
            self.check_attrs(i, node)
        for x in node.inputs:
            if isinstance(x, Value):
                if x not in self.defined:
                    later = any(x in n.outputs for n in self.graph.nodes[i:]
                                if isinstance(n, Node))
                    problem = ("before it is defined (nodes are out of topological order)"
                               if later else "which is not defined in this graph")
                    self.fail(f"uses %{x.name} {problem}", i, node)
            elif not is_literal(x):
                self.fail(f"has an input of type {type(x).__name__}; inputs are Values or "
                          "Python scalars", i, node)
        self.check_types(i, node)
        for v in node.outputs:
            self.define(v, "output", i, node)
            if v.producer is not node:
                self.fail(f"output %{v.name}'s producer is another node", i, node)
        for label, sub in subgraphs(node.attrs) if node.attrs else ():
            _Checker(sub, f"{self.where}in @{label} of node {i} ({op.name}): ").run()

    def check_attrs(self, i: int, node):
        op = node.op
        unknown = sorted(set(node.attrs) - set(op.attrs))
        if unknown:
            self.fail(f"{op.name} has no attrs {unknown}; it takes {list(op.attrs)}", i, node)
        for key, val in node.attrs.items():
            try:
                check_attr(key, val)
            except GraphError as e:
                self.fail(str(e), i, node)

    def check_types(self, i: int, node):
        try:
            types = infer_types(node.op, node.inputs, node.attrs, self.rule_types)
        except Exception as e:   # any failure of the rule on these inputs is the finding
            self.fail(f"the shape rule of {node.op.name} fails on these inputs: "
                      f"{type(e).__name__}: {e}", i, node)
        if len(types) != len(node.outputs):
            self.fail(f"has {len(node.outputs)} outputs; {node.op.name} gives {len(types)}",
                      i, node)
        for v, t in zip(node.outputs, types):
            if tuple(v.shape) != t.shape or v.dtype != t.dtype:
                self.fail(f"output %{v.name} is typed {type_str(v.shape, v.dtype)} but the "
                          f"shape rule gives {type_str(t.shape, t.dtype)}", i, node)


def _safe_line(node) -> str:
    """The node's printed line, or a fallback when the node is too broken to print."""
    try:
        return format_node(node)
    except Exception:
        return f"<{type(node).__name__} {getattr(getattr(node, 'op', None), 'name', '?')}>"
