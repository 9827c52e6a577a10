"""A weight that many small products read, transposed once per call: the lowering rule
``step_weights_kn`` (its row is in ``passes/lower.py``).

A recurrent layer unrolled over time (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``, or a cell called
in a Python loop) reads its hidden weight ``W (N, K)`` once per step, as ``h @ Wᵀ`` on a few
rows: the ``lstm_cell`` and ``gru_cell`` ops' hidden products, an Elman RNN's ``linear``.
OpenBLAS runs ``x @ Wᵀ`` as an NT product, and for few rows (8 to a few hundred) that is
1.3-4x slower than the NN product of the same operands laid out row-major (measured on
the AVX-512 kernels: 32 rows by a 512x128 weight 90 -> 57 us, by 512x512 411 -> 251 us;
docs/benchmarks.md). A training step's weight changes every call, so it can't be stored
transposed once as ``weights_kn`` stores a constant; but one transposed copy per call
(``relayout``, about what one or two of the products save) pays back over a few of them.

The rule gives the forward products (not the backward ops, whose ``g @ W`` is NN as it is)
a ``permute`` view of that copy: they read the same ``(N, K)`` values, and their kernels'
``x @ w.T`` is a product of two row-major operands.
"""
from __future__ import annotations

import math

from ..graph import Graph, Node, Value
from ..ops.epilogue import LINEAR_EPILOGUE, LINEAR_NORM
from ..ops.layout import RELAYOUT
from ..ops.linalg import BLAS_DTYPES, LINEAR, LINEAR_RELU
from ..ops.recurrent import GRU_CELL, LSTM_CELL
from ..ops.shape import PERMUTE
from ..shapes import Sym
from .core import Builder, Report, live_readers

# op -> (its input holding the product's rows, its input holding the (N, K) weight)
PRODUCTS = {LINEAR: (0, 1), LINEAR_RELU: (0, 1), LINEAR_EPILOGUE: (0, 1), LINEAR_NORM: (0, 1),
            LSTM_CELL: (1, 3), GRU_CELL: (1, 2)}
# the cost rule: products of this many rows gain from the NN form (fewer gain nothing
# measurable, more little: the packing is a smaller share of a long product) ...
ROWS = (8, 256)
# ... and this many of them pay for the copy (a copy costs about one to four products' gain)
READERS = 4


def _rows(x: Value) -> int | None:
    """The product's rows (all leading dims), or None where one is symbolic."""
    dims = x.shape[:-1]
    return None if any(isinstance(d, Sym) for d in dims) else math.prod(dims)


def _small_product(node: Node, w: Value) -> bool:
    """Whether ``node`` reads ``w`` as the weight of a product the NN form speeds up."""
    where = PRODUCTS.get(node.op)
    if where is None or node.inputs[where[1]] is not w:
        return False
    x = node.inputs[where[0]]
    rows = _rows(x) if isinstance(x, Value) else None
    return (rows is not None and ROWS[0] <= rows <= ROWS[1] and x.dtype == w.dtype
            and sum(v is w for v in node.inputs) == 1)


def step_weights(graph: Graph) -> dict:
    """The precondition of ``step_weights_kn``: ``{weight: its small products}`` for each
    2-D float32/float64 value that is not a constant (a constant is ``weights_kn``'s) and
    that at least ``READERS`` products of ``ROWS`` rows read as their weight."""
    live = live_readers(graph)
    found = {}
    for w, users in live.items():
        if (not isinstance(w, Value) or w in graph.constants or w.ndim != 2
                or w.dtype not in BLAS_DTYPES or any(isinstance(d, Sym) for d in w.shape)):
            continue
        products = [u for u in users if isinstance(u, Node) and _small_product(u, w)]
        if len(set(products)) >= READERS:
            found[w] = set(products)
    return found


def step_weights_kn(graph: Graph, found: dict, report: Report) -> Graph:
    """Each weight of ``step_weights`` is copied transposed (``relayout``) before its first
    small product, and those products read a ``permute`` view of the copy: the same
    ``(N, K)`` values, an NN product. Its other readers keep the weight itself.

    Preserves: types, inputs and outputs; values up to rounding (the BLAS may block the
    same sums differently).

    Before::

        graph(%x: f32[8,3], %w: f32[3,3]) {
          %y1: f32[8,3] = linear(%x, %w)
          %y2: f32[8,3] = linear(%y1, %w)
          %y3: f32[8,3] = linear(%y2, %w)
          %y4: f32[8,3] = linear(%y3, %w)
          %g: f32[8,3] = matmul(%y4, %w)
          return (%g)
        }

    After::

        graph(%x: f32[8,3], %w: f32[3,3]) {
          %w_kn: f32[3,3] = relayout(%w, perm=(1, 0))
          %w_nk: f32[3,3] = permute(%w_kn, perm=(1, 0))
          %y1: f32[8,3] = linear(%x, %w_nk)
          %y2: f32[8,3] = linear(%y1, %w_nk)
          %y3: f32[8,3] = linear(%y2, %w_nk)
          %y4: f32[8,3] = linear(%y3, %w_nk)
          %g: f32[8,3] = matmul(%y4, %w)
          return (%g)
        }
    """
    view = {}
    reader_of = {node: w for w, nodes in found.items() for node in nodes}
    b = Builder(graph)
    for node in graph.nodes:
        w = reader_of.get(node)
        if w is None:
            b.copy(node)
            continue
        if w not in view:
            (kn,) = b.add(RELAYOUT, [b.get(w)], {"perm": (1, 0)}, node.location,
                          [w.name + "_kn"])
            (view[w],) = b.add(PERMUTE, [kn], {"perm": (1, 0)}, node.location,
                               [w.name + "_nk"])
            report.count("weights copied (K, N) per call", f"%{w.name}: "
                         f"{len(found[w])} products")
        outs = b.graph.copy_node(node, [view[w] if x is w else b.get(x)
                                        for x in node.inputs])
        b.env.update(zip(node.outputs, outs))
    report.nodes_after = len(b.graph.nodes)
    return b.finish()
