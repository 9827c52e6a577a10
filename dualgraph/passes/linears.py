"""Linear layers as the graph spells them without saying so, linears that share an input,
and the LayerNorm after a linear: the lowering rules ``constant_linears``,
``join_linears`` and ``linear_norm`` (their rows are in ``passes/lower.py``).

``constant_linears``: an imported ONNX model (torch's export of ``nn.Linear`` on a 3-D
input, most transformers) writes a linear layer as ``MatMul(x, Wᵀ)`` then ``Add(b)``, the
weight stored transposed. As ``linear(x, W, b)`` it takes the rules and kernels written for
linears: the epilogues (``linear_epilogue``, ``linear_relu``), the batch-1 product, one
GEMM for all leading dims.

``join_linears``: attention's query, key and value projections written as three
``nn.Linear`` of one input (separate ``q_proj``/``k_proj``/``v_proj`` layers) are three
GEMMs reading the same rows; one GEMM of the three weights stacked reads them once and
runs a wider, more efficient product. Its result is cut into the three outputs by
``slice`` views.

``linear_norm``: a post-norm block (LayerNorm after the residual add) normalises
``x + linear(y)``; after ``linear_epilogue`` has added the bias and the residual in one
pass over the product's rows, LayerNorm read and wrote them again. ``linear_norm``
normalises each row in that same pass.

``weights_kn``: a linear's constant weight ``W (N, K)`` makes its product ``x @ Wᵀ``,
which OpenBLAS runs as an NT product, packing ``W`` from memory at every call. Stored
``(K, N)`` (a ``permute`` view of the transposed copy, so the kernel's ``x @ w.T`` is an
NN product of two row-major operands) the same product packs faster: as fast or faster on
every shape measured, most where the weight is read from memory (a weight evicted by the
rest of a model, or few rows: docs/benchmarks.md). A product known to have one row
keeps ``(N, K)``: the batch-1 loop (``kernels/matvec.py``) reads the weight's rows.
"""
from __future__ import annotations

import math

import numpy as np

from .. import kernels
from ..graph import Graph, Node, Value
from ..ops.elementwise import ADD, RELU
from ..ops.epilogue import LINEAR_EPILOGUE, LINEAR_NORM, LINEAR_PACKED
from ..ops.linalg import BLAS_DTYPES, LINEAR, LINEAR_RELU, MATMUL
from ..ops.norm import LAYER_NORM
from ..ops.shape import PERMUTE, SLICE
from ..shapes import Sym
from .core import Builder, Report, live_readers, only_reader, rebuild

# the ops whose second input is a linear layer's (N, K) weight, read by ``linear``'s kernel
WEIGHT_READERS = (LINEAR, LINEAR_RELU, LINEAR_EPILOGUE, LINEAR_NORM)


def _constant(graph: Graph, x):
    """The array of ``x`` where it is a constant of ``graph``, else None."""
    return graph.constants.get(x) if isinstance(x, Value) else None


def matmuls_by_constants(graph: Graph) -> dict:
    """The precondition of ``constant_linears``: ``{matmul node: bias add node or None}``
    for each ``matmul(x, W)`` whose ``W`` is a 2-D constant of ``x``'s float32/float64
    dtype, with ``x`` of at least one dim, and whose every reader of ``W`` is such a matmul
    (so the transposed copy replaces ``W``, never adds to it: a weight tied to an
    embedding stays as it is). The bias is taken where the product's only reader adds a
    constant of one value per output column (``(N,)`` or ``(1, ..., N)``) in the same
    dtype, giving the product's type."""
    live = live_readers(graph)
    candidates = {}
    for node in graph.nodes:
        if node.op is not MATMUL:
            continue
        x, w = node.inputs
        arr = _constant(graph, w)
        if (arr is not None and arr.ndim == 2 and isinstance(x, Value) and x.ndim >= 1
                and x.dtype in BLAS_DTYPES and w.dtype == x.dtype and x is not w):
            candidates[node] = w
    found = {}
    for node, w in candidates.items():
        if all(isinstance(u, Node) and candidates.get(u) is w and u.inputs[0] is not w
               for u in live.get(w, [])):
            found[node] = _bias_add(graph, live, node)
    return found


def _bias_add(graph: Graph, live: dict, matmul: Node) -> Node | None:
    y = matmul.outputs[0]
    add = only_reader(live, y)
    if add is None or add.op is not ADD:
        return None
    a, b = add.inputs
    bias = b if a is y else a
    arr = _constant(graph, bias)
    out = add.outputs[0]
    n = matmul.inputs[1].shape[1]
    if (arr is None or bias is y or bias.dtype != y.dtype or arr.size != n
            or arr.ndim > y.ndim or arr.shape[-1:] != (n,)
            or out.dtype != y.dtype or tuple(out.shape) != tuple(y.shape)):
        return None
    return add


def constant_linears(graph: Graph, found: dict, report: Report) -> Graph:
    """Each matmul of ``matmuls_by_constants`` becomes ``linear(x, Wᵀ[, b])`` (a new
    constant, one per weight however many matmuls read it) at the place of its last node,
    named as its result (the bias add's, where it took one).

    Preserves: types, inputs and outputs; values up to rounding (the product is the same
    sum, the BLAS call may block it differently).

    Before::

        graph(%x: f32[2,3,4]) {
          %w: f32[4,5] = constant
          %b: f32[5] = constant([0.0, 0.25, 0.5, 0.75, 1.0])
          %y: f32[2,3,5] = matmul(%x, %w)
          %h: f32[2,3,5] = add(%y, %b)
          return (%h)
        }

    After::

        graph(%x: f32[2,3,4]) {
          %w_t: f32[5,4] = constant
          %b: f32[5] = constant([0.0, 0.25, 0.5, 0.75, 1.0])
          %h: f32[2,3,5] = linear(%x, %w_t, %b)
          return (%h)
        }
    """
    transposed: dict = {}

    def emit(b, node, matmul):
        x, w = matmul.inputs
        if w not in transposed:
            transposed[w] = b.graph.add_constant(np.ascontiguousarray(graph.constants[w].T),
                                                 name=w.name + "_t")
        operands = [b.get(x), transposed[w]]
        if node is not matmul:
            a, c = node.inputs
            bias = c if a is matmul.outputs[0] else a
            arr = graph.constants[bias]
            operands.append(b.get(bias) if arr.ndim == 1 else
                            b.graph.add_constant(arr.reshape(-1), name=bias.name))
        out = node.outputs[0]
        (b.env[out],) = b.add(LINEAR, operands, {}, node.location, [out.name])
        report.count("linears", f"%{matmul.outputs[0].name}"
                                f"{' + bias' if node is not matmul else ''} -> linear")
    new = rebuild(graph, {(add or node): node for node, add in found.items()},
                  set(found) | {add for add in found.values() if add is not None}, emit)
    report.nodes_after = len(new.nodes)
    return new


def linears_sharing_inputs(graph: Graph) -> list[list[Node]]:
    """The precondition of ``join_linears``: groups of two or more ``linear`` nodes that
    read one input with 2-D constant weights of its float32/float64 dtype, all with a
    constant bias or all without, where no output is read by a lone ``relu`` alone (the
    ``linear_relu`` rule's case, which keeps its product)."""
    live = live_readers(graph)
    groups: dict = {}
    for node in graph.nodes:
        if node.op is not LINEAR or not isinstance(node.inputs[0], Value):
            continue
        x, w, *bias = node.inputs
        arrays = [_constant(graph, v) for v in [w, *bias]]
        reader = only_reader(live, node.outputs[0])
        if (any(a is None for a in arrays) or arrays[0].ndim != 2 or x.dtype not in BLAS_DTYPES
                or any(v.dtype != x.dtype for v in [w, *bias])
                or (bias and arrays[1].shape != (arrays[0].shape[0],))
                or (reader is not None and reader.op is RELU)):
            continue
        groups.setdefault((x, len(bias)), []).append(node)
    return [nodes for nodes in groups.values() if len(nodes) > 1]


def join_linears(graph: Graph, groups: list, report: Report) -> Graph:
    """Each group of ``linears_sharing_inputs`` becomes one ``linear`` of the weights (and
    biases) stacked in a new constant, at the first member's place, and one ``slice`` of
    its last dim per member, named as the member's result (a view: nothing is copied).

    Preserves: types, inputs and outputs; values up to rounding (each output column is the
    same dot product, the BLAS call may block it differently).

    Before::

        graph(%x: f32[2,3,4]) {
          %wq: f32[3,4] = constant
          %wk: f32[4,4] = constant
          %q: f32[2,3,3] = linear(%x, %wq)
          %k: f32[2,3,4] = linear(%x, %wk)
          return (%q, %k)
        }

    After::

        graph(%x: f32[2,3,4]) {
          %wq_joined: f32[7,4] = constant
          %q_joined: f32[2,3,7] = linear(%x, %wq_joined)
          %q: f32[2,3,3] = slice(%q_joined, index=(None, None, (0, 3, 1)))
          %k: f32[2,3,4] = slice(%q_joined, index=(None, None, (3, 7, 1)))
          return (%q, %k)
        }
    """
    def emit(b, node, nodes):
        operands = [b.get(node.inputs[0])]
        for k in range(1, len(node.inputs)):
            stacked = np.concatenate([graph.constants[n.inputs[k]] for n in nodes])
            operands.append(b.graph.add_constant(stacked, name=node.inputs[k].name + "_joined"))
        (whole,) = b.add(LINEAR, operands, {}, node.location,
                         [node.outputs[0].name + "_joined"])
        start = 0
        for member in nodes:
            out = member.outputs[0]
            stop = start + out.shape[-1]
            index = (None,) * (out.ndim - 1) + ((start, stop, 1),)
            (b.env[out],) = b.add(SLICE, [whole], {"index": index}, member.location,
                                  [out.name])
            start = stop
        report.count("joined linears", f"{len(nodes)} linears of %{node.inputs[0].name} -> "
                                       f"%{whole.name}", n=len(nodes))
    new = rebuild(graph, {nodes[0]: nodes for nodes in groups},
                  {node for nodes in groups for node in nodes}, emit)
    report.nodes_after = len(new.nodes)
    return new


def norms_of_linears(graph: Graph) -> list[Node]:
    """The precondition of ``linear_norm``: the ``layer_norm`` nodes over the last dim, with
    a weight and a bias, whose mean and 1/std nothing reads (inference), of a value only
    they read that a ``linear_epilogue`` or a ``linear`` (of operands of one
    float32/float64 dtype, a 2-D weight) makes: a post-norm transformer's
    ``LayerNorm(x + linear(y))``."""
    live = live_readers(graph)
    found = []
    for node in graph.nodes:
        if node.op is not LAYER_NORM or node.attrs["n_dims"] != 1:
            continue
        v, weight, shift = node.inputs
        layer = v.producer if isinstance(v, Value) else None
        if (layer is None or layer.op not in (LINEAR, LINEAR_EPILOGUE)
                or only_reader(live, v) is not node
                or any(live.get(out) for out in node.outputs[1:])
                or not all(isinstance(p, Value) and p.dtype == v.dtype
                           and tuple(p.shape) == tuple(v.shape[-1:]) for p in (weight, shift))
                or v.dtype not in BLAS_DTYPES or layer.inputs[1].ndim != 2
                or any(isinstance(x, Value) and x.dtype != v.dtype for x in layer.inputs)):
            continue
        found.append(node)
    return found


def linear_norm(graph: Graph, norms: list, report: Report) -> Graph:
    """Each ``layer_norm`` of ``norms_of_linears`` and the linear before it become one
    ``linear_norm`` at the norm's place, named as its result: the product, then one pass
    per row adds the bias (and residual, activation), and normalises the row while it is
    in cache, where the two ops read and wrote the array twice. A linear without bias gets
    a zero bias constant.

    Preserves: types, inputs and outputs; values up to rounding (the row's sums may be
    added in another order than LayerNorm's loop adds them).

    Before::

        graph(%x: f32[2,3,4], %w: f32[5,4], %b: f32[5], %r: f32[2,3,5], %g: f32[5], %s: f32[5]) {
          %y: f32[2,3,5] = linear_epilogue(%x, %w, %b, %r, act='none', bounds=(-inf, inf),
              residual_at='before')
          %n: f32[2,3,5], %mean: f32[2,3,1], %rstd: f32[2,3,1] = layer_norm(%y, %g, %s,
              n_dims=1, eps=1e-05)
          return (%n)
        }

    After::

        graph(%x: f32[2,3,4], %w: f32[5,4], %b: f32[5], %r: f32[2,3,5], %g: f32[5], %s: f32[5]) {
          %n: f32[2,3,5] = linear_norm(%x, %w, %b, %g, %s, %r, act='none', bounds=(-inf,
              inf), residual_at='before', eps=1e-05)
          return (%n)
        }
    """
    def emit(b, node, layer):
        v, weight, shift = node.inputs
        x, w, *rest = layer.inputs
        if layer.op is LINEAR_EPILOGUE:
            bias, residual, attrs = rest[0], rest[1:], dict(layer.attrs)
        else:
            bias = rest[0] if rest else b.graph.add_constant(
                np.zeros(w.shape[0], v.dtype), name=w.name + "_bias")
            residual, attrs = [], dict(act="none", bounds=(-np.inf, np.inf), residual_at=None)
        operands = [b.get(u) for u in (x, w, bias, weight, shift, *residual)]
        out = node.outputs[0]
        (b.env[out],) = b.add(LINEAR_NORM, operands, {**attrs, "eps": node.attrs["eps"]},
                              node.location, [out.name])
        report.count("norms in linears", f"%{v.name} + %{out.name} -> linear_norm")
    new = rebuild(graph, {node: node.inputs[0].producer for node in norms},
                  {node.inputs[0].producer for node in norms}, emit)
    report.nodes_after = len(new.nodes)
    return new


def _more_than_one_row(x: Value) -> bool:
    """Whether ``x``'s leading dims may hold more than one row: some are symbolic (an
    import with dynamic batch and sequence dims), or their product is 2 or more."""
    dims = x.shape[:-1]
    return any(isinstance(d, Sym) for d in dims) or math.prod(dims) >= 2


def weights_to_transpose(graph: Graph) -> list[Value]:
    """The precondition of ``weights_kn``: the 2-D constants of float32/float64 that only
    ``WEIGHT_READERS`` nodes read, each as its weight (second input) and none as anything
    else, each of an input of the weight's dtype that may have more than one row (symbolic
    rows count: a one-row call then runs NumPy's GEMV on the (K, N) weight, as fast on
    one thread as the batch-1 loop)."""
    return _weights_read_by(graph, BLAS_DTYPES, lambda u: _more_than_one_row(u.inputs[0]))


def _weights_read_by(graph: Graph, dtypes, takes) -> list[Value]:
    """The 2-D constants of ``dtypes`` that only ``WEIGHT_READERS`` nodes read, each as its
    weight (second input) and none as anything else, each of an input of the weight's dtype
    and accepted by ``takes(node)``."""
    live = live_readers(graph)
    found = []
    for w, arr in graph.constants.items():
        users = live.get(w, [])
        if (arr.ndim == 2 and w.dtype in dtypes and users
                and all(isinstance(u, Node) and u.op in WEIGHT_READERS and u.inputs[1] is w
                        and w not in (u.inputs[0], *u.inputs[2:])
                        and isinstance(u.inputs[0], Value) and u.inputs[0].dtype == w.dtype
                        and takes(u) for u in users)):
            found.append(w)
    return found


def weights_kn(graph: Graph, weights: list, report: Report) -> Graph:
    """Each weight of ``weights_to_transpose`` becomes a ``(K, N)`` constant (its transpose,
    row-major) and a ``permute`` view of it before its first reader, named as the weight:
    the readers get the same ``(N, K)`` values, and their kernel's ``x @ w.T`` is a
    product of two row-major matrices.

    Preserves: types, inputs and outputs; values up to rounding (the BLAS may block the
    same sums differently).

    Before::

        graph(%x: f32[4,3]) {
          %w: f32[5,3] = constant
          %y: f32[4,5] = linear(%x, %w)
          return (%y)
        }

    After::

        graph(%x: f32[4,3]) {
          %w_kn: f32[3,5] = constant
          %w: f32[5,3] = permute(%w_kn, perm=(1, 0))
          %y: f32[4,5] = linear(%x, %w)
          return (%y)
        }
    """
    pending = set(weights)
    b = Builder(graph)
    for node in graph.nodes:
        w = node.inputs[1] if node.op in WEIGHT_READERS else None
        if w in pending:
            pending.discard(w)
            kn = b.graph.add_constant(np.ascontiguousarray(graph.constants[w].T),
                                      name=w.name + "_kn")
            (b.env[w],) = b.add(PERMUTE, [kn], {"perm": (1, 0)}, node.location, [w.name])
            report.count("weights stored (K, N)", f"%{w.name}")
        b.copy(node)
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


def _packs(node: Node) -> bool:
    """Whether the packed loop takes ``node``'s product (``linear_packed.constant_wins``:
    by its rows where they are static, any number of them where some dim is symbolic), its
    bias (if any) one entry per output."""
    x, w, *rest = node.inputs
    n, k = w.shape
    if rest and not (isinstance(rest[0], Value) and tuple(rest[0].shape) == (n,)):
        return False
    dims = x.shape[:-1]
    rows = None if any(isinstance(d, Sym) for d in dims) else math.prod(dims)
    return kernels.linear_packed.constant_wins(rows, k, n)


def packable_linear_weights(graph: Graph) -> list[Value]:
    """The precondition of ``linear_packed``: the float32 ``(N, K)`` constants read only as
    the weight of ``WEIGHT_READERS`` nodes whose product ``_packs`` accepts."""
    return _weights_read_by(graph, (np.dtype(np.float32),), _packs)


def linear_packed(graph: Graph, weights: list, report: Report) -> Graph:
    """Each weight of ``packable_linear_weights`` becomes one constant ``<w>_packed``,
    ``kernels.linear_packed.pack(w)``, and each of its readers a ``linear_packed`` node
    reading it, named as the reader's output: ``linear`` and ``linear_relu`` with
    ``act='none'``/``'relu'`` (a zero bias constant where there is none),
    ``linear_epilogue`` with its attrs and ``eps=None``, ``linear_norm`` with its attrs.

    Preserves: types, inputs and outputs; values up to the rounding of the sums (the loop
    adds along ``K`` in order, a BLAS in blocks).

    Before::

        graph(%x: f32[8,256]) {
          %w: f32[128,256] = constant
          %b: f32[128] = constant
          %y: f32[8,128] = linear(%x, %w, %b)
          return (%y)
        }

    After::

        graph(%x: f32[8,256]) {
          %w_packed: f32[2,256,64] = constant
          %b: f32[128] = constant
          %y: f32[8,128] = linear_packed(%x, %w_packed, %b, act='none', bounds=(-inf, inf),
              residual_at=None, eps=None)
          return (%y)
        }
    """
    pending, packed = set(weights), {}
    b = Builder(graph)
    for node in graph.nodes:
        w = node.inputs[1] if node.op in WEIGHT_READERS else None
        if w not in pending:
            b.copy(node)
            continue
        if w not in packed:
            packed[w] = b.graph.add_constant(kernels.linear_packed.pack(graph.constants[w]),
                                             name=w.name + "_packed")
            report.count("linear weights packed", f"%{w.name}")
        x, *rest = [b.get(v) for v in (node.inputs[0], *node.inputs[2:])]
        attrs = {k: node.attrs.get(k) for k in ("act", "bounds", "residual_at", "eps")}
        if node.op in (LINEAR, LINEAR_RELU):
            rest = rest or [b.graph.add_constant(np.zeros(w.shape[0], np.float32),
                                                 name=w.name + "_bias")]
            attrs.update(act="relu" if node.op is LINEAR_RELU else "none",
                         bounds=(-np.inf, np.inf))
        (b.env[node.outputs[0]],) = b.add(LINEAR_PACKED, [x, packed[w], *rest], attrs,
                                          node.location, [node.outputs[0].name])
    report.nodes_after = len(b.graph.nodes)
    return b.finish()
