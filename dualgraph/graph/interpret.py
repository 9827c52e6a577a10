"""The reference interpreter: runs a graph node by node with the registry's kernels.

It is the execution oracle: compiled code is tested against it, and checked mode passes an
``on_node`` callback to find the first node whose value diverges from eager execution.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..shapes import ShapeError, Sym
from .infer import bind_dim, format_binding, substitute
from .ir import Graph, Value, type_str
from .printer import format_node


def interpret(graph: Graph, *arrays, on_node: Callable | None = None) -> list[np.ndarray]:
    """Run ``graph`` on NumPy arrays; returns the output arrays in order.

    Inputs must match the graph's input types exactly (dtype, rank, static dims); a symbolic
    dim matches any size but must take the same size everywhere it appears, and attrs that
    mention it (a reshape to ``(B, 784)``) get that size. Each kernel's result is checked
    against its node's type. ``on_node(node, outputs)`` is called after
    each node with its output arrays.

    >>> g = Graph(); x = g.add_input(("B",), "float64"); g.set_outputs(g.add_node("exp", [x]))
    >>> interpret(g, np.zeros(2))
    [array([1., 1.])]
    """
    sizes: dict[str, int] = {}   # symbolic dim name (B) -> its size in this run
    env: dict[Value, np.ndarray] = dict(graph.constants)
    env.update(zip(graph.inputs, _check_inputs(graph, arrays, sizes)))
    last_use = _last_uses(graph)
    for i, node in enumerate(graph.nodes):
        args = [env[x] if isinstance(x, Value) else x for x in node.inputs]
        attrs = node.attrs
        if sizes and _mentions_sym(attrs.values()):
            attrs = {k: substitute(v, sizes) for k, v in attrs.items()}
        try:
            raw = node.op.kernel(*args, **attrs)
        except Exception as e:
            e.add_note(f"while interpreting node {i}: {format_node(node)}")
            raise
        outs = (raw,) if node.op.num_outputs == 1 else tuple(raw)
        outs = tuple(o if type(o) is np.ndarray else np.asarray(o) for o in outs)
        for v, out in zip(node.outputs, outs):
            _check_result(node, v, out, sizes)
            env[v] = out
        if on_node is not None:
            on_node(node, outs)
        for x in last_use.get(i, ()):
            del env[x]   # free intermediates early, as an executor would
    return [env[v] for v in graph.outputs]


def _check_inputs(graph: Graph, arrays, sizes: dict) -> list[np.ndarray]:
    if len(arrays) != len(graph.inputs):
        names = ", ".join(repr(v) for v in graph.inputs)
        raise TypeError(f"the graph takes {len(graph.inputs)} inputs ({names}), "
                        f"got {len(arrays)}")
    out = []
    for v, a in zip(graph.inputs, arrays):
        a = np.asarray(a)
        if a.dtype != v.dtype:
            raise TypeError(f"input {v!r} got an array of dtype {a.dtype}; cast it to "
                            f"{v.dtype} first")
        _bind_shape(v.shape, a.shape, sizes, lambda: f"input {v!r} got an array of shape "
                                                     f"{a.shape}")
        out.append(a)
    return out


def _bind_shape(shape, actual, sizes: dict, what: Callable) -> None:
    """Check ``actual`` against ``shape``, binding symbolic dims (by name) in ``sizes``."""
    if len(shape) != len(actual):
        raise ShapeError(f"{what()}, which has {len(actual)} dims, not {len(shape)}")
    for d, n in zip(shape, actual):
        if isinstance(d, Sym):
            if not bind_dim(d, n, sizes):
                raise ShapeError(f"{what()}, but its dim {d} cannot be {n} when "
                                 f"{format_binding(sizes)} (a symbolic dim has one size "
                                 "per run)")
        elif d != n:
            raise ShapeError(f"{what()}, whose dim {d} is {n}")


def _check_result(node, v: Value, out: np.ndarray, sizes: dict) -> None:
    """A kernel must return exactly the type its shape rule promised."""
    def what():
        return (f"{node.op.name}'s kernel returned {type_str(out.shape, out.dtype)} for "
                f"{v!r} in `{format_node(node)}`")
    if out.dtype != v.dtype:
        raise TypeError(what())
    _bind_shape(v.shape, out.shape, sizes, what)


def _mentions_sym(vals) -> bool:
    return any(isinstance(v, Sym) or isinstance(v, (tuple, list)) and _mentions_sym(v)
               for v in vals)


def _last_uses(graph: Graph) -> dict[int, list[Value]]:
    """node index -> the intermediate values last read by that node (outputs are kept)."""
    last = {}
    for i, node in enumerate(graph.nodes):
        for x in node.inputs:
            if isinstance(x, Value):
                last[x] = i
    keep = set(graph.outputs) | set(graph.inputs) | set(graph.constants)
    by_node: dict[int, list[Value]] = {}
    for v, i in last.items():
        if v not in keep:
            by_node.setdefault(i, []).append(v)
    return by_node
