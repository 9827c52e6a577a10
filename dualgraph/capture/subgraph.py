"""Cutting graphs: a new graph from some of another's nodes (pruning, fwd/bwd splits)."""
from __future__ import annotations

from ..graph import Graph
from ..graph.ir import Value


def needed_nodes(graph: Graph, outputs) -> list:
    """The nodes of ``graph`` that ``outputs`` depend on, in order."""
    needed = set(outputs)
    keep = []
    for node in reversed(graph.nodes):
        if any(v in needed for v in node.outputs):
            keep.append(node)
            needed.update(x for x in node.inputs if isinstance(x, Value))
    keep.reverse()
    return keep


def copy_nodes(source: Graph, inputs, nodes, outputs, env=None) -> Graph:
    """A new graph with the given ``inputs`` (Values of ``source``, in order), a copy of
    ``nodes`` and ``outputs``; the constants they read are copied in. Names are kept.
    ``env``: a dict to fill with each Value of ``source`` copied -> its copy."""
    g = Graph()
    env = {} if env is None else env
    env.update((v, g.add_input(v.shape, v.dtype, name=v.name)) for v in inputs)

    def get(v):
        if not isinstance(v, Value):
            return v
        if v not in env:
            if v not in source.constants:
                raise ValueError(f"{v!r} is neither an input nor produced by the nodes kept")
            env[v] = g.add_constant(source.constants[v], name=v.name)
        return env[v]
    for node in nodes:   # (copy_node: inputs of the same types keep the output types)
        outs = g.copy_node(node, [get(x) for x in node.inputs],
                           names=[v.name for v in node.outputs])
        env.update(zip(node.outputs, outs))
    g.set_outputs([get(v) for v in outputs])
    return g
