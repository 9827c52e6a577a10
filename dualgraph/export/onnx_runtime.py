"""ONNX nodes whose shapes, axes or counts are values computed when the model runs.

A Reshape whose target shape is a graph input, a TopK whose k is computed from one, a Range
up to ``T - 1``: the import rule of such a node needs a value that is known only when the
model runs. The node then becomes one ``by_value`` node (ops/dynamic.py) whose kernel runs
the node's import rule on the run-time arrays, every op of it computed at once on the
registry kernels, as the import computes known values when loading (:class:`RunTimeNode`).
Its results' types come from ONNX's own shape inference (:func:`inferred_types`): the rank
and dtype, the dims it proves (ints, and the model's symbolic dims such as the batch), and a
fresh symbolic dim for each size set by the values; later nodes are imported over those
dims, as over a dynamic batch, and the generated code reads them off the results.

A node gets no run-time form where ONNX can't infer its results' ranks, where it has
subgraphs (the trip count of a Loop with scan outputs, an If's condition that picks
branches of different types), and where its results are sequences: the model is then
imported per value of the graph inputs the value comes from (``onnx_import._Specialised``),
as it is when a later node can't work over the fresh dims (broadcasting one with another
symbolic dim). (A Loop without scan outputs is a while_loop that reads its trip count as
it runs.)
"""
from __future__ import annotations

import numpy as np

from ..graph.ir import HostFunction
from ..shapes import Sym


class RunTimeValue(Exception):
    """A converter needs a value that is computed at run time: ``names`` are the graph
    inputs it comes from (None when it comes from elsewhere), ``what`` the argument, and
    ``types`` the results' (shape, dtype)s where the converter knows them."""

    def __init__(self, names, what: str, types=None):
        super().__init__(what)
        self.names, self.what, self.types = names, what, types


class RunTimeNode(HostFunction):
    """The ``fn`` of a ``by_value`` node: an ONNX node's import rule run on the node's
    run-time arrays (``slots`` says which of its inputs they are; the known ones are in
    ``inputs``) by an importer ``eager`` that computes every op at once. Returns the results
    of the node's outputs at positions ``keep``."""

    def __init__(self, convert, eager, inputs: list, slots: list, attrs: dict, keep: list):
        self.convert, self.eager, self.inputs = convert, eager, inputs
        self.slots, self.attrs, self.keep = slots, attrs, keep

    def __call__(self, *arrays):
        xs = list(self.inputs)
        for k, a in zip(self.slots, arrays):
            xs[k] = np.asarray(a)
        outs = self.convert(self.eager, xs, self.attrs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(outs[k] for k in self.keep)

    def __repr__(self):
        return f"<{self.eager.where()} run on its inputs' values>"


def inferred_types(onnx, model) -> dict:
    """ONNX name -> TypeProto of each value of ``model``'s main graph, from ONNX's shape
    inference ({} where it fails: the nodes that need it are then imported per value)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:   # (a model the inference rejects: no run-time nodes then)
        return {}
    g = inferred.graph
    return {v.name: v.type for part in (g.value_info, g.output, g.input) for v in part}


def result_types(node, types: dict, dtype_of, dim_of, hint=None) -> list | None:
    """``[(shape, dtype)]`` of ``node``'s named outputs from the inferred ``types``: ints
    where ONNX proves them, ``dim_of(dim_param)`` for a symbolic one, ``dim_of(None)`` (a
    fresh dim) where unknown. ``hint`` (see :func:`hint`) gives shapes where ONNX gives
    none and dims where it gives unknown ones. None where a rank or dtype is unknown or a
    result is not a tensor."""
    out = []
    for k, name in enumerate(node.output):
        if not name:
            continue
        t = types.get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.elem_type:
            return None
        mine = hint[k] if hint is not None and k < len(hint) else None
        if t.tensor_type.HasField("shape"):
            onnx_dims = [int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
                         else d.dim_param if d.HasField("dim_param") else None
                         for d in t.tensor_type.shape.dim]
        elif mine is not None:
            onnx_dims = [None] * len(mine)
        else:
            return None
        if mine is not None and len(mine) == len(onnx_dims):   # (a dim known beats unk__3)
            onnx_dims = [m if m is not None and not isinstance(d, int) else d
                         for d, m in zip(onnx_dims, mine)]
        dims = [d if isinstance(d, (int, Sym)) else dim_of(d) for d in onnx_dims]
        out.append((tuple(dims), dtype_of(t.tensor_type.elem_type)))
    return out


def hint(node, xs, attrs) -> list | None:
    """The shapes of ``node``'s outputs as far as they follow from its data input's type
    (None for a dim its values set), for the op types whose results ONNX's inference leaves
    without a shape or without the dims they keep: a Reduce over run-time axes, a TopK of
    run-time k, a Slice or Split along known axes."""
    x, op = xs[0], node.op_type
    if getattr(x, "shape", None) is None:   # (none, or a sequence or an optional)
        return None
    shape = list(x.shape)
    if op.startswith("Reduce"):   # (axes of a known count: the rank the kernel checks)
        count = xs[1].shape[0] if len(xs) > 1 and xs[1] is not None else None
        if attrs.get("keepdims", 1):
            return [[None] * len(shape)]
        return [[None] * (len(shape) - count)] if isinstance(count, int) else None
    if op == "TopK" and -len(shape) <= attrs.get("axis", -1) < len(shape):
        shape[attrs.get("axis", -1)] = None
        return [shape, shape]
    if op == "Split" and -len(shape) <= attrs.get("axis", 0) < len(shape):
        shape[attrs.get("axis", 0)] = None
        return [shape] * len(node.output)
    if op == "Slice" and len(xs) > 3 and isinstance(xs[3], np.ndarray) \
            and xs[3].dtype != object:
        for a in xs[3].reshape(-1).tolist():
            if -len(shape) <= a < len(shape):
                shape[a] = None
        return [shape]
    return None


def by_value_shapes(types: list, made: set) -> tuple:
    """Per result, its dims as ``by_value``'s ``shapes`` attr holds them: the name (a
    string) of a fresh dim, one in ``made`` (a size the node's values set), else the dim
    (an int, or a symbolic dim bound before the node runs, which the kernel checks)."""
    return tuple(tuple(d.name if isinstance(d, Sym) and made.intersection(d.names) else d
                       for d in shape) for shape, _ in types)
