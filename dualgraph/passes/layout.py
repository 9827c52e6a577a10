"""The lowering rule ``channels_last`` (its row is in ``passes/lower.py``): regions of an
inference graph run in the channels-last layout ``(N, H, W, C)``, converted only at their
edges.

A depthwise convolution's loops want each position's channels side by side (eight in the
lanes of a vector); in the graph's NCHW layout ``conv_lanes`` transposes its input into that
form and its output back at every call, most of a small layer's time. In channels-last the
depthwise conv reads its input as it is (``depthwise_nhwc``, ``kernels/conv_nhwc.py``), a
1x1 convolution is a GEMM over the last dim (``pointwise_nhwc``: by blocks of positions,
the epilogue per row), and the ops between them do not care: elementwise ops
(activations, a residual add, the scaling of squeeze-and-excitation by a ``(N, C, 1, 1)``
gate, which broadcasts the same way with the dims permuted), the global average pool
(``mean`` over the plane: dims ``(1, 2)``), and the reshape of a ``(N, C, 1, 1)`` pool to
``(N, C)``, whose data is the same in both layouts.

The precondition, per node (a *member*): a ``conv2d`` / ``conv2d_epilogue`` of float32
operands of static shapes whose weight is a constant of the graph (inference: frozen
parameters, an ONNX import; a training step's weights are inputs, so it is never touched)
and that is depthwise (``conv_nhwc.wanted``) or 1x1 with stride 1, no padding and one
group, or (blocked layout only, form ``"shallow"``) a conv of at most four input channels
that ``conv_shallow`` runs, whose input the layout cannot hold: it reads that input as it
is and writes its output blocked (``shallow_blocked``: an image's first layer feeding a
blocked region, no ``block_channels`` between them); a ``mean`` over dims ``(2, 3)`` of a
4-D float32 value; an elementwise op whose array operands are all 4-D (or 0-d); the
reshape of a ``(N, C, 1, 1)`` value to ``(N, C)``; every 4-D value a member reads or makes
of a static shape (a graph traced with symbolic dims keeps those values as they are; the
blocked layout needs the channels as a number).
Members joined by the values they pass are a *region*. A region is taken where it pays, by
a cost rule over element counts: each depthwise conv in it saves the transposes of its
input and output (``conv_lanes``' pack and unpack), each value converted at the edge costs
a ``relayout`` (a transposing copy, ``RELAYOUT_COST`` times a depthwise conv's transposes);
a region without a depthwise conv is not taken, so graphs of dense convolutions are left
as they are. In channels-last a value the region reads that is a ``permute`` of a 4-D
channels-last value to NCHW is that value, and a ``permute`` to channels-last of a value it
makes is the value it makes: such edges cost nothing, and a region whose edges are all such
(code that normalises over channels on the permuted tensor between depthwise convs) is
taken by the default rule ``channels_last_views``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..graph import Graph, Node, Value
from ..ops.conv import CONV2D
from ..ops.epilogue import CONV2D_EPILOGUE
from ..ops.excite import SQUEEZE_EXCITE
from ..ops.layout import (BLOCK_CHANNELS, DEPTHWISE_BLOCKED, DEPTHWISE_NHWC, POINTWISE_BLOCKED,
                          POINTWISE_NHWC, RELAYOUT, SHALLOW_BLOCKED, SQUEEZE_EXCITE_BLOCKED,
                          TO_NCHW, TO_NHWC, UNBLOCK_CHANNELS, shallow_blockable)
from ..ops.reduce import MEAN
from ..ops.shape import PERMUTE, RESHAPE
from ..shapes import is_static
from .core import Builder, Report, live_readers

CONVS = (CONV2D, CONV2D_EPILOGUE)
RELAYOUT_COST = 2   # (NumPy's transposing copy against the conv loops' 8x8 transposes)


@dataclass(frozen=True)
class Layout:
    """What a region's layout changes: ``to`` and ``back``, the ops (and their attrs) of
    the conversions at its edges; ``ops`` the op of each conv form (and ``"excite"``: of a
    ``squeeze_excite``, where the layout has one); ``pack(form, w)`` a
    conv's constant weight as that op reads it (``None``: as it is); ``mean_dims`` the
    plane's dims; ``holds(v)``: whether a 4-D value can be laid out so; ``takes(form, x,
    w)``: whether its kernels run such a conv; ``suffix`` the names' ending; ``view`` the
    ``permute`` that makes an NCHW value this layout's array, and its inverse (``None``:
    no permute does: ``_source`` and ``_view_reader``)."""
    name: str
    to: tuple
    back: tuple
    ops: dict
    pack: object
    mean_dims: tuple
    holds: object
    takes: object
    suffix: str
    view: tuple | None = None


def _reads_nchw(node: Node, layout) -> bool:
    """Whether ``node`` is a conv whose input the layout cannot hold, but whose output it
    may write (``"shallow"`` in its ops): a member only as that form, its input read as it
    is (an image's first layer, 3 channels, writing the blocked layout directly)."""
    x = node.inputs[0] if node.op in CONVS else None
    return ("shallow" in layout.ops and isinstance(x, Value) and x.ndim == 4
            and is_static(x.shape) and not layout.holds(x))


def _conv_form(node: Node, constants, layout) -> str | None:
    """``"pointwise"``, ``"depthwise"`` or ``"shallow"`` for a conv the region takes, else
    None."""
    x, w, *rest = node.inputs
    a = node.attrs
    if not (isinstance(x, Value) and w in constants and x.ndim == 4 and is_static(x.shape)
            and all(isinstance(v, Value) and v.dtype == np.float32 for v in (x, w, *rest))
            and min(min(p) for p in a["padding"]) >= 0):
        return None
    if _reads_nchw(node, layout):
        taken = shallow_blockable(tuple(x.shape), tuple(w.shape), a["stride"], a["padding"],
                                  a["dilation"], a["groups"])
        return "shallow" if taken else None
    if (tuple(w.shape[2:]) == (1, 1) and tuple(a["stride"]) == (1, 1) and a["groups"] == 1
            and all(p == 0 for pair in a["padding"] for p in pair)):
        form = "pointwise"
    elif a["groups"] == x.shape[1] == w.shape[0] and w.shape[1] == 1:
        form = "depthwise"
    else:
        return None
    return form if layout.takes(form, x, w) else None


def _member(node: Node, constants, layout) -> bool:
    """Whether ``node`` can run in the layout (the module docstring). Its 4-D values are
    of static shapes (a symbolic dim is never blocked, nor counted by the cost rule)
    that the layout holds."""
    if not all(is_static(v.shape) and layout.holds(v)
               for v in (*_layout_values(node, layout), *node.outputs)
               if isinstance(v, Value) and v.ndim == 4):
        return False
    if node.op in CONVS:
        return _conv_form(node, constants, layout) is not None
    if node.op is SQUEEZE_EXCITE:
        return "excite" in layout.ops and node.inputs[0].dtype == np.float32
    x = node.inputs[0] if node.inputs else None
    if not isinstance(x, Value) or x.dtype != np.float32 or len(node.outputs) != 1:
        return False
    if node.op is MEAN:
        return x.ndim == 4 and tuple(sorted(node.attrs["dims"])) == (2, 3)
    if node.op is RESHAPE:
        return (x.ndim == 4 and tuple(x.shape[2:]) == (1, 1)
                and tuple(node.outputs[0].shape) == tuple(x.shape[:2]))
    return (node.op.elementwise is not None and node.outputs[0].ndim == 4
            and all(not isinstance(v, Value) or v.ndim in (0, 4) for v in node.inputs))


def _layout_values(node: Node, layout) -> list:
    """The 4-D inputs of a member whose layout it reads (a conv's input and residual, not
    its weight, nor the input of one that reads it as it is: ``_reads_nchw``; a
    squeeze-excitation's input, not its weights)."""
    if node.op in CONVS:
        values = [*([] if _reads_nchw(node, layout) else node.inputs[:1]), *node.inputs[3:]]
    else:
        values = node.inputs[:1] if node.op is SQUEEZE_EXCITE else node.inputs
    return [v for v in values if isinstance(v, Value) and v.ndim == 4]


def _regions(graph: Graph, layout: Layout) -> list[list[Node]]:
    """The precondition: the regions (lists of member nodes in graph order) that pay."""
    if not kernels.numba_available():
        return []
    members = [n for n in graph.nodes if _member(n, graph.constants, layout)]
    if not any(n.op in CONVS and _conv_form(n, graph.constants, layout) == "depthwise"
               for n in members):
        return []
    region = {n: n for n in members}      # union-find over the members

    def root(n):
        while region[n] is not n:
            region[n] = region[region[n]]
            n = region[n]
        return n
    for n in members:
        for v in _layout_values(n, layout):
            if v.producer in region:
                region[root(n)] = root(v.producer)
    groups: dict = {}
    for n in members:
        groups.setdefault(root(n), []).append(n)
    read_by = live_readers(graph)
    return [g for g in groups.values() if _pays(g, graph, read_by, layout)]


def _edges(region: list, read_by: dict, layout: Layout) -> tuple[set, set]:
    """The values converted into the layout (4-D, read by the region, made outside it, not
    a ``permute`` of a value already so laid out: ``_source``) and back (4-D, made inside,
    read outside, not only by ``permute``s into the layout: ``_view_reader``, or
    returned)."""
    inside = set(region)
    into = {v for n in region for v in _layout_values(n, layout)
            if v.producer not in inside and _source(v, layout) is None}
    back = {v for n in region for v in n.outputs if v.ndim == 4
            and any(not isinstance(u, Node) or (u not in inside and not _view_reader(u, layout))
                    for u in read_by.get(v, []))}
    return into, back


def _source(v: Value, layout: Layout) -> Value | None:
    """The value whose data is ``v`` in the layout, where ``v`` is a ``permute`` of it (a
    channels-last ``(N, H, W, C)`` value permuted to NCHW, as code that normalises over
    channels writes): the region reads it with no conversion."""
    node = v.producer
    if (layout.view is None or not isinstance(node, Node) or node.op is not PERMUTE
            or tuple(node.attrs["perm"]) != layout.view[1]):
        return None
    src = node.inputs[0]
    return src if isinstance(src, Value) and src.dtype == v.dtype and src.ndim == 4 else None


def _view_reader(node: Node, layout: Layout) -> bool:
    """Whether ``node`` permutes a 4-D value into the layout's order: its result is the
    value in the layout, with no conversion."""
    return (layout.view is not None and node.op is PERMUTE and node.inputs[0].ndim == 4
            and tuple(node.attrs["perm"]) == layout.view[0])


def _pays(region: list, graph: Graph, read_by: dict, layout: Layout) -> bool:
    """The cost rule (module docstring)."""
    gain = sum(math.prod(n.inputs[0].shape) + math.prod(n.outputs[0].shape) for n in region
               if n.op in CONVS and _conv_form(n, graph.constants, layout) == "depthwise")
    into, back = _edges(region, read_by, layout)
    cost = RELAYOUT_COST * sum(math.prod(v.shape) for v in into | back)
    return gain > cost


def channels_last_regions(graph: Graph) -> list[list[Node]]:
    """The precondition of ``channels_last``: its regions that pay."""
    return _regions(graph, CHANNELS_LAST)


def channels_last_view_regions(graph: Graph) -> list[list[Node]]:
    """The precondition of ``channels_last_views``: the channels-last regions with nothing
    to convert at their edges, each value they read from outside a ``permute`` of a
    channels-last value and each value read outside read only by a ``permute`` into
    channels-last (code that normalises over channels between depthwise convs permutes
    each conv's input and output): their depthwise convs run channels-last at no cost."""
    read_by = live_readers(graph)
    return [r for r in _regions(graph, CHANNELS_LAST)
            if _edges(r, read_by, CHANNELS_LAST) == (set(), set())]


def channels_last(graph: Graph, regions: list, report: Report) -> Graph:
    """Each region of ``channels_last_regions`` runs in channels-last: a ``relayout`` to
    ``(N, H, W, C)`` of each 4-D value it reads from outside, its depthwise convs as
    ``depthwise_nhwc`` (the weight packed once as a constant ``(kh, kw, cp)``), its 1x1
    convs as ``pointwise_nhwc`` (the weight a constant ``(C, Cout)``), its
    means over dims ``(1, 2)``, its elementwise ops and reshapes as they are on the
    permuted shapes, and a ``relayout`` back to NCHW of each 4-D value read outside it.

    Preserves: types, inputs and outputs; values up to the rounding of the sums (the
    convs' and the mean's sums in another order). Below, the pooled result is 2-D, the same
    in both layouts: no conversion back.

    Before::

        graph(%x: f32[1,8,6,6]) {
          %w: f32[8,1,3,3] = constant
          %b: f32[8] = constant([0.0, 0.14285715, 0.2857143, 0.42857143, 0.5714286,
              0.71428573, 0.85714287, 1.0])
          %h: f32[1,8,6,6] = conv2d_epilogue(%x, %w, %b, act='relu', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
              groups=8)
          %y: f32[1,8,6,6] = conv2d(%h, %w, %b, stride=(1, 1), padding=((1, 1), (1, 1)),
              dilation=(1, 1), groups=8)
          %m: f32[1,8] = mean(%y, dims=(2, 3), keepdim=False)
          return (%m)
        }

    After::

        graph(%x: f32[1,8,6,6]) {
          %b: f32[8] = constant([0.0, 0.14285715, 0.2857143, 0.42857143, 0.5714286,
              0.71428573, 0.85714287, 1.0])
          %w_nhwc: f32[3,3,8] = constant
          %x_nhwc: f32[1,6,6,8] = relayout(%x, perm=(0, 2, 3, 1))
          %h: f32[1,6,6,8] = depthwise_nhwc(%x_nhwc, %w_nhwc, %b, act='relu', bounds=(-inf,
              inf), residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1,
              1))
          %y: f32[1,6,6,8] = depthwise_nhwc(%h, %w_nhwc, %b, act='none', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1))
          %m: f32[1,8] = mean(%y, dims=(1, 2), keepdim=False)
          return (%m)
        }
    """
    return _relayout(graph, regions, report, CHANNELS_LAST)


def channels_last_views(graph: Graph, regions: list, report: Report) -> Graph:
    """Each region of ``channels_last_view_regions`` in channels-last as ``channels_last``
    makes it, each value it reads a ``permute`` of a channels-last value read as that value
    and each ``permute`` into channels-last of a value it makes read as the value it makes:
    no conversion at all (a permute left unread goes with dead code).

    Preserves: types, inputs and outputs; values up to the rounding of the conv's sums
    (in another order).

    Before::

        graph(%x: f32[1,6,6,8]) {
          %w: f32[8,1,3,3] = constant
          %b: f32[8] = constant([0.0, 0.14285715, 0.2857143, 0.42857143, 0.5714286,
              0.71428573, 0.85714287, 1.0])
          %p: f32[1,8,6,6] = permute(%x, perm=(0, 3, 1, 2))
          %h: f32[1,8,6,6] = conv2d(%p, %w, %b, stride=(1, 1), padding=((1, 1), (1, 1)),
              dilation=(1, 1), groups=8)
          %y: f32[1,8,6,6] = add(%h, %p)
          %z: f32[1,6,6,8] = permute(%y, perm=(0, 2, 3, 1))
          return (%z)
        }

    After::

        graph(%x: f32[1,6,6,8]) {
          %b: f32[8] = constant([0.0, 0.14285715, 0.2857143, 0.42857143, 0.5714286,
              0.71428573, 0.85714287, 1.0])
          %w_nhwc: f32[3,3,8] = constant
          %p: f32[1,8,6,6] = permute(%x, perm=(0, 3, 1, 2))
          %h: f32[1,6,6,8] = depthwise_nhwc(%x, %w_nhwc, %b, act='none', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1))
          %y: f32[1,6,6,8] = add(%h, %x)
          return (%y)
        }
    """
    return _relayout(graph, regions, report, CHANNELS_LAST)


def blocked_channels_regions(graph: Graph) -> list[list[Node]]:
    """The precondition of ``blocked_channels``: its regions that pay."""
    return _regions(graph, BLOCKED)


def blocked_channels(graph: Graph, regions: list, report: Report) -> Graph:
    """Each region of ``blocked_channels_regions`` runs in the channel-blocked layout
    ``(N, C/8, H, W, 8)``: a ``block_channels`` of each 4-D value it reads from outside, its
    depthwise convs as ``depthwise_blocked`` (the weight as it is), its 1x1 convs as
    ``pointwise_blocked`` (the weight a constant packed by ``conv_blocked.pack``), a
    first layer of few channels whose output it reads as ``shallow_blocked`` (its NCHW
    input read as it is), its
    ``squeeze_excite`` ops as ``squeeze_excite_blocked`` (the pooled gate and the scale on
    the blocks: no conversions around them), its means over dims ``(2, 3)`` (a mean that
    drops them reshaped to ``(N, C)``: the same floats in the same order), its elementwise
    ops and reshapes as they are on the blocked shapes, and an ``unblock_channels`` of each
    4-D value read outside it.

    Preserves: types, inputs and outputs; values up to the rounding of the sums (the
    convs' sums start from the bias).

    Before::

        graph(%x: f32[1,8,6,6]) {
          %w: f32[8,1,3,3] = constant
          %b: f32[8] = constant([0.0, 0.14285715, 0.2857143, 0.42857143, 0.5714286,
              0.71428573, 0.85714287, 1.0])
          %h: f32[1,8,6,6] = conv2d_epilogue(%x, %w, %b, act='relu', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
              groups=8)
          %y: f32[1,8,6,6] = conv2d(%h, %w, %b, stride=(1, 1), padding=((1, 1), (1, 1)),
              dilation=(1, 1), groups=8)
          %m: f32[1,8] = mean(%y, dims=(2, 3), keepdim=False)
          return (%m)
        }

    After::

        graph(%x: f32[1,8,6,6]) {
          %b: f32[8] = constant([0.0, 0.14285715, 0.2857143, 0.42857143, 0.5714286,
              0.71428573, 0.85714287, 1.0])
          %w: f32[8,1,3,3] = constant
          %x_blocked: f32[1,1,6,6,8] = block_channels(%x)
          %h: f32[1,1,6,6,8] = depthwise_blocked(%x_blocked, %w, %b, act='relu',
              bounds=(-inf, inf), residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)),
              dilation=(1, 1))
          %y: f32[1,1,6,6,8] = depthwise_blocked(%h, %w, %b, act='none', bounds=(-inf,
              inf), residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1,
              1))
          %m: f32[1,1,8] = mean(%y, dims=(2, 3), keepdim=False)
          %m_flat: f32[1,8] = reshape(%m, shape=(1, 8))
          return (%m_flat)
        }
    """
    return _relayout(graph, regions, report, BLOCKED)


def _relayout(graph: Graph, regions: list, report: Report, layout: Layout) -> Graph:
    """The regions rewritten in ``layout`` (``channels_last``'s docstring)."""
    read_by = live_readers(graph)
    member, back = {}, set()
    for region in regions:
        member.update(dict.fromkeys(region, True))
        back |= _edges(region, read_by, layout)[1]
        report.count(f"{layout.name} regions", f"{len(region)} nodes from "
                                               f"%{region[0].outputs[0].name}")
    b = Builder(graph)
    laid, weights = {}, {}

    def inside(v):
        """The value's form in the layout, for a member reading it."""
        if not isinstance(v, Value) or v.ndim != 4:
            return b.get(v)
        if v not in laid and _source(v, layout) is not None:
            laid[v] = b.get(_source(v, layout))
            report.count("permutes read as they are", f"%{v.name}")
        elif v not in laid:
            (laid[v],) = b.add(layout.to[0], [b.get(v)], layout.to[1], None,
                               [v.name + layout.suffix])
            report.count("relayouts", f"%{v.name} to {layout.name}")
        return laid[v]

    def constant(w, form):
        if (w, form) not in weights:
            arr = layout.pack(form, graph.constants[w])
            weights[w, form] = b.get(w) if arr is None else b.graph.add_constant(
                arr, name=w.name + layout.suffix)
        return weights[w, form]

    for node in graph.nodes:
        if node not in member and _view_reader(node, layout) and node.inputs[0] in laid:
            b.env[node.outputs[0]] = laid[node.inputs[0]]    # (the value as it is laid out)
            report.count("permutes read as they are", f"%{node.outputs[0].name}")
            continue
        if node not in member:
            b.copy(node)
            continue
        y = _rewrite(node, b, inside, constant, graph, layout)
        if node.outputs[0].ndim == 4:
            laid[node.outputs[0]] = y
            if node.outputs[0] in back:
                (b.env[node.outputs[0]],) = b.add(layout.back[0], [y], layout.back[1], None,
                                                  [node.outputs[0].name + "_nchw"])
                report.count("relayouts", f"%{node.outputs[0].name} back to NCHW")
        else:
            b.env[node.outputs[0]] = y
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


def _rewrite(node: Node, b: Builder, inside, constant, graph: Graph,
             layout: Layout) -> Value:
    """The node in ``layout`` for the member ``node``; its output."""
    name = [node.outputs[0].name]
    if node.op is SQUEEZE_EXCITE:
        operands = [inside(node.inputs[0]), *map(b.get, node.inputs[1:])]
        return b.add(layout.ops["excite"], operands, node.attrs, node.location, name)[0]
    if node.op not in CONVS:
        attrs = dict(node.attrs)
        if node.op is MEAN:
            attrs["dims"] = layout.mean_dims
        y = b.add(node.op, [inside(v) for v in node.inputs], attrs, node.location, name)[0]
        if node.outputs[0].ndim != 4 and y.ndim != node.outputs[0].ndim:   # (N, C/8, 8)
            y = b.add(RESHAPE, [y], {"shape": tuple(node.outputs[0].shape)}, node.location,
                      [name[0] + "_flat"])[0]
        return y
    x, w, *rest = node.inputs
    form = _conv_form(node, graph.constants, layout)
    bias = rest[0] if rest else None
    residual = rest[1:]
    epi = {k: node.attrs[k] for k in ("act", "bounds", "residual_at")} if (
        node.op is CONV2D_EPILOGUE) else dict(act="none", bounds=(-np.inf, np.inf),
                                             residual_at=None)
    if bias is None:
        bias = b.graph.add_constant(np.zeros(w.shape[0], np.float32), name=w.name + "_bias")
    else:
        bias = b.get(bias)
    operands = [b.get(x) if form == "shallow" else inside(x), constant(w, form), bias,
                *[inside(r) for r in residual]]
    if form in ("depthwise", "shallow"):
        epi.update({k: node.attrs[k] for k in ("stride", "padding", "dilation")})
    return b.add(layout.ops[form], operands, epi, node.location, name)[0]


def _pack_nhwc(form, w):
    return (kernels.conv_nhwc.pack(w) if form == "depthwise"
            else np.ascontiguousarray(w.reshape(w.shape[:2]).T))


CHANNELS_LAST = Layout(
    "channels-last", (RELAYOUT, {"perm": TO_NHWC}), (RELAYOUT, {"perm": TO_NCHW}),
    {"depthwise": DEPTHWISE_NHWC, "pointwise": POINTWISE_NHWC}, _pack_nhwc, (1, 2),
    holds=lambda v: True, takes=lambda form, x, w: True, suffix="_nhwc",
    view=(TO_NHWC, TO_NCHW))

BLOCKED = Layout(
    "blocked", (BLOCK_CHANNELS, {}), (UNBLOCK_CHANNELS, {}),
    {"depthwise": DEPTHWISE_BLOCKED, "pointwise": POINTWISE_BLOCKED,
     "shallow": SHALLOW_BLOCKED, "excite": SQUEEZE_EXCITE_BLOCKED},
    lambda form, w: kernels.conv_blocked.pack(w) if form == "pointwise" else None, (2, 3),
    holds=lambda v: v.shape[1] % 8 == 0,
    takes=lambda form, x, w: kernels.conv_blocked.blockable(
        tuple(x.shape), tuple(w.shape), 1 if form == "pointwise" else w.shape[0]) == form,
    suffix="_blocked")
