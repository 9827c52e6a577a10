"""Recognising a retrace that captured the same program as an earlier capture.

The guards are conservative: they look at facts that *may* change the traced program. The
commonest case where they fire and it does not change is an optimiser's first step: Adam
creates its moments and step counts on the first call (eager state tensors, which the graph
reads as inputs), so the second call's signature differs from the first's, yet it traces
the very same graph. Optimising and compiling it again would make the second step as slow
as the first.

:func:`capture_key` is a hashable summary of everything a compiled entry depends on: the
graph (each node's op, attrs, wiring and types; constants by their bytes; subgraphs
likewise), which tensors feed its inputs and in what role, what it writes back, how its
outputs are rebuilt, and the backward graph of a differentiable call. Two captures with
equal keys run the same compiled code on the same tensors, so the compiler reuses the
first one's. Tensors are keyed by identity (an entry holds its tensors, so an id is not
reused while the entry lives). Source locations are left out: a module called from two
lines of user code traces the same graph with other locations, and the code compiled for
the first one names its lines in error messages.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..graph import Graph
from ..graph.ir import Value


def capture_key(capture, backward=None, tensor_key=id) -> tuple:
    """The key of one capture (and its backward half, if any). ``tensor_key`` keys each
    tensor it binds or writes (by default its identity; a split call's pieces, traced at
    every call, key them by the role they play: capture/split.py)."""
    back = None
    if backward is not None:
        back = (graph_key(backward.graph), backward.num_saved, tuple(backward.diff_outputs),
                tuple((b.kind, tensor_key(b.tensor), b.index) for b in backward.diff_inputs),
                tuple(backward.grad_present),
                tuple((b.kind, tensor_key(b.tensor), b.index) for b in backward.state))
    return (graph_key(capture.graph),) + io_key(capture, tensor_key) + (back,)


def io_key(capture, tensor_key=id) -> tuple:
    """The part of :func:`capture_key` that is not a graph: which tensors feed the inputs,
    what is written back, how the outputs are rebuilt (a split call replayed on the same
    graph compares only this: capture/replay.py)."""
    bindings = tuple((b.kind, tensor_key(b.tensor), b.index) for b in capture.bindings)
    writebacks = tuple((kind, tensor_key(t)) for kind, t in capture.writebacks)
    cleared = tuple(tensor_key(t) for t in capture.grads_cleared)
    leaves = tuple(leaf if leaf == "value" else ("const", _freeze(leaf[1]))
                   for leaf in capture.out_leaves)
    return (bindings, writebacks, cleared, repr(capture.out_spec), leaves)


def graph_key(graph: Graph) -> tuple:
    """The structure of ``graph`` with values numbered by first appearance (their names
    do not matter), constants by content."""
    number: dict[Value, int] = {}

    def ref(x):
        if isinstance(x, Value):   # (a value this graph does not define: by identity)
            return ("v", number[x]) if x in number else ("outer", id(x))
        return _freeze(x)

    def define(v: Value) -> tuple:
        number[v] = len(number)
        return (v.shape, v.dtype)

    parts = [tuple(define(v) for v in graph.inputs)]
    parts.append(tuple(define(v) + (_array_key(a),) for v, a in graph.constants.items()))
    for node in graph.nodes:
        parts.append((node.op, tuple(ref(x) for x in node.inputs),
                      _freeze(node.attrs) if node.attrs else (),
                      tuple(define(v) for v in node.outputs)))
    parts.append(tuple(ref(v) for v in graph.outputs))
    return tuple(parts)


def _array_key(array: np.ndarray) -> tuple:
    return (array.dtype.str, array.shape, hashlib.sha1(array.tobytes()).hexdigest())


def _freeze(x):
    """A hashable, exact stand-in for an attr value or output constant."""
    if type(x) in (int, str) or x is None:   # (not bool: True == 1 would match an int)
        return x
    if isinstance(x, Graph):
        return ("graph", graph_key(x))
    if isinstance(x, np.ndarray):
        return ("array", _array_key(x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _freeze(v)) for k, v in sorted(x.items())))
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_freeze(v) for v in x))
    if isinstance(x, slice):
        return ("slice", _freeze(x.start), _freeze(x.stop), _freeze(x.step))
    if isinstance(x, float) and x != x:
        return ("nan",)      # (NaN != NaN would make the key differ from itself)
    return (type(x).__name__, repr(x))
