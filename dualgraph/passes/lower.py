"""Lowering: the rewrites that choose how a graph runs, as rows of one rule table.

After autodiff a training step's graph holds the ops the user's code called and their
gradients. The rows of ``RULES`` rewrite patterns of them into ops made for speed (one
GEMM for a loop's per-step products, one im2col for a convolution and its weight gradient,
a relu applied in place to the product before it, ...), so that codegen emits one call per
node and knows no op. Each row is a :class:`LoweringRule`: the OpDefs it anchors on, its
precondition (``match``: where it holds, or nothing), its replacement (``rewrite``), whose
docstring has a before/after example (``tests/test_lower.py`` checks each), and a one-line
comment. One driver, :func:`lower`, runs the rows and returns one Report whose items say,
rule by rule, what changed (``explain()`` prints it).

A row runs at the stage of the pipeline its precondition needs (``stage``):

- ``"graph"``: after ``simplify`` (sums of slice gradients are joined into ``cat``s) and
  before it runs again (a ``cat`` of the per-step blocks cut from one GEMM is that GEMM);
- ``"scans"``: after ``save_scan_residuals`` (the reverse body reads what the forward
  body saved, so its linears are the forward's own);
- ``"kernels"``: after ``fuse_elementwise`` (an op fusion left alone stays alone), so the
  rows choose the kernel a single node runs.

``PIPELINE`` holds one :class:`Stage` per stage (its reports are named ``lower``);
``passes=`` names each rule as it names a pass (``passes={"batch_linears": False}``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import kernels
from ..graph import Graph, Node, Value
from ..ops.collective import COMPRESSED_ALL_REDUCE
from ..ops.control import SCAN
from ..ops.conv import AVG_POOL2D, CONV2D, CONV2D_WEIGHT_GRAD
from ..ops.elementwise import RELU, RELU_BACKWARD, RELU_BACKWARD_IN_PLACE
from ..ops.linalg import LINEAR, LINEAR_BACKWARD, LINEAR_RELU, MATMUL, blas_2d
from ..ops.loss import CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD
from ..ops.recurrent import LSTM_CELL_BACKWARD
from ..ops.layout import DEPTHWISE_BLOCKED, SQUEEZE_EXCITE_BLOCKED
from ..ops.norm import LAYER_NORM
from ..ops.reduce import MEAN, SOFTMAX
from ..ops.shape import CAT
from .affine import (LAYERS, affine_chains, fold_affine_chains, fold_input_chains,
                     input_affine_chains)
from .attention import attention_patterns, fuse_attention
from .batch import batch_linears, loop_linear_groups
from ..ops.conv import MAX_POOL2D
from ..ops.epilogue import CONV2D_PACKED, MAX_POOL2D_VALUES
from .communication import compress_all_reduces, compressed_all_reduces
from .concat import cat_chains, cat_in_place, conv_cat, conv_cats
from .convs import (PACKED_READERS, conv_packed, conv_winograd, packable_weights,
                    winograd_weights)
from .core import Builder, Report, live_readers, needed, readers
from .epilogue import conv_epilogue, conv_epilogues, linear_epilogue, linear_epilogues
from .expand import expand_into_depthwise, expansions
from .excite import gate_into_weights, gated_pointwises, squeeze_excite, squeeze_excites
from .layout import (CONVS as LAYOUT_CONVS, blocked_channels, blocked_channels_regions,
                     channels_last, channels_last_regions, channels_last_view_regions,
                     channels_last_views)
from .group import group_updates, grouped_ops, update_groups
from .join import join_loss_gradient, loss_gradient_pairs
from .norms import (fuse_layer_norm, fuse_rms_norm, layer_norm_patterns,
                    rms_norm_patterns)
from .prologue import conv_prologue, conv_prologues
from .patchify import patchify_conv, patchify_convs
from .pool_first import pool_before_conv, pooled_pointwise_convs
from .linears import (WEIGHT_READERS, constant_linears, join_linears, linear_norm,
                      linear_packed, linears_sharing_inputs, matmuls_by_constants,
                      norms_of_linears, packable_linear_weights, weights_kn,
                      weights_to_transpose)
from .scan_linears import batch_scan_linears, scan_plans
from .share import share_conv_columns, shared_columns
from .step_weights import PRODUCTS as STEP_PRODUCTS, step_weights, step_weights_kn


@dataclass(frozen=True, eq=False)
class LoweringRule:
    """A row of the lowering table.

    ``anchors``: the OpDefs the pattern is rooted at (a graph with none of them is left
    alone without looking further), or a function giving them (read from the OpDefs' flags
    when the rule runs: ops of a higher layer register later). ``match(graph)``: the
    places where the precondition holds (nodes, or groups of nodes for a whole-graph
    grouping); falsy when there are none. ``rewrite(graph, matches, report)``: the new graph,
    each change counted in ``report``. ``repeat``: match again after a rewrite (one rewrite
    can make another possible). ``default``: run by the pipeline unless ``passes=`` leaves
    it out (False: only where ``passes=`` names it: an opt-in rule not yet measured to pay
    everywhere). ``doc``: the replacement's docstring, with the example.
    Calling the rule runs it alone, as a pass.
    """
    name: str
    anchors: tuple | Callable
    match: Callable
    rewrite: Callable
    stage: str
    repeat: bool = False
    default: bool = True

    @property
    def doc(self) -> str:
        return self.rewrite.__doc__

    def anchored(self, ops: set) -> bool:
        anchors = self.anchors() if callable(self.anchors) else self.anchors
        return not ops.isdisjoint(anchors)

    def __call__(self, graph: Graph) -> tuple[Graph, Report]:
        return lower(graph, [self], name=self.name)


# -- the rows made for codegen: one node's kernel ---------------------------------------------
def linear_relus(graph: Graph) -> dict[Node, Node]:
    """The precondition: ``{linear node: relu node}`` where a relu reads a ``linear`` of a
    2-D input whose operands share its float32/float64 dtype (``linalg.blas_2d``), whose
    product nothing else reads nor returns."""
    consumers = readers(graph)
    found = {}
    for node in graph.nodes:
        x = node.inputs[0] if node.op is RELU else None
        producer = x.producer if isinstance(x, Value) else None
        if (producer is not None and producer.op is LINEAR and blas_2d(*producer.inputs)
                and consumers[x] == [node]):
            found[producer] = node
    return found


def linear_relu(graph: Graph, pairs: dict, report: Report) -> Graph:
    """Each pair of ``linear_relus`` becomes one ``linear_relu`` at the linear's place,
    named as the relu's result: its kernel applies the relu to the product's own array
    (inside a batch-1 matrix-vector product as it writes the rows, with the bias in one
    float32 loop over a matmul's result).

    Preserves: types, inputs and outputs, and values bit for bit (the relu is exact; NaN
    and -0.0 stay).

    Before::

        graph(%x: f32[4,3], %w: f32[5,3], %b: f32[5]) {
          %y: f32[4,5] = linear(%x, %w, %b)
          %h: f32[4,5] = relu(%y)
          return (%h)
        }

    After::

        graph(%x: f32[4,3], %w: f32[5,3], %b: f32[5]) {
          %h: f32[4,5] = linear_relu(%x, %w, %b)
          return (%h)
        }
    """
    relus = set(pairs.values())
    b = Builder(graph)
    for node in graph.nodes:
        relu = pairs.get(node)
        if relu is not None:
            (b.env[relu.outputs[0]],) = b.add(LINEAR_RELU, [b.get(x) for x in node.inputs],
                                              {}, node.location, [relu.outputs[0].name])
            report.count("relus in place", f"%{node.outputs[0].name} + "
                                           f"%{relu.outputs[0].name} -> linear_relu")
        elif node not in relus:
            b.copy(node)
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


def masked_linear_gradients(graph: Graph) -> list[Node]:
    """The precondition: the ``relu_backward`` nodes whose gradient operand is a
    ``linear_backward``'s input gradient (a fresh product) that nothing else reads nor
    returns, where the in-place loop exists (Numba)."""
    if not kernels.numba_available():
        return []
    consumers = readers(graph)
    found = []
    for node in graph.nodes:
        if node.op is not RELU_BACKWARD or not all(isinstance(v, Value) for v in node.inputs):
            continue
        g = node.inputs[0]
        if (g.producer is not None and g.producer.op is LINEAR_BACKWARD
                and g is g.producer.outputs[0] and consumers[g] == [node]):
            found.append(node)
    return found


def relu_backward_in_place(graph: Graph, nodes: list, report: Report) -> Graph:
    """Each node of ``masked_linear_gradients`` becomes ``relu_backward_in_place``, which
    masks the gradient's own array: one activation-sized array fewer per hidden layer.

    Preserves: types, inputs and outputs, and values bit for bit (the same loop).

    Before::

        graph(%gy: f32[4,5], %h: f32[4,3], %w: f32[5,3]) {
          %dh: f32[4,3], %dw: f32[5,3], %db: f32[5] = linear_backward(%gy, %h, %w, need=(True,
              True, False))
          %dx: f32[4,3] = relu_backward(%dh, %h)
          return (%dx, %dw)
        }

    After::

        graph(%gy: f32[4,5], %h: f32[4,3], %w: f32[5,3]) {
          %dh: f32[4,3], %dw: f32[5,3], %db: f32[5] = linear_backward(%gy, %h, %w, need=(True,
              True, False))
          %dx: f32[4,3] = relu_backward_in_place(%dh, %h)
          return (%dx, %dw)
        }
    """
    chosen = set(nodes)
    b = Builder(graph)
    for node in graph.nodes:
        if node not in chosen:
            b.copy(node)
            continue
        (b.env[node.outputs[0]],) = b.add(RELU_BACKWARD_IN_PLACE,
                                          [b.get(x) for x in node.inputs], {},
                                          node.location, [node.outputs[0].name])
        report.count("masked in place", f"%{node.inputs[0].name} by "
                                        f"%{node.outputs[0].name}")
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


# -- the rows made for inference: what constants alone determine -----------------------------
def constant_affine_chains(graph: Graph) -> dict:
    """The precondition: ``passes/affine.py``'s ``affine_chains`` over the graph's own
    constants (a compiled model whose parameters were frozen into the graph, a trace of an
    eval model, an ONNX import): a conv2d or linear with constant weight and bias whose
    output only a per-channel chain of constant ``add``/``sub``/``mul``/``div`` reads
    (eval-mode BatchNorm, its ``1 / sqrt(var + eps)`` folded by ``fold_constants``)."""
    return affine_chains(graph, graph.constants)


def fold_batchnorm(graph: Graph, chains: dict, report: Report) -> Graph:
    """Each chain of ``constant_affine_chains`` folds into its layer: per channel,
    ``conv(x, W, b) * s + t`` is ``conv(x, W * s, b * s + t)`` (one layer, its weight and
    bias new constants computed in float64), named as the chain's last value. A layer whose
    output is also read elsewhere or returned, or whose weight is not a constant, is left
    alone.

    Preserves: types, inputs and outputs; values up to rounding (the products are taken in
    float64 and rounded once to the layer's dtype).

    Before::

        graph(%x: f32[2,3]) {
          %w: f32[4,3] = constant
          %b: f32[4] = constant([0.5, 1.0, 1.5, 2.0])
          %mean: f32[4] = constant([0.5, 0.5, 0.5, 0.5])
          %scale: f32[4] = constant([2.0, 2.0, 2.0, 2.0])
          %y: f32[2,4] = linear(%x, %w, %b)
          %c: f32[2,4] = sub(%y, %mean)
          %h: f32[2,4] = mul(%c, %scale)
          return (%h)
        }

    After::

        graph(%x: f32[2,3]) {
          %w: f32[4,3] = constant
          %w_bias: f32[4] = constant([0.0, 1.0, 2.0, 3.0])
          %h: f32[2,4] = linear(%x, %w, %w_bias)
          return (%h)
        }
    """
    return fold_affine_chains(graph, chains, graph.constants, report)


def constant_input_chains(graph: Graph) -> dict:
    """The precondition: ``passes/affine.py``'s ``input_affine_chains`` over the graph's
    constants: a conv2d without padding or a linear, constant weight and bias, whose input
    is made by a per-channel chain of constant ``add``/``sub``/``mul``/``div`` (an
    eval-mode BatchNorm with no activation after it) read only along the chain."""
    return input_affine_chains(graph, graph.constants)


def fold_input_affine(graph: Graph, chains: dict, report: Report) -> Graph:
    """Each chain of ``constant_input_chains`` folds into its layer, which reads the
    chain's start: per input channel ``c``, ``conv(x * s + t, W, b)`` is ``conv(x, W *
    s[c], b + sum W * t[c])`` (no padding: at a padded border the shift would be wrong),
    ``linear(x * s + t, W, b)`` is ``linear(x, W * s, b + W @ t)``.

    Preserves: types, inputs and outputs; values up to rounding (the new weight and bias
    are computed in float64 and rounded once to the layer's dtype).

    Before::

        graph(%x: f32[5,3]) {
          %w: f32[2,3] = constant([[-1.0, -0.6, -0.2], [0.2, 0.6, 1.0]])
          %b: f32[2] = constant([1.0, 2.0])
          %s: f32[3] = constant([2.0, 3.0, 4.0])
          %t: f32[3] = constant([-1.0, 0.0, 1.0])
          %m: f32[5,3] = mul(%x, %s)
          %a: f32[5,3] = add(%m, %t)
          %h: f32[5,2] = linear(%a, %w, %b)
          return (%h)
        }

    After::

        graph(%x: f32[5,3]) {
          %w: f32[2,3] = constant([[-2.0, -1.8000001, -0.8], [0.4, 1.8000001, 4.0]])
          %w_bias: f32[2] = constant([1.8, 2.8])
          %h: f32[5,2] = linear(%x, %w, %w_bias)
          return (%h)
        }
    """
    return fold_input_chains(graph, chains, graph.constants, report)


def unread_pool_indices(graph: Graph) -> list[Node]:
    """The precondition: the ``max_pool2d`` nodes whose indices (the second output) no
    live node reads nor the graph returns (inference: only the backward reads them)."""
    live = live_readers(graph)
    return [n for n in graph.nodes if n.op is MAX_POOL2D and not live.get(n.outputs[1])]


def max_pool_values(graph: Graph, nodes: list, report: Report) -> Graph:
    """Each node of ``unread_pool_indices`` becomes ``max_pool2d_values``, named as its
    values: a running maximum, without the comparisons and masks that track the argmax
    (one NumPy pass per kernel position instead of five). Dead nodes are dropped.

    Preserves: types, inputs and outputs, and values bit for bit (NaN wins, as before).

    Before::

        graph(%x: f32[1,2,5,5]) {
          %y: f32[1,2,2,2], %i: i64[1,2,2,2] = max_pool2d(%x, kernel_size=(3, 3), stride=(2,
              2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)
          return (%y)
        }

    After::

        graph(%x: f32[1,2,5,5]) {
          %y: f32[1,2,2,2] = max_pool2d_values(%x, kernel_size=(3, 3), stride=(2, 2),
              padding=(0, 0), dilation=(1, 1), ceil_mode=False)
          return (%y)
        }
    """
    chosen, live = set(nodes), needed(graph)
    b = Builder(graph)
    for node in graph.nodes:
        if not any(v in live for v in node.outputs):
            continue
        if node not in chosen:
            b.copy(node)
            continue
        (b.env[node.outputs[0]],) = b.add(MAX_POOL2D_VALUES, [b.get(node.inputs[0])],
                                          node.attrs, node.location, [node.outputs[0].name])
        report.count("pools without indices", f"%{node.outputs[0].name}")
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


RULES = [
    # matmul(x, W) [+ b], W (and b) constant -> linear(x, Wᵀ, b): ONNX's spelling of a
    # linear layer takes the rules below made for linears
    LoweringRule("constant_linears", (MATMUL,), matmuls_by_constants, constant_linears,
                 "graph"),
    # linear/conv2d(x, W, b) * s + t by per-channel constants, W and b constant ->
    # linear/conv2d(x, W * s, b * s + t): eval-mode BatchNorm folded into its layer
    LoweringRule("fold_batchnorm", tuple(LAYERS), constant_affine_chains, fold_batchnorm,
                 "graph"),
    # conv2d(x * s + t, W, b) without padding / linear(...), s and t per-channel constants,
    # W and b constant -> the layer of x with W * s, b + W @ t: a BatchNorm before its layer
    LoweringRule("fold_input_affine", tuple(LAYERS), constant_input_chains,
                 fold_input_affine, "graph"),
    # avg_pool2d(conv2d 1x1(x)) -> conv2d 1x1(avg_pool2d(x)), the conv read only by the
    # pool, the plane shrinking: the conv on the pooled plane (after fold_input_affine,
    # which wants the conv right after its BatchNorm; before conv_epilogue)
    LoweringRule("pool_before_conv", (AVG_POOL2D,), pooled_pointwise_convs, pool_before_conv,
                 "graph"),
    # conv2d(x, W[, b]) of one group, kernel == stride, no padding or dilation, W and b
    # constant -> permute(linear(patches(x), W as (Cout, C*kh*kw), b)): space-to-depth and
    # the rules made for linears (after fold_batchnorm, before conv_epilogue)
    LoweringRule("patchify_conv", (CONV2D,), patchify_convs, patchify_conv, "graph"),
    # a loop's per-step linear(x[:, t]) and their gradients -> one GEMM each
    LoweringRule("batch_linears", (LINEAR, LINEAR_BACKWARD, LSTM_CELL_BACKWARD),
                 loop_linear_groups, batch_linears, "graph"),
    # conv2d(x) and conv2d_weight_grad(x) -> one conv2d_columns(x) read by both GEMMs
    LoweringRule("share_conv_columns", (CONV2D, CONV2D_WEIGHT_GRAD), shared_columns,
                 share_conv_columns, "graph"),
    # act(conv2d(x, W, b) [+ r]) [+ r], the intermediates read only along the chain ->
    # conv2d_epilogue: bias, residual and activation in one pass over the conv's output
    # (after share_conv_columns: a training step's conv sharing its im2col keeps it)
    LoweringRule("conv_epilogue", (CONV2D,), conv_epilogues, conv_epilogue, "graph"),
    # x * gate(conv1x1(act(conv1x1(mean(x, (2, 3)))))), each value read only by the next
    # (squeeze-and-excitation, after conv_epilogue) -> squeeze_excite: one loop per image
    LoweringRule("squeeze_excite", (MEAN,), squeeze_excites, squeeze_excite, "graph"),
    # channels_last's regions (below) where every edge is a permute between NCHW and
    # channels-last -> channels-last, the permutes read as they are: no conversion at all
    # (after conv_epilogue; before linear_epilogue and linear_norm, which then find the
    # linears' residual adds and norms with no permute between)
    LoweringRule("channels_last_views", LAYOUT_CONVS, channels_last_view_regions,
                 channels_last_views, "graph"),
    # max_pool2d(x) whose indices nothing reads -> max_pool2d_values(x): no argmax
    LoweringRule("max_pool_values", (MAX_POOL2D,), unread_pool_indices, max_pool_values,
                 "graph"),
    # cross_entropy(x, t) + cross_entropy_backward(g, x, t) -> cross_entropy_with_grad
    LoweringRule("join_loss_gradient", (CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD),
                 loss_gradient_pairs, join_loss_gradient, "graph"),
    # compressed_all_reduce(x) (a compression hook) -> cast, all_reduce, cast back
    LoweringRule("compress_all_reduces", (COMPRESSED_ALL_REDUCE,), compressed_all_reduces,
                 compress_all_reduces, "graph"),
    # a scan's linear(x_t) and their gradients -> one GEMM before / after the scan
    LoweringRule("batch_scan_linears", (SCAN,), scan_plans, batch_scan_linears, "scans",
                 repeat=True),
    # a step's optimiser updates (only returned) -> one group op: one call
    LoweringRule("group_updates", lambda: tuple(grouped_ops()), update_groups,
                 group_updates, "kernels"),
    # relu(linear(x, w, b)), the product read once -> linear_relu(x, w, b), in place
    LoweringRule("linear_relu", (RELU,), linear_relus, linear_relu, "kernels"),
    # relu_backward(linear_backward(...).dx, y), dx read once -> masked in place
    LoweringRule("relu_backward_in_place", (RELU_BACKWARD,), masked_linear_gradients,
                 relu_backward_in_place, "kernels"),
]

# -- the rows made for transformers ------------------------------------------------------------
RULES += [
    # matmul(softmax(matmul(q, kt) * c (+ mask), -1), v) [-> heads after the sequence],
    # the scores and weights read by nothing else -> attention(q, kt, v[, mask]): per head
    LoweringRule("fuse_attention", (SOFTMAX,), attention_patterns, fuse_attention, "graph"),
    # act(linear(x, W, b) [+ r]) [+ r], the intermediates read only along the chain (not a
    # relu alone of a 2-D x: linear_relu's) -> linear_epilogue: one pass over its rows
    LoweringRule("linear_epilogue", (LINEAR,), linear_epilogues, linear_epilogue, "graph"),
    # x * rsqrt(mean(x * x, -1) + eps) [* w] (RMSNorm as written) -> rms_norm(x, w): one
    # loop per row, and a row epilogue for the elementwise fusion
    LoweringRule("fuse_rms_norm", (MEAN,), rms_norm_patterns, fuse_rms_norm, "graph"),
    # (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* w] [+ b] over the last dim
    # (LayerNorm as written; ONNX exports below opset 17) -> layer_norm(x, w, b)
    LoweringRule("fuse_layer_norm", (MEAN,), layer_norm_patterns, fuse_layer_norm,
                 "graph"),
    # layer_norm(linear_epilogue(x, W, b[, r])) (or of a linear), its statistics unread ->
    # linear_norm: the row normalised in the epilogue's pass (post-norm transformers)
    LoweringRule("linear_norm", (LAYER_NORM,), norms_of_linears, linear_norm, "graph"),
    # linear(x, Wq), linear(x, Wk), ... with constant weights (q/k/v projections), no
    # epilogue taken -> one linear(x, [Wq; Wk; ...]) cut by slices: one wider GEMM
    LoweringRule("join_linears", (LINEAR,), linears_sharing_inputs, join_linears, "graph"),
    # linear(x, W) and its epilogue ops, W (N, K) float32 constant read only as their
    # weight, N a multiple of 64, x of 6 rows or more (or symbolic), AVX-512 ->
    # linear_packed(x, Wp): W laid out once in panels of 64 columns (after linear_relu)
    LoweringRule("linear_packed", WEIGHT_READERS, packable_linear_weights, linear_packed,
                 "kernels"),
    # linear(x, W) and its epilogue ops, W (N, K) constant read only as their weight, x of
    # two rows or more -> linear(x, permute(W_kn)): an NN product (after linear_relu)
    LoweringRule("weights_kn", WEIGHT_READERS, weights_to_transpose, weights_kn, "kernels"),
    # linear / lstm_cell / gru_cell(x, W), W (N, K) not constant, read so by 4 products or
    # more of 8-256 rows (a recurrent layer's steps) -> their W a permute view of one
    # relayout(W) per call: NN products (after linear_relu; the backward keeps W)
    LoweringRule("step_weights_kn", tuple(STEP_PRODUCTS), step_weights, step_weights_kn,
                 "kernels"),
    # conv2d(_epilogue)(x, W, ...) 3x3 stride 1, W constant read only as such convs' weight,
    # Winograd faster by the cost rule -> conv2d_winograd(x, U, ...): U = G W G^T made once
    LoweringRule("conv_winograd", PACKED_READERS, winograd_weights, conv_winograd,
                 "kernels"),
    # conv2d(_epilogue)(x, W, ...), W constant read only as such convs' weight, the packed
    # loop chosen by shape -> conv2d_packed(x, W_packed, ...): W laid out once, not per call
    LoweringRule("conv_packed", PACKED_READERS, packable_weights, conv_packed, "kernels"),
    # conv2d_packed(act(x * s + t)) of a 1x1 kernel, s and t per-channel constants, the
    # fused group of the prologue read only by the conv -> conv2d_prologue(x, s, t, ...):
    # applied to each block of input rows as the loop takes it up (after conv_packed)
    LoweringRule("conv_prologue", (CONV2D_PACKED,), conv_prologues, conv_prologue,
                 "kernels"),
    # cat([conv2d(...), conv2d_epilogue/packed/winograd(...), ...], dim=1), each read only
    # by the cat -> conv2d_cat: each conv writes its own channels of the one output (after
    # conv_winograd and conv_packed: each member keeps the kernel their cost rules chose)
    LoweringRule("conv_cat", (CAT,), conv_cats, conv_cat, "kernels"),
    # c_2 = cat(c_1, y_2), c_3 = cat(c_2, y_3), ... (a dense block), each c_i extended by one
    # cat only -> one buffer: cat_grown at c_1, slice_update_in_place of each y_i, c_i a
    # slice of it: each block copied once, not once per later link (after conv_cat)
    LoweringRule("cat_in_place", (CAT,), cat_chains, cat_in_place, "kernels"),
]

# -- the rows made for layout ------------------------------------------------------------------
RULES += [
    # depthwise and 1x1 conv2d(_epilogue) on constant weights and the elementwise ops, means
    # and reshapes between them, where the cost rule says it pays -> a channels-last region:
    # depthwise_nhwc, linear(_epilogue), relayout at its edges (after the epilogue rules);
    # opt-in (passes={"channels_last": True}): whole models measured slower (docs/passes.md)
    LoweringRule("channels_last", LAYOUT_CONVS, channels_last_regions, channels_last, "graph",
                 default=False),
    # depthwise and 1x1 conv2d(_epilogue) on constant weights, channels multiples of eight,
    # and the elementwise ops, means and reshapes between them, where the cost rule says it
    # pays -> a region in (N, C/8, H, W, 8): depthwise_blocked, pointwise_blocked,
    # block_channels / unblock_channels at its edges (after the epilogue rules and
    # channels_last where opted in; before the "kernels" stage's conv_winograd and
    # conv_packed, which take the convs left outside)
    LoweringRule("blocked_channels", LAYOUT_CONVS, blocked_channels_regions, blocked_channels,
                 "graph"),
    # pointwise_blocked(squeeze_excite_blocked(x)), the gated weights of an image no larger
    # than it -> gated_pointwise_blocked: the gate scales the weights, not the image
    LoweringRule("gate_into_weights", (SQUEEZE_EXCITE_BLOCKED,), gated_pointwises,
                 gate_into_weights, "graph"),
    # depthwise_blocked(pointwise_blocked(x)), the 1x1's output read by nothing else and
    # larger than L2 keeps -> expand_depthwise_blocked: the 1x1's rows computed a band at a
    # time into the depthwise conv's padded scratch, never written whole
    LoweringRule("expand_into_depthwise", (DEPTHWISE_BLOCKED,), expansions,
                 expand_into_depthwise, "graph"),
]
RULE_NAMES = sorted(rule.name for rule in RULES)


def lower(graph: Graph, rules=RULES, name: str = "lower") -> tuple[Graph, Report]:
    """Run ``rules`` in order on ``graph``, each where its anchors are and its precondition
    holds. Returns the graph and one Report: the counts of every rule's changes, and one
    item per change, prefixed by the rule's name.

    Preserves what each rule's docstring says it does (types, inputs and outputs always).
    A graph no rule matches is returned as it is.
    """
    report = Report(name, len(graph.nodes), len(graph.nodes))
    ops = {node.op for node in graph.nodes}
    for rule in rules:
        if not rule.anchored(ops):
            continue
        step = Report(rule.name, len(graph.nodes), len(graph.nodes))
        found = rule.match(graph)
        while found:
            graph = rule.rewrite(graph, found, step)
            found = rule.match(graph) if rule.repeat else None
        for kind, n in step.counts.items():
            report.count(kind, n=n)
        report.items += [f"{rule.name}: {item}" for item in step.items]
        report.bytes_saved += step.bytes_saved
        if step.changed:
            ops = {node.op for node in graph.nodes}
    report.nodes_after = len(graph.nodes)
    return graph, report


class Stage:
    """The rows of one ``stage`` as a pass of the pipeline (named ``lower``)."""
    __name__ = "lower"

    def __init__(self, stage: str):
        self.stage = stage
        self.rules = [rule for rule in RULES if rule.stage == stage]

    def __call__(self, graph: Graph, rules=None) -> tuple[Graph, Report]:
        return lower(graph, self.rules if rules is None else rules)

    def __repr__(self):
        return f"lower[{self.stage}]"
