"""The ONNX emitter: the machinery that writes registry ops as ONNX nodes.

How an op becomes ONNX is part of its record, ``OpDef.onnx``, and the exporter reads
nothing else: an ONNX op type (``exp`` -> ``"Exp"``) for an op whose inputs and outputs map
one to one and that has no attributes, or an export function ``fn(e, node) -> [ONNX output
name per output]``, defined next to the op in its ``ops/`` family, that translates attrs
(``permute(perm=)`` -> ``Transpose(perm=)``), makes shape arguments into constant inputs, or
writes the op as several ONNX ops where ONNX has no single one (``log1p`` ->
``Log(Add(x, 1))``). An output the ONNX form cannot give is ``None`` (the exporter then fails
if the model uses it). An op whose ``onnx`` is None has no ONNX form.

Export functions build their nodes with this module's :class:`Emitter` only (``ops/`` is a
lower layer than ``export/`` and never imports it): ``e.op`` appends a node, ``e.input``
names an operand, ``e.const`` / ``e.ints`` / ``e.scalar`` make constants, ``e.reduce`` a
Reduce* node, ``e.subgraph`` and ``e.inline`` write control-flow bodies.

Python scalars in a node (``mul(x, 2.0)``) become constants of the dtype the node
computes in, and tensor inputs of another dtype are cast to it: ONNX has no type
promotion.
"""
from __future__ import annotations

import numpy as np

from ..graph.ir import UniqueNames, Value, is_literal
from ..shapes import Sym
from .errors import OnnxError


def exporter(op):
    """The export function of registry op ``op``, from its OpDef alone; None when it has no
    ONNX form."""
    if not isinstance(op.onnx, str):
        return op.onnx
    if op.attrs or op.num_outputs != 1:
        raise TypeError(f"{op.name}: onnx={op.onnx!r} names one ONNX op, which only an op "
                        "without attrs and with one output can; give it an export function")
    op_type = op.onnx
    logical = BOOL_FORMS.get(op_type)
    if logical is None:
        return lambda e, node: e.simple(op_type)
    return lambda e, node: e.simple(logical if node.outputs[0].dtype == np.bool_ else op_type)


# ONNX's arithmetic takes no bool tensors: on bools (``mask + mask``, torch's ``mask | mask``)
# these ops are the logical ones
BOOL_FORMS = {"Add": "Or", "Mul": "And", "Max": "Or", "Min": "And"}


class Emitter:
    """Collects the ONNX nodes and initializers of one graph, naming what it makes."""

    def __init__(self, onnx, opset: int, names: dict):
        self.onnx = onnx
        self.opset = opset
        self.names = names           # Value -> ONNX name
        self.nodes: list = []
        self.initializers: list = []
        self._taken = set(names.values())
        self._count = 0
        self.node_names = UniqueNames()
        self.node = None             # the dualgraph node being exported (for errors)
        self.dims: dict = {}         # symbolic dim name -> (ONNX input name, axis)

    def reserve(self, names) -> None:
        """Keep ``names`` (the model's output names) from being handed out by ``fresh``."""
        self._taken.update(names)

    def fresh(self, base: str) -> str:
        name = base
        while name in self._taken:
            self._count += 1
            name = f"{base}_{self._count}"
        self._taken.add(name)
        return name

    def const(self, array, base: str = "const") -> str:
        """A new initializer holding ``array``; returns its name."""
        name = self.fresh(base)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.asarray(array), name))
        return name

    def shape(self, dims) -> str:
        """A 1-d int64 tensor holding ``dims`` (ints and Syms): a constant, or, when a dim
        is symbolic, a Concat of the dims read from the model's inputs with Shape."""
        if not any(isinstance(d, Sym) for d in dims):
            return self.ints(dims)
        return self.op("Concat", [self._dim(d) for d in dims], axis=0)

    def _dim(self, d) -> str:
        """One dim as a 1-element int64 tensor (``3*B``: Mul of B's Shape slice and 3)."""
        if not isinstance(d, Sym):
            return self.ints([d])
        if d.is_sum:
            raise self.fail(f"its shape holds the symbolic dim {d}, a sum (a cat along a "
                            "dynamic axis, or a slice of one)", "keep that dim static (no "
                            "dynamic_axes on it)")
        parts = []
        for name in d.names:
            if name not in self.dims:
                raise self.fail(f"its shape holds the symbolic dim {d}, which is no input's "
                                "dim", "give the size from an input's shape")
            source, axis = self.dims[name]
            parts.append(self.op("Shape", [source], start=axis, end=axis + 1))
        if d.coef != 1:
            parts.append(self.ints([d.coef]))
        out = parts[0]
        for part in parts[1:]:
            out = self.op("Mul", [out, part])
        return out

    def ints(self, values) -> str:
        """A 1-d int64 constant (shapes, axes, starts, ...)."""
        return self.const(np.asarray(values, np.int64).reshape(-1), "ints")

    def op(self, op_type: str, inputs, outputs=1, **attrs):
        """Append one ONNX node; returns its output name (or the list of ``outputs`` names
        when ``outputs`` is a count above 1 or a list of names)."""
        if isinstance(outputs, int):
            names = [self.fresh(f"{op_type}_out") for _ in range(outputs)]
        else:
            names = list(outputs)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(self.onnx.helper.make_node(op_type, [i or "" for i in inputs],
                                                     names, **attrs))
        return names[0] if outputs == 1 else names

    # -- a node's operands ------------------------------------------------------------------
    def input(self, i: int, dtype=None) -> str | None:
        """Input ``i`` of the current node by its ONNX name (a Python scalar becomes a
        constant of ``dtype``; a Value of another dtype than ``dtype`` is cast to it)."""
        x = self.node.inputs[i]
        if x is None:
            return None
        if is_literal(x):
            return self.const(np.asarray(x, dtype=dtype or _literal_dtype(x)), "scalar")
        name = self.names.get(x)
        if name is None:
            raise self.fail(f"it reads {x.name}, made by {x.producer.op.name}, which ONNX "
                            "can't give (e.g. max_pool2d's indices)")
        if dtype is not None and np.dtype(dtype) != x.dtype:
            name = self.cast(name, dtype)
        return name

    def inputs(self, dtype=None) -> list:
        return [self.input(i, dtype) for i in range(len(self.node.inputs))]

    def common_dtype(self) -> np.dtype:
        """The dtype an elementwise node computes in: its output's, or for a comparison
        (bool out) its tensor inputs' promoted dtype."""
        out = self.node.outputs[0].dtype
        if out != np.bool_:
            return out
        values = [x.dtype for x in self.node.inputs if isinstance(x, Value)]
        return np.result_type(*values) if values else out

    def cast(self, name: str, dtype) -> str:
        return self.op("Cast", [name], to=self.onnx.helper.np_dtype_to_tensor_dtype(
            np.dtype(dtype)))

    # -- what export functions share ----------------------------------------------------------
    def simple(self, op_type: str) -> list:
        """The current node as one ONNX op of the same inputs, computed in its dtype (what
        ``onnx="Exp"`` means)."""
        return [self.op(op_type, self.inputs(self.common_dtype()))]

    def scalar(self, value, dtype, base: str = "const") -> str:
        """A 0-d constant ``value`` of ``dtype``."""
        return self.const(np.asarray(value, dtype), base)

    def outputs(self, op_type: str, inputs, n: int, **attrs) -> list:
        """One ONNX node with ``n`` outputs; returns their names as a list (even for one)."""
        return self.op(op_type, inputs, outputs=[self.fresh(f"{op_type}_out")
                                                 for _ in range(n)], **attrs)

    def float_only(self, op_type: str, for_ints: str) -> list:
        """An ONNX op defined on floats only; on integer input 0 the node's value is
        ``for_ints``: "same" (rounding keeps integers) or "false" (IsNaN, IsInf)."""
        x = self.input(0)
        if self.node.inputs[0].dtype.kind == "f":
            return [self.op(op_type, [x])]
        return [self.same(x) if for_ints == "same" else self.false_like(x)]

    def same(self, x: str) -> str:
        return self.op("Identity", [x])

    def false_like(self, x: str) -> str:
        """False in x's shape."""
        return self.op("ConstantOfShape", [self.op("Shape", [x])],
                       value=self.onnx.numpy_helper.from_array(np.zeros(1, np.bool_)))

    def axes(self) -> list:
        """The current node's ``dims`` attr (a reduction's, flip's) as a list; None means
        every dim."""
        dims = self.node.attrs.get("dims")
        if dims is None:
            return list(range(self.node.inputs[0].ndim))
        return [dims] if isinstance(dims, int) else list(dims)

    def reduce(self, op_type: str, x: str, axes, keepdim: bool) -> str:
        """One Reduce* node: axes an input from opset 18 (ReduceSum: 13), an attr before."""
        keep = int(bool(keepdim))
        if self.opset >= 18 or op_type == "ReduceSum":
            return self.op(op_type, [x, self.ints(axes)], keepdims=keep)
        return self.op(op_type, [x], axes=list(axes), keepdims=keep)

    def batched(self, make) -> list:
        """``make(x)`` (a pooling of input 0) on a (C, H, W) input too: ONNX pools need the
        batch dim, so one is added and removed around it."""
        x = self.input(0)
        if self.node.inputs[0].ndim == 4:
            return make(x)
        out = make(self.op("Unsqueeze", [x, self.ints([0])]))
        return [self.op("Squeeze", [o, self.ints([0])]) if o else None for o in out]

    def body_name(self, part: str) -> str:
        """The name of a subgraph of the current node (``scan_1.body``)."""
        first = self.node.outputs[0]
        return f"{self.names.get(first) or first.name}.{part}"

    # -- nodes and (sub)graphs ---------------------------------------------------------------
    def export_node(self, node, wanted: dict) -> None:
        """Append ``node``'s ONNX nodes, naming its outputs as the graph does (or as
        ``wanted``, the model's output names of some of its Values)."""
        export = exporter(node.op)
        outer, self.node = self.node, node   # (control flow exports its bodies' nodes)
        if export is None:
            raise self.fail("it has no ONNX form yet", "file an issue with the model, or "
                            "keep this part of the computation outside the exported function")
        start = len(self.nodes)
        made = export(self, node)
        mine = {o for n in self.nodes[start:] for o in n.output}
        for v, name in zip(node.outputs, made):
            if name is None:
                continue
            if name in mine:
                target = wanted.get(v) or self.fresh(v.name)
                _rename(self.nodes[start:], name, target)
                name = target
            self.names[v] = name
        # ONNX nodes are named after the value they make ("linear_1"), helpers after it too
        # ("linear_1.Transpose"); each carries the user's source line. (Nodes of a body
        # exported inline already have their own.)
        main = self.names.get(node.outputs[0], "")
        for n in self.nodes[start:]:
            if not n.name:
                n.name = self.node_names.fresh(main if main in n.output
                                               else f"{main}.{n.op_type}")
                n.doc_string = node.location or ""
        self.node = outer

    def inline(self, graph, input_names: list) -> list:
        """Export the nodes of ``graph`` (a control-flow body) here, its inputs bound to
        ``input_names``; returns the ONNX names of its outputs."""
        self.names.update(zip(graph.inputs, input_names))
        for v, array in graph.constants.items():
            self.names[v] = self.const(array, v.name)
        for node in graph.nodes:
            self.export_node(node, {})
        missing = [v for v in graph.outputs if v not in self.names]
        if missing:
            raise self.fail(f"its body returns {missing[0].name}, made by "
                            f"{missing[0].producer.op.name}, which ONNX can't give")
        return [self.names[v] for v in graph.outputs]

    def subgraph(self, name: str, formal: list, emit):
        """An ONNX subgraph (an If branch, a Loop or Scan body) as a GraphProto.

        ``formal`` lists its inputs as (base name, type); ``emit(sub, names)`` writes its
        nodes into ``sub``, an emitter of its own, given the inputs' names, and returns its
        outputs as (ONNX name, type). A subgraph reads the enclosing graphs' names freely,
        so a dualgraph body's inputs are bound to the names of the node's operands."""
        sub = Emitter(self.onnx, self.opset, {})
        # ONNX names are unique across a model's graphs; constants live in the main graph
        sub._taken, sub.node_names, sub.initializers = (self._taken, self.node_names,
                                                        self.initializers)
        sub.node, sub.dims = self.node, self.dims
        names = [sub.fresh(base) for base, _ in formal]
        outputs = emit(sub, names)
        made = {o for n in sub.nodes for o in n.output}
        infos = []
        for out, t in outputs:
            # an output must be made in the subgraph, once (not an input or outer name)
            if out not in made:
                out = sub.op("Identity", [out])
            made.discard(out)
            infos.append(value_info(self.onnx, out, t))
        for n in sub.nodes:   # (the helpers made here, not by a body's node)
            if not n.name:
                n.name = sub.node_names.fresh(f"{name}.{n.op_type}")
                n.doc_string = self.node.location or ""
        inputs = [value_info(self.onnx, n, t) for n, (_, t) in zip(names, formal)]
        return self.onnx.helper.make_graph(sub.nodes, name, inputs, infos)

    def fail(self, why: str, fix: str = "") -> OnnxError:
        node = self.node
        where = f" (at {node.location})" if node.location else ""
        return OnnxError(f"can't export {node.op.name}{where} to ONNX: {why}"
                         + (f". {fix}" if fix else ""))


def value_info(onnx, name: str, value, dims=None):
    """An ONNX ValueInfoProto of ``value``'s type (a Value or ShapedType); symbolic dims become
    ``dim_param``s, ``dims`` ({axis: name}) names others."""
    shape = [str(d) if isinstance(d, Sym) else int(d) for d in value.shape]
    for axis, dim in (dims or {}).items():
        shape[axis] = dim
    return onnx.helper.make_tensor_value_info(
        name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(value.dtype)), shape)


def _rename(nodes, old: str, new: str) -> None:
    for n in nodes:
        for names in (n.input, n.output):
            for k, name in enumerate(names):
                if name == old:
                    names[k] = new


def _literal_dtype(x):
    return np.bool_ if isinstance(x, bool) else np.int64 if isinstance(x, int) else np.float32
