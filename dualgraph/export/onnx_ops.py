"""How each registry op becomes ONNX nodes: the :class:`Emitter` and the ``EXPORTERS`` table.

An op's ``OpDef.onnx`` names the ONNX op it maps to. An op whose inputs and outputs map
one to one and that has no attributes needs nothing more (``exp`` -> ``Exp``); every other
exportable op has a small function here, ``fn(e, node) -> [ONNX output name per output]``,
that translates its attrs (``permute(perm=)`` -> ``Transpose(perm=)``), makes shape
arguments into constant inputs, or writes it as several ONNX ops where ONNX has no single
one (``log1p`` -> ``Log(Add(x, 1))``). An output the ONNX form cannot give is ``None``
(the exporter then fails if the model uses it).

Python scalars in a node (``mul(x, 2.0)``) become constants of the dtype the node
computes in, and tensor inputs of another dtype are cast to it: ONNX has no type
promotion.
"""
from __future__ import annotations

import numpy as np

from ..graph.ir import UniqueNames, Value, is_literal
from ..ops.shape import slice_key
from ..shapes import ShapedType, Sym
from .errors import OnnxError

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


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
        sub.node = self.node
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


# -- elementwise ---------------------------------------------------------------------------
def simple(op_type: str):
    """The op maps to one ONNX op of the same inputs, computed in the node's dtype."""
    def export(e, node):
        return [e.op(op_type, e.inputs(e.common_dtype()))]
    return export


def _negated(op_type: str):
    def export(e, node):
        return [e.op("Not", [e.op(op_type, e.inputs(e.common_dtype()))])]
    return export


def _bitwise(bool_type: str, int_type: str):
    def export(e, node):
        dtype = e.common_dtype()
        return [e.op(bool_type if dtype == np.bool_ else int_type, e.inputs(dtype))]
    return export


def _where(e, node):
    dtype = node.outputs[0].dtype
    return [e.op("Where", [e.input(0, np.bool_), e.input(1, dtype), e.input(2, dtype)])]


def _one(e, dtype) -> str:
    return e.const(np.ones((), dtype), "one")


def _log1p(e, node):
    dtype = node.outputs[0].dtype
    x = e.input(0, dtype)
    return [e.op("Log", [e.op("Add", [x, _one(e, dtype)])])]


def _expm1(e, node):
    dtype = node.outputs[0].dtype
    return [e.op("Sub", [e.op("Exp", [e.input(0, dtype)]), _one(e, dtype)])]


def _float_only(op_type: str, for_ints):
    """An ONNX op defined on floats only; ``for_ints(e, x)`` is its value on integers
    (rounding keeps them, IsNaN is false)."""
    def export(e, node):
        x = e.input(0)
        if node.inputs[0].dtype.kind == "f":
            return [e.op(op_type, [x])]
        return [for_ints(e, x)]
    return export


def _same(e, x):
    return e.op("Identity", [x])


def _false(e, x):
    return e.op("ConstantOfShape", [e.op("Shape", [x])],
                value=e.onnx.numpy_helper.from_array(np.zeros(1, np.bool_)))


def _sign(e, node):
    """dualgraph's sign (as torch's) is 0 at NaN; onnxruntime's Sign gives NaN."""
    x = e.input(0)
    if node.inputs[0].dtype.kind != "f":
        return [e.op("Sign", [x])]
    zero = e.const(np.zeros((), node.inputs[0].dtype), "zero")
    return [e.op("Where", [e.op("IsNaN", [x]), zero, e.op("Sign", [x])])]


def _trunc(e, node):
    x = e.input(0)
    if node.inputs[0].dtype.kind != "f":
        return [_same(e, x)]
    return [e.op("Mul", [e.op("Sign", [x]), e.op("Floor", [e.op("Abs", [x])])])]


def _isfinite(e, node):
    x = e.input(0)
    if node.inputs[0].dtype.kind != "f":   # integers are always finite
        return [e.op("Not", [_false(e, x)])]
    return [e.op("Not", [e.op("Or", [e.op("IsNaN", [x]), e.op("IsInf", [x])])])]


def _round(e, node):
    """Round half to even; with ``decimals``, of x * 10^decimals (as NumPy computes it)."""
    x, decimals = e.input(0), node.attrs.get("decimals", 0)
    if node.inputs[0].dtype.kind != "f":
        return [_same(e, x)]
    if not decimals:
        return [e.op("Round", [x])]
    scale = e.const(np.asarray(10.0 ** decimals, node.inputs[0].dtype), "scale")
    return [e.op("Div", [e.op("Round", [e.op("Mul", [x, scale])]), scale])]


def _fmod(e, node):
    dtype = e.common_dtype()
    return [e.op("Mod", e.inputs(dtype), fmod=1)]


def _remainder(e, node):
    """Python's modulo (the sign of the divisor): ONNX Mod with fmod=0 for ints; for
    floats x - floor(x / y) * y, as NumPy computes it."""
    dtype = e.common_dtype()
    x, y = e.inputs(dtype)
    if dtype.kind != "f":
        return [e.op("Mod", [x, y], fmod=0)]
    return [e.op("Sub", [x, e.op("Mul", [e.op("Floor", [e.op("Div", [x, y])]), y])])]


def _floor_divide(e, node):
    dtype = e.common_dtype()
    x, y = e.inputs(dtype)
    if dtype.kind != "f":   # Div truncates; x - x mod y (mod with the divisor's sign)
        return [e.op("Div", [e.op("Sub", [x, e.op("Mod", [x, y], fmod=0)]), y])]
    return [e.op("Floor", [e.op("Div", [x, y])])]


def _elu(e, node):
    return [e.op("Elu", [e.input(0)], alpha=float(node.attrs["alpha"]))]


def _softplus(e, node):
    """torch's softplus(x, beta, threshold): log(1 + exp(beta x)) / beta, and x itself
    where beta x > threshold."""
    dtype = node.outputs[0].dtype
    x = e.input(0)
    beta, threshold = node.attrs["beta"], node.attrs["threshold"]
    scaled = x if beta == 1 else e.op("Mul", [x, e.const(np.asarray(beta, dtype))])
    soft = e.op("Softplus", [scaled])
    if beta != 1:
        soft = e.op("Div", [soft, e.const(np.asarray(beta, dtype))])
    linear = e.op("Greater", [scaled, e.const(np.asarray(threshold, dtype))])
    return [e.op("Where", [linear, x, soft])]


def _gelu(approximate: str):
    def export(e, node):
        x = e.input(0)
        if e.opset >= 20:
            return [e.op("Gelu", [x], approximate=approximate)]
        dtype = node.outputs[0].dtype
        c = lambda v: e.const(np.asarray(v, dtype))   # noqa: E731
        if approximate == "none":   # x/2 (1 + erf(x / sqrt 2))
            inner = e.op("Erf", [e.op("Mul", [x, c(1 / np.sqrt(2))])])
        else:                       # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            cube = e.op("Mul", [e.op("Mul", [x, x]), x])
            poly = e.op("Add", [x, e.op("Mul", [cube, c(0.044715)])])
            inner = e.op("Tanh", [e.op("Mul", [poly, c(np.sqrt(2 / np.pi))])])
        half = e.op("Mul", [x, c(0.5)])
        return [e.op("Mul", [half, e.op("Add", [inner, c(1.0)])])]
    return export


def _cast(e, node):
    return [e.cast(e.input(0), node.attrs["dtype"])]


def _clone(e, node):
    return [e.op("Identity", [e.input(0)])]


# -- linear algebra ------------------------------------------------------------------------
def _matmul(e, node):
    return [e.op("MatMul", e.inputs(node.outputs[0].dtype))]


def _linear(e, node):
    """x @ w.T + b: one Gemm for a 2-d x, else MatMul with the transposed weight."""
    x, w = e.input(0), e.input(1)
    b = e.input(2) if len(node.inputs) > 2 else None
    if node.inputs[0].ndim == 2 and node.inputs[1].ndim == 2:
        return [e.op("Gemm", [x, w] + ([b] if b else []), transB=1)]
    y = e.op("MatMul", [x, e.op("Transpose", [w])])
    return [e.op("Add", [y, b]) if b else y]


def _einsum(e, node):
    return [e.op("Einsum", e.inputs(), equation=node.attrs["equation"])]


# -- shapes --------------------------------------------------------------------------------
def _reshape(e, node):
    """A traced reshape's target shape may hold symbolic dims: a dim equal to the input's
    at the same position becomes ONNX's 0 ("copy"), one other becomes -1."""
    x = node.inputs[0]
    target = []
    for k, d in enumerate(node.attrs["shape"]):
        if isinstance(d, Sym) or not isinstance(d, (int, np.integer)):
            d = 0 if k < x.ndim and x.shape[k] == d else -1
        target.append(int(d))
    if target.count(-1) > 1:
        raise e.fail(f"the target shape {node.attrs['shape']} has several dims that depend "
                     f"on the input shape {x.shape}",
                     "keep those dims static (no dynamic_axes on them)")
    return [e.op("Reshape", [e.input(0), e.ints(target)])]


def _permute(e, node):
    return [e.op("Transpose", [e.input(0)], perm=list(node.attrs["perm"]))]


def _expand(e, node):
    """ONNX's Expand broadcasts: a symbolic target dim equal to the input's becomes 1."""
    x, shape = node.inputs[0], node.attrs["shape"]
    lead = len(shape) - x.ndim
    target = []
    for k, d in enumerate(shape):
        if not isinstance(d, (int, np.integer)) or d == -1:
            if k < lead or x.shape[k - lead] != d and d != -1:
                raise e.fail(f"the symbolic target dim {d} is not the input's",
                             "keep that dim static")
            d = 1
        target.append(int(d))
    return [e.op("Expand", [e.input(0), e.ints(target)])]


def _slice(e, node):
    bounds = []   # (start, stop, axis, step) per sliced dim
    for axis, s in enumerate(node.attrs["index"]):
        if s is None:
            continue
        start, stop, step = (tuple(s) + (None, None, None))[:3]
        if any(b is not None and not isinstance(b, (int, np.integer)) for b in s):
            raise e.fail(f"the slice {start}:{stop}:{step} of dim {axis} depends on a "
                         "dynamic dim", "keep that dim static (no dynamic_axes on it)")
        step = 1 if step is None else step
        if start is None:
            start = 0 if step > 0 else INT64_MAX
        if stop is None:
            stop = INT64_MAX if step > 0 else INT64_MIN
        bounds.append((start, stop, axis, step))
    if not bounds:
        return [e.op("Identity", [e.input(0)])]
    return [e.op("Slice", [e.input(0)] + [e.ints(column) for column in zip(*bounds)])]


def _slice_update(e, node):
    """A copy of x with the block x[index] replaced by v: ScatterND on the positions of the
    block's elements, listed here as a constant (the slice is static), in v's order."""
    x, index = node.inputs[0], node.attrs["index"]
    if any(not isinstance(d, int) for d in x.shape):
        raise e.fail(f"a slice update of a tensor of symbolic shape {tuple(x.shape)}",
                     "keep its dims static (no dynamic_axes on it)")
    block = np.indices(x.shape, np.int64)[(slice(None),) + slice_key(index)]   # ndim, block
    positions = e.const(np.moveaxis(block, 0, -1), "block")
    return [e.op("ScatterND", [e.input(0), positions, e.input(1, x.dtype)])]


def _flip(e, node):
    """Reversed dims: a Slice with step -1 over each."""
    dims = _axes(node)
    if not dims:
        return [e.op("Identity", [e.input(0)])]
    return [e.op("Slice", [e.input(0), e.ints([-1] * len(dims)),
                           e.ints([INT64_MIN] * len(dims)), e.ints(dims),
                           e.ints([-1] * len(dims))])]


def _cat(e, node):
    return [e.op("Concat", e.inputs(node.outputs[0].dtype), axis=node.attrs["dim"])]


def _full_like(e, node):
    value = np.asarray([node.attrs["fill_value"]], dtype=node.attrs["dtype"])
    shape = e.op("Shape", [e.input(0)])
    return [e.op("ConstantOfShape", [shape], value=e.onnx.numpy_helper.from_array(value))]


def _trilu(e, node):
    k = e.const(np.asarray(node.attrs["diagonal"], np.int64), "k")
    return [e.op("Trilu", [e.input(0), k], upper=int(bool(node.attrs["upper"])))]


def _indexed_first(e, node, x_input: int, first_index: int):
    """For x[..., i0, ..., i1, ...] (x is node input ``x_input``, the index tensors the
    inputs from ``first_index`` on): x with its indexed dims moved first, the index as one
    tensor (the index tensors broadcast and stacked on a last axis, as GatherND and
    ScatterND take it), the broadcast index shape, and x's permutation."""
    x, dims = node.inputs[x_input], tuple(node.attrs["dims"])
    perm = list(dims) + [d for d in range(x.ndim) if d not in dims]
    moved = e.input(x_input)
    if perm != list(range(x.ndim)):
        moved = e.op("Transpose", [moved], perm=perm)
    shape = np.broadcast_shapes(*(i.shape for i in node.inputs[first_index:]))
    target = e.ints(shape)
    columns = [e.op("Unsqueeze", [e.op("Expand", [e.input(k, np.int64), target]),
                                  e.ints([-1])]) for k in range(first_index, len(node.inputs))]
    return moved, e.op("Concat", columns, axis=-1), shape, perm


def _numpy_places_index_dims(dims: tuple) -> int:
    """Where NumPy puts the index dims in x[..., i0, ..., i1, ...]: in place of the
    indexed dims when these are adjacent (after the dims before them), else first."""
    adjacent = dims == tuple(range(dims[0], dims[0] + len(dims)))
    return dims[0] if adjacent else 0


def _index(e, node):
    """x[..., i0, ..., i1, ...]: one index tensor is a Gather; several are one GatherND on
    x with the indexed dims moved first, the result's index dims then put where NumPy puts
    them."""
    x, dims = node.inputs[0], tuple(node.attrs["dims"])
    if len(dims) == 1:
        return [e.op("Gather", [e.input(0), e.input(1)], axis=dims[0])]
    moved, index, shape, _ = _indexed_first(e, node, 0, 1)
    picked = e.op("GatherND", [moved, index])
    lead, b, rest = _numpy_places_index_dims(dims), len(shape), x.ndim - len(dims)
    if not lead:
        return [picked]
    return [e.op("Transpose", [picked], perm=list(range(b, b + lead)) + list(range(b)) +
                 list(range(b + lead, b + rest)))]


def _index_put(e, node):
    """A copy of x with x[..., i0, ..., i1, ...] set to v (``accumulate``: increased by it,
    ScatterND's reduction "add"): one ScatterND on x with the indexed dims moved first, v's
    index dims moved first too (from where NumPy puts them), then x's dims put back.
    (Repeated indices without ``accumulate`` are undefined in ONNX; dualgraph keeps the
    last value.)"""
    x, dims = node.inputs[0], tuple(node.attrs["dims"])
    moved, index, shape, perm = _indexed_first(e, node, 0, 2)
    updates = e.input(1, x.dtype)
    lead, b, rest = _numpy_places_index_dims(dims), len(shape), x.ndim - len(dims)
    if lead:   # v: (lead dims, index dims, trailing dims) -> index dims first
        updates = e.op("Transpose", [updates], perm=list(range(lead, lead + b)) +
                       list(range(lead)) + list(range(lead + b, b + rest)))
    out = e.op("ScatterND", [moved, index, updates],
               reduction="add" if node.attrs["accumulate"] else None)
    if perm != list(range(x.ndim)):
        out = e.op("Transpose", [out], perm=list(np.argsort(perm)))
    return [out]


# -- reductions ----------------------------------------------------------------------------
def _axes(node):
    """A reduction's (or flip's) ``dims`` as a list; None means every dim."""
    dims = node.attrs.get("dims")
    if dims is None:
        return list(range(node.inputs[0].ndim))
    return [dims] if isinstance(dims, int) else list(dims)


def reduce_op(e, op_type: str, x: str, axes, keepdim: bool) -> str:
    """One Reduce* node: axes an input from opset 18 (ReduceSum: 13), an attr before."""
    keep = int(bool(keepdim))
    if e.opset >= 18 or op_type == "ReduceSum":
        return e.op(op_type, [x, e.ints(axes)], keepdims=keep)
    return e.op(op_type, [x], axes=list(axes), keepdims=keep)


def _count(e, node):
    """How many elements a reduction over ``dims`` of x combines (traced where a dim is
    symbolic): the product of those dims of x's shape, as the node's float dtype."""
    sizes = e.op("Gather", [e.op("Shape", [e.input(0)]), e.ints(node.attrs["dims"])])
    return [e.cast(reduce_op(e, "ReduceProd", sizes, [0], False), node.outputs[0].dtype)]


def _reduce(op_type: str):
    def export(e, node):
        x = e.input(0, node.outputs[0].dtype)   # (sum and prod of ints: int64)
        return [reduce_op(e, op_type, x, _axes(node), node.attrs["keepdim"])]
    return export


def _logical_reduce(op_type: str):
    """any / all: ReduceMax / ReduceMin of the truth values as int32 (bool reductions
    arrive in opset 20)."""
    def export(e, node):
        truth = e.cast(e.op("Not", [e.op("Equal", [e.input(0), e.const(
            np.zeros((), node.inputs[0].dtype), "zero")])]), np.int32)
        reduced = reduce_op(e, op_type, truth, _axes(node), node.attrs["keepdim"])
        return [e.cast(reduced, np.bool_)]
    return export


def _norm(e, node):
    """ReduceL1 / ReduceL2; other orders from their definitions (max |x|, min |x|, the
    count of nonzeros, (sum |x|^p)^(1/p))."""
    x, p, axes, keep = e.input(0), node.attrs["ord"], _axes(node), node.attrs["keepdim"]
    dtype = node.outputs[0].dtype
    if p in (1, 2):
        return [reduce_op(e, {1: "ReduceL1", 2: "ReduceL2"}[p], x, axes, keep)]
    size = e.op("Abs", [x])
    if p in (np.inf, -np.inf):
        return [reduce_op(e, "ReduceMax" if p > 0 else "ReduceMin", size, axes, keep)]
    if p == 0:
        nonzero = e.cast(e.op("Not", [e.op("Equal", [x, e.const(np.zeros((), dtype))])]), dtype)
        return [reduce_op(e, "ReduceSum", nonzero, axes, keep)]
    powered = e.op("Pow", [size, e.const(np.asarray(p, dtype), "p")])
    total = reduce_op(e, "ReduceSum", powered, axes, keep)
    return [e.op("Pow", [total, e.const(np.asarray(1 / p, dtype), "inv_p")])]


def _arg(op_type: str):
    def export(e, node):
        x, dim, keep = e.input(0), node.attrs["dim"], node.attrs["keepdim"]
        if dim is not None:
            return [e.op(op_type, [x], axis=dim, keepdims=int(bool(keep)))]
        flat = e.op(op_type, [e.op("Reshape", [x, e.ints([-1])])], axis=0, keepdims=0)
        if keep:   # a 1 per dim of x
            return [e.op("Reshape", [flat, e.ints([1] * node.inputs[0].ndim)])]
        return [flat]
    return export


def _reduce_with_index(reduce_type: str, arg_type: str):
    """max/min over a dim: the values and their indices."""
    def export(e, node):
        x, dim, keep = e.input(0), node.attrs["dim"], node.attrs["keepdim"]
        return [reduce_op(e, reduce_type, x, [dim], keep),
                e.op(arg_type, [x], axis=dim, keepdims=int(bool(keep)))]
    return export


def _softmax(op_type: str):
    def export(e, node):
        return [e.op(op_type, [e.input(0)], axis=node.attrs["dim"])]
    return export


def _argsort(e, node):
    """argsort -> the indices of a TopK over the whole dim, sorted: among equal values
    ONNX's TopK puts the lower index first, as dualgraph's stable sort does (NaN's place
    is unspecified in ONNX; dualgraph counts NaN as largest)."""
    x, dim = node.inputs[0], node.attrs["dim"]
    size = x.shape[dim]
    k = (e.ints([size]) if isinstance(size, int)
         else e.op("Gather", [e.op("Shape", [e.input(0)]), e.ints([dim])]))
    _, indices = _outputs(e, "TopK", [e.input(0), k], 2, axis=dim,
                          largest=int(bool(node.attrs["descending"])), sorted=1)
    return [indices]


def _cumprod(e, node):
    """cumprod -> a Scan along the dim carrying the running product (ONNX has no CumProd):
    the same multiplications in the same order as the kernel's, from a carry of ones, in
    float32 for half-precision inputs as the kernel computes them."""
    x, dim, out = node.inputs[0], node.attrs["dim"], node.outputs[0].dtype
    if any(not isinstance(d, int) for d in x.shape):
        raise e.fail(f"cumprod of symbolic shape {tuple(x.shape)}", "export it static")
    wide = np.dtype(np.float32) if out.kind in "fV" and out.itemsize < 4 else out   # (V: bf16)
    row = ShapedType(tuple(d for k, d in enumerate(x.shape) if k != dim), wide)

    def body(sub, formal):
        product = sub.op("Mul", formal)
        return [(product, row), (product, row)]
    proto = e.subgraph(_body_name(e, node, "body"), [("product", row), ("x", row)], body)
    start = e.const(np.ones(row.shape, wide), "ones")
    _, products = _outputs(e, "Scan", [start, e.input(0, wide)], 2, body=proto,
                           num_scan_inputs=1, scan_input_axes=[dim], scan_output_axes=[dim])
    return [products if wide == out else e.cast(products, out)]


def _median(e, node):
    """median -> the last of the (n - 1) // 2 + 1 smallest, by TopK (lower index first
    among equal values, the index dualgraph's lower median takes)."""
    x, dim, keep = node.inputs[0], node.attrs["dim"], node.attrs["keepdim"]
    size = x.shape[dim]
    if not isinstance(size, int):
        raise e.fail(f"the median's dim has a symbolic size ({size})",
                     "export with that dim static")
    k = (size - 1) // 2 + 1
    picked = _outputs(e, "TopK", [e.input(0), e.ints([k])], 2, axis=dim, largest=0,
                      sorted=1)
    outs = []
    for t in picked:
        last = e.op("Slice", [t, e.ints([k - 1]), e.ints([k]), e.ints([dim])])
        outs.append(last if keep else e.op("Squeeze", [last, e.ints([dim])]))
    return outs


def _cumsum(e, node):
    x = e.input(0, node.outputs[0].dtype)
    axis = e.const(np.asarray(node.attrs["dim"], np.int64), "axis")
    return [e.op("CumSum", [x, axis], reverse=int(bool(node.attrs["reverse"])))]


def _cross_entropy(e, node):
    """cross_entropy -> SoftmaxCrossEntropyLoss, the same loss (a 'mean' divides by the
    targets not ignored); labels must be int32 or int64 there."""
    labels = e.input(1) if node.inputs[1].dtype in (np.int32, np.int64) else e.input(1, np.int64)
    return [e.op("SoftmaxCrossEntropyLoss", [e.input(0), labels],
                 ignore_index=node.attrs["ignore_index"], reduction=node.attrs["reduction"])]


def _layer_norm(e, node):
    """LayerNormalization over the last ``n_dims`` dims. ONNX needs a scale: a missing
    weight is a constant of ones; a missing bias is a constant of zeros, since onnxruntime
    1.32 crashes (segfault) on a LayerNormalization without one."""
    x = node.inputs[0]
    n = node.attrs["n_dims"]
    params = x.shape[x.ndim - n:]
    scale = e.input(1) or e.const(np.ones(params, x.dtype), "ones")
    bias = (e.input(2) if len(node.inputs) > 2 else None) or e.const(np.zeros(params, x.dtype),
                                                                      "zeros")
    return e.op("LayerNormalization", [e.input(0), scale, bias], outputs=3, axis=-n,
                epsilon=float(node.attrs["eps"]))


def _lstm_cell(e, node):
    """One LSTM step from its input gates ``xg``: gates = xg + h W_hh^T + b, split as
    torch orders them (input, forget, cell, output). The third output, the activated
    gates the backward reads, has no use in an inference model."""
    h, c = e.input(1), e.input(2)
    gates = e.op("Add", [e.input(0), e.op("MatMul", [h, e.op("Transpose", [e.input(3)])])])
    if len(node.inputs) > 4 and node.inputs[4] is not None:
        gates = e.op("Add", [gates, e.input(4)])
    i, f, g, o = e.op("Split", [gates], outputs=4, axis=-1, num_outputs=4)
    c_new = e.op("Add", [e.op("Mul", [e.op("Sigmoid", [f]), c]),
                         e.op("Mul", [e.op("Sigmoid", [i]), e.op("Tanh", [g])])])
    h_new = e.op("Mul", [e.op("Sigmoid", [o]), e.op("Tanh", [c_new])])
    return [h_new, c_new, None]


# -- convolution and pooling ---------------------------------------------------------------
def _conv2d(e, node):
    (top, bottom), (left, right) = node.attrs["padding"]
    inputs = [e.input(0), e.input(1)] + ([e.input(2)] if len(node.inputs) > 2 else [])
    return [e.op("Conv", [i for i in inputs if i], strides=list(node.attrs["stride"]),
                 pads=[top, left, bottom, right], dilations=list(node.attrs["dilation"]),
                 group=node.attrs["groups"])]


def _conv2d_input_grad(e, node):
    """A conv's gradient with respect to its input (what ConvTranspose2d computes):
    ConvTranspose with the conv's weight as it is, and the output padding that makes the
    result ``input_size``."""
    a, g, w = node.attrs, node.inputs[0], node.inputs[1]
    (top, bottom), (left, right) = a["padding"]
    pads = ((top, bottom), (left, right))
    extra = [size - ((n - 1) * s + d * (k - 1) + 1 - lo - hi)
             for size, n, s, d, k, (lo, hi) in zip(a["input_size"], g.shape[2:], a["stride"],
                                                   a["dilation"], w.shape[2:], pads)]
    return [e.op("ConvTranspose", [e.input(0), e.input(1)], strides=list(a["stride"]),
                 pads=[top, left, bottom, right], dilations=list(a["dilation"]),
                 group=a["groups"], output_padding=extra if any(extra) else None)]


def _batched(e, node, make):
    """Pooling of a (C, H, W) input: ONNX pools need the batch dim."""
    x = e.input(0)
    if node.inputs[0].ndim == 4:
        return make(x)
    out = make(e.op("Unsqueeze", [x, e.ints([0])]))
    return [e.op("Squeeze", [o, e.ints([0])]) if o else None for o in out]


def _max_pool2d(e, node):
    a = node.attrs
    ph, pw = a["padding"]
    h, w = node.inputs[0].shape[-2:]

    def pool(x):
        values, indices = e.op(
            "MaxPool", [x], outputs=2, kernel_shape=list(a["kernel_size"]),
            strides=list(a["stride"]), pads=[ph, pw, ph, pw], dilations=list(a["dilation"]),
            ceil_mode=int(a["ceil_mode"]))
        # ONNX counts indices over the whole NCHW tensor, dualgraph (as torch) per plane
        plane = e.const(np.asarray(h * w, np.int64), "plane")
        return [values, e.op("Mod", [indices, plane])]
    return _batched(e, node, pool)


def _avg_pool2d(e, node):
    a = node.attrs
    ph, pw = a["padding"]
    divisor = a["divisor_override"]
    if divisor is not None and a["ceil_mode"]:
        raise e.fail("avg_pool2d with divisor_override and ceil_mode has no ONNX form",
                     "pad the input so that ceil_mode is not needed")

    def pool(x):
        mean = e.op("AveragePool", [x], kernel_shape=list(a["kernel_size"]),
                    strides=list(a["stride"]), pads=[ph, pw, ph, pw],
                    ceil_mode=int(a["ceil_mode"]),
                    count_include_pad=int(a["count_include_pad"] or divisor is not None))
        if divisor is None:
            return [mean]
        # every window then holds kh * kw values (padding included): rescale the mean
        kh, kw = a["kernel_size"]
        scale = e.const(np.asarray(kh * kw / divisor, node.outputs[0].dtype), "scale")
        return [e.op("Mul", [mean, scale])]
    return _batched(e, node, pool)


# -- control flow --------------------------------------------------------------------------
BOOL, INT64 = ShapedType((), np.dtype(np.bool_)), ShapedType((), np.dtype(np.int64))


def _outputs(e, op_type: str, inputs, n: int, **attrs) -> list:
    """One ONNX node with ``n`` outputs; returns their names as a list (even for one)."""
    return e.op(op_type, inputs, outputs=[e.fresh(f"{op_type}_out") for _ in range(n)],
                **attrs)


def _body_name(e, node, part: str) -> str:
    return f"{e.names.get(node.outputs[0]) or node.outputs[0].name}.{part}"


def _cond(e, node):
    """cond -> If. ONNX branches take no inputs but read the enclosing scope, so each
    branch graph's inputs are bound to the node's operands."""
    operands = [e.input(i) for i in range(1, len(node.inputs))]

    def branch(graph):
        return lambda sub, _: list(zip(sub.inline(graph, operands), graph.outputs))
    then_graph = e.subgraph(_body_name(e, node, "then"), [], branch(node.attrs["true_graph"]))
    else_graph = e.subgraph(_body_name(e, node, "else"), [], branch(node.attrs["false_graph"]))
    return _outputs(e, "If", [e.input(0, np.bool_)], len(node.outputs),
                    then_branch=then_graph, else_branch=else_graph)


def _while_loop(e, node):
    """while_loop -> Loop(M = max_iters, cond = the condition of the initial carry). The
    body computes the new carry, then the condition on it; one more carried value counts
    the iterations (the node's last output). Past ``max_iters`` ONNX stops where dualgraph
    raises."""
    cond_graph, body_graph = node.attrs["cond_graph"], node.attrs["body_graph"]
    n = len(body_graph.outputs)
    names = e.inputs()
    carried, rest = names[:n], names[n:]
    types = [v.type for v in body_graph.outputs]

    def body(sub, formal):
        count, carry = formal[2], formal[3:]    # (after the iteration number and condition)
        new = sub.inline(body_graph, carry + rest)
        again = sub.inline(cond_graph, new + rest)[0]
        counted = sub.op("Add", [count, sub.const(np.ones((), np.int64), "one")])
        return [(again, BOOL), (counted, INT64), *zip(new, types)]
    graph = e.subgraph(_body_name(e, node, "body"), [("i", INT64), ("cond", BOOL),
                       ("count", INT64), *(("carry", t) for t in types)], body)
    first = e.inline(cond_graph, carried + rest)[0]
    bound = node.attrs["max_iters"]
    m = None if bound is None else e.const(np.asarray(bound, np.int64), "max_iters")
    zero = e.const(np.zeros((), np.int64), "zero")
    count, *final = _outputs(e, "Loop", [m, first, zero, *carried], n + 1, body=graph)
    return [*final, count]


def _scan(e, node):
    """scan -> Scan (the opset 9 form): carry = state variables, xs = scan inputs, ys =
    scan outputs stacked on axis 0, ``reverse`` = both directions reversed (the ys are
    prepended, so they keep the order of xs). Outer tensors the body reads come from the
    enclosing scope. A scan without xs gets a dummy scan input of ``length`` rows, since
    ONNX's Scan counts its steps by its scan inputs."""
    a = node.attrs
    graph, c, x = a["body_graph"], a["num_carry"], a["num_xs"]
    names = e.inputs()
    carry, xs, rest = names[:c], names[c:c + x], names[c + x:]
    slices = [ShapedType(tuple(v.shape[1:]), v.dtype) for v in node.inputs[c:c + x]]
    if not xs:
        xs, slices = [e.const(np.zeros(a["length"], np.bool_), "steps")], [BOOL]

    def body(sub, formal):
        outs = sub.inline(graph, formal[:c] + formal[c:c + x] + rest)
        return list(zip(outs, [v.type for v in graph.outputs]))
    carry_types = [v.type for v in graph.outputs[:c]]
    proto = e.subgraph(_body_name(e, node, "body"), [*(("carry", t) for t in carry_types),
                       *(("x", t) for t in slices)], body)
    num_ys = len(graph.outputs) - c
    direction = int(bool(a["reverse"]))
    return _outputs(e, "Scan", carry + xs, len(node.outputs), body=proto,
                    num_scan_inputs=len(xs), scan_input_directions=[direction] * len(xs),
                    scan_output_directions=[direction] * num_ys if num_ys else None)


EXPORTERS = {
    # elementwise
    "ne": _negated("Equal"), "where": _where, "log1p": _log1p, "expm1": _expm1,
    "sign": _sign, "trunc": _trunc, "floor": _float_only("Floor", _same),
    "ceil": _float_only("Ceil", _same), "isnan": _float_only("IsNaN", _false),
    "isinf": _float_only("IsInf", _false), "isfinite": _isfinite, "round": _round,
    "fmod": _fmod, "remainder": _remainder, "floor_divide": _floor_divide, "elu": _elu,
    "softplus": _softplus, "gelu": _gelu("none"), "gelu_tanh": _gelu("tanh"), "cast": _cast,
    "clone": _clone, "bitwise_and": _bitwise("And", "BitwiseAnd"),
    "bitwise_or": _bitwise("Or", "BitwiseOr"), "bitwise_xor": _bitwise("Xor", "BitwiseXor"),
    "bitwise_not": _bitwise("Not", "BitwiseNot"),
    # products
    "matmul": _matmul, "linear": _linear, "einsum": _einsum,
    # shapes and indexing
    "reshape": _reshape, "permute": _permute, "expand": _expand, "slice": _slice,
    "flip": _flip, "cat": _cat, "full_like": _full_like, "trilu": _trilu, "index": _index,
    "index_put": _index_put, "slice_update": _slice_update,
    # reductions
    "sum": _reduce("ReduceSum"), "mean": _reduce("ReduceMean"), "amax": _reduce("ReduceMax"),
    "amin": _reduce("ReduceMin"), "prod": _reduce("ReduceProd"),
    "logsumexp": _reduce("ReduceLogSumExp"), "norm": _norm, "count": _count,
    "any": _logical_reduce("ReduceMax"), "all": _logical_reduce("ReduceMin"),
    "argmax": _arg("ArgMax"), "argmin": _arg("ArgMin"),
    "max": _reduce_with_index("ReduceMax", "ArgMax"),
    "min": _reduce_with_index("ReduceMin", "ArgMin"),
    "softmax": _softmax("Softmax"), "log_softmax": _softmax("LogSoftmax"), "cumsum": _cumsum,
    "argsort": _argsort, "median": _median, "cumprod": _cumprod,
    # layers
    "cross_entropy": _cross_entropy, "layer_norm": _layer_norm, "lstm_cell": _lstm_cell,
    "conv2d": _conv2d, "conv2d_input_grad": _conv2d_input_grad,
    "max_pool2d": _max_pool2d, "avg_pool2d": _avg_pool2d,
    # control flow
    "cond": _cond, "while_loop": _while_loop, "scan": _scan,
}


def exporter(op):
    """The export function of registry op ``op``, or None when it has no ONNX form."""
    if op.name in EXPORTERS:
        return EXPORTERS[op.name]
    if isinstance(op.onnx, str) and not op.attrs and op.num_outputs == 1:
        return simple(op.onnx)
    return None
