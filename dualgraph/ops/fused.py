"""The ``fused`` op: a group of elementwise ops (plus an optional trailing reduction) that
the ``fuse_elementwise`` pass replaced by one node.

The group is a closed subgraph held in the ``graph`` attr; the node has one input per
subgraph input and one output per subgraph output (``num_outputs=None``: as many as the
subgraph returns). This kernel runs the subgraph with the reference interpreter, which is
correct but not fast; the code generator compiles fused groups into single loops. Its
decomposition is the subgraph itself, its ops run one by one through dispatch (a
compiler-only member, such as a ``relu_backward``, by its own decomposition).
"""
from __future__ import annotations

from ..dispatch import apply
from ..graph.interpret import interpret
from ..graph.ir import type_str
from ..shapes import ShapedType, ShapeError
from .control import call_graph
from .opdef import defop

__all__: list = []   # internal: passes create fused nodes, users don't call them
METHODS: dict = {}


def _fused_kernel(*inputs, graph):
    return tuple(interpret(graph, *inputs))


def _infer_fused(*inputs, graph):
    if len(inputs) != len(graph.inputs):
        raise ShapeError(f"fused: the subgraph takes {len(graph.inputs)} inputs, got "
                         f"{len(inputs)}")
    for x, v in zip(inputs, graph.inputs):
        if tuple(x.shape) != tuple(v.shape) or x.dtype != v.dtype:
            raise ShapeError(f"fused: input {type_str(x.shape, x.dtype)} does not match the "
                             f"subgraph's input {v!r}")
    return tuple(ShapedType(v.shape, v.dtype) for v in graph.outputs)


def _ordinary(op, *inputs, **attrs):
    """``op`` applied, or where it is compiler-only its decomposition."""
    if op.compiler_only:
        return op.decomposition(*inputs, **attrs)
    return apply(op, *inputs, **attrs)


FUSED = defop("fused", _fused_kernel, _infer_fused, attrs=("graph",), num_outputs=None,
              compiler_only=True,
              decomposition=lambda *inputs, graph: call_graph(graph, *inputs, run=_ordinary),
              saves="", doc="a fused group of elementwise ops, as a subgraph")


def fused(graph, *inputs) -> tuple:
    """Run ``graph`` as one fused op on ``inputs`` (tensors); a tuple of its outputs."""
    return apply(FUSED, *inputs, graph=graph)
