"""Replaying a split function's previous call instead of building its graph again.

A function split at graph breaks (capture/split.py) runs its Python at every call: a
break's value (``loss.item()``) may steer it. Building the call's graph anew each time costs
more than that Python: every op's shape rule, value names and source line, then the keys
of the pieces and of the last piece, and the cut of the graph. A :class:`Tape` is the
record of a call whose pieces had settled: its graph (inputs in binding order, the
constants it made, the nodes up to the function's return), the pieces it ran at its breaks
and the compiled last piece it ran.

The next call runs its Python under a tracer that *replays* the tape
(``SplitTracer(tape=...)``): an op call whose op, inputs (the very Values) and attrs (equal,
type for type) are those of the tape's next node gets that node's outputs, and no node is
made; a tensor bound as an input must be the tape's next one (the same tensor, or the same
argument position or tensor made after a break, or state the call before made, with the
same shape and dtype); a constant must have the same bytes; a break whose piece is the
tape's next runs that piece's compiled code directly. A call that matched the whole tape,
with the same outputs, and the same bindings, writebacks and output structure by role,
runs the tape's compiled last piece.

The first difference (Python took another branch, a shape or a dtype changed, another
tensor was read) ends the replay (:meth:`SplitTracer.diverge`): the graph matched so far
becomes a graph of its own, sharing the tape's Values (the tensors Python holds keep
theirs), and the call goes on tracing as before. A replayed call is so always the call a
fresh trace would have built, at the cost of a comparison per op.
"""
from __future__ import annotations

import math

import numpy as np

from ..graph.ir import HostFunction, check_attr

MADE = "made_after_break"   # the name of an input made from a value computed after a break


class Tape:
    """The record of one split call, replayed by the next (see the module docstring).
    ``tracer``: the call's SplitTracer; ``cut``: the values the pieces computed that the
    last piece reads as inputs; ``last``: the last piece's graph; ``entry``: its compiled
    code; ``key``: the role key of the call's capture before the cut (split.py)."""

    def __init__(self, tracer, cut: list, last, entry, key, capture):
        self.graph = tracer.graph
        self.nodes = self.graph.nodes[:tracer.fn_nodes]
        self.outputs = self.graph.outputs
        # (per input: its facts, the tensor it must be (None: any in that role), its Value)
        self.inputs = [(facts, None if facts[0] == "arg" or facts[2] else b.tensor, b.value)
                       for facts, b in zip(tracer.input_facts, tracer.bindings)]
        self.made = [(v, self.graph.constants[v]) for v in tracer.made]
        self.ran = list(tracer.ran)
        self.cut, self.last, self.entry, self.key = cut, last, entry, key
        self.made_state(capture)

    def made_state(self, capture) -> None:
        """Note the state the latest call that matched (``capture``) made and kept
        (``history.append(loss.detach())``, ``self.last = h``): the next call may read
        those tensors where this one read the state the call before made."""
        self.kept = {id(t) for kind, t in capture.writebacks if kind == "new"}

    def input(self, k: int, tensor, facts: tuple):
        """The Value of the ``k``-th input when ``tensor`` with ``facts`` (kind, index,
        made after a break, shape, dtype) may be it; else None."""
        if k >= len(self.inputs):
            return None
        own, must_be, value = self.inputs[k]
        if own != facts or (must_be is not None and must_be is not tensor
                            and id(tensor) not in self.kept):
            return None
        return value

    def constant(self, k: int, array):
        """The Value of the ``k``-th constant made when ``array`` is its bytes; else None."""
        if k >= len(self.made):
            return None
        value, own = self.made[k]
        if (own.dtype != array.dtype or own.shape != array.shape
                or own.tobytes() != array.tobytes()):
            return None
        return value

    def node(self, k: int, op, inputs, attrs):
        """The ``k``-th node when it is ``op`` on the same ``inputs`` and ``attrs``; else
        None."""
        if k >= len(self.nodes):
            return None
        node = self.nodes[k]
        own = node.inputs
        if node.op is not op or len(own) != len(inputs):
            return None
        for new, old in zip(inputs, own):   # (mostly the very Values: no call)
            if new is not old and not same(new, old):
                return None
        own = node.attrs
        if len(own) != (len(attrs) if attrs else 0):
            return None
        if attrs:
            for name, new in attrs.items():
                old = own.get(name, same)   # (``same``: no such attr)
                if new is not old and not same(new, old):
                    return None
        return node

    def done(self, tracer) -> bool:
        """Whether ``tracer`` matched all of the tape."""
        return (tracer.pos == len(self.nodes) and len(tracer.bindings) == len(self.inputs)
                and len(tracer.made) == len(self.made) and len(tracer.ran) == len(self.ran))


def same(new, old) -> bool:
    """Whether ``new`` (an op input or attr as a call gives it) is ``old`` (as the tape's
    node holds it, normalised by ``check_attr``): Values by identity; numbers type for type
    (``1``, ``1.0`` and ``True`` differ; so do ``0.0`` and ``-0.0``; NaN is never the same);
    tuples and lists item by item; subgraphs and host functions by identity."""
    if new is old:
        return True
    kind = type(old)
    if type(new) is not kind:
        if hasattr(new, "producer") or isinstance(new, HostFunction):   # (a Value)
            return False
        try:
            new = check_attr("", new)
        except Exception:
            return False
        if type(new) is not kind:
            return False
    if kind is float:
        return new == old and math.copysign(1.0, new) == math.copysign(1.0, old)
    if kind is tuple or kind is list:
        return len(new) == len(old) and all(map(same, new, old))
    if kind is slice:
        return all(same(getattr(new, a), getattr(old, a)) for a in ("start", "stop", "step"))
    if kind in (int, bool, str) or isinstance(old, np.dtype):
        return new == old
    return new is old   # (Values, Syms, graphs, host functions, None: by identity)
