"""The ``conv_prologue`` lowering rule: a per-channel scale, shift and activation before a
1x1 convolution (an eval-mode BatchNorm and its ReLU that cannot fold into the layer
before it: that is a concatenation, a sum, a pooling) becomes the prologue of the conv's
input read, ``conv2d_prologue`` (``ops/prologue.py``): the 1x1 loop applies it to each
block of input rows as it takes the block up, so the normalised input is never written.

The precondition, per ``conv2d_packed`` node of a 1x1 kernel that
``kernels/conv_pointpacked.py``'s loop takes (stride 1, no padding, one group, float32):
its input is the one output of a ``fused`` node (the elementwise fusion's group) read by
this conv only (not by another node, not returned), whose subgraph is exactly a
per-channel affine chain (``passes/affine.py``: ``add``/``sub``/``mul``/``div`` by
constants that vary along the channels only: BatchNorm after ``fold_constants``) and/or
one activation of ``conv_epilogue``'s spellings (``passes/epilogue.py``) that
``PROLOGUE_ACTS`` holds (ReLU, clamp: ReLU6) of one 4-D input, its other inputs
constants. A group that also computes something else, or whose output another node reads
(then the normalised input must exist anyway), stays.
The rule runs at the ``kernels`` stage, after ``conv_packed`` has chosen the conv's loop.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..graph import Graph, Node
from ..ops.epilogue import CONV2D_PACKED
from ..ops.fused import FUSED
from ..ops.prologue import CONV2D_PROLOGUE, PROLOGUE_ACTS
from .affine import _affine_chain
from .core import Report, live_readers, needed, only_reader, rebuild
from .epilogue import _activation


def conv_prologues(graph: Graph) -> dict:
    """The precondition (the module docstring): ``{conv node: (fused node, x, scale,
    shift, act, bounds)}``."""
    if not kernels.numba_available():
        return {}
    live = live_readers(graph)
    found = {}
    for node in graph.nodes:
        if node.op is not CONV2D_PACKED:   # (before its input: a node may have none)
            continue
        x = node.inputs[0]
        group = getattr(x, "producer", None)
        if (group is None or group.op is not FUSED
                or only_reader(live, x) is not node or x.dtype != np.float32
                or not _pointwise(node)):
            continue
        plan = _prologue_of(graph, group)
        if plan is not None:
            found[node] = (group, *plan)
    return found


def _pointwise(conv: Node) -> bool:
    """Whether the 1x1 loop takes ``conv`` (a ``conv2d_packed``)."""
    a, x = conv.attrs, conv.inputs[0]
    w_shape = (a["out_channels"], x.shape[1], *a["kernel_size"])
    return a["groups"] == 1 and kernels.conv_pointpacked.wins(
        tuple(x.shape), w_shape, a["stride"], a["padding"], a["dilation"], 1, np.float32)


def _prologue_of(graph: Graph, group: Node):
    """``(x, scale, shift, act, bounds)`` where ``group``'s subgraph is ``act(x * scale +
    shift)`` per channel of its one non-constant input ``x`` (an outer value); else None."""
    sub = group.attrs["graph"]
    outer = dict(zip(sub.inputs, group.inputs))
    arrays = {v: graph.constants[u] for v, u in outer.items() if u in graph.constants}
    data = [v for v in sub.inputs if v not in arrays]
    if (len(sub.outputs) != 1 or len(data) != 1
            or tuple(data[0].shape) != tuple(sub.outputs[0].shape)):
        return None
    live = live_readers(sub)
    chain = _affine_chain(data[0], -3, arrays, live)
    steps, scale, shift = chain or ([], np.ones(data[0].shape[1]), np.zeros(data[0].shape[1]))
    v = steps[-1].outputs[0] if steps else data[0]
    act = _activation(v, live)
    name, bounds, nodes, v = act if act is not None else ("none", (-np.inf, np.inf), [], v)
    if (v is not sub.outputs[0] or not steps + nodes or len(steps + nodes) != len(sub.nodes)
            or name not in PROLOGUE_ACTS):
        return None
    return outer[data[0]], scale, shift, name, bounds


def conv_prologue(graph: Graph, plans: dict, report: Report) -> Graph:
    """Each conv of ``conv_prologues`` and the group before it become one
    ``conv2d_prologue`` at the conv's place, named as its output, reading the group's input
    and the scale and shift as new float32 constants (composed in float64). Dead nodes are
    dropped.

    Preserves: types, inputs and outputs; values up to rounding (``x * scale + shift`` is
    one multiply-add, the chain's steps composed once).

    Before::

        graph(%x: f32[1,16,4,4]) {
          %s: f32[16,1,1] = constant
          %t: f32[16,1,1] = constant
          %wp: f32[1,16,16] = constant
          %b: f32[16] = constant
          %h: f32[1,16,4,4] = fused(%x, %s, %t, graph=@graph)
            @graph = graph(%x: f32[1,16,4,4], %s: f32[16,1,1], %t: f32[16,1,1]) {
              %m: f32[1,16,4,4] = mul(%x, %s)
              %a: f32[1,16,4,4] = add(%m, %t)
              %h: f32[1,16,4,4] = relu(%a)
              return (%h)
            }
          %y: f32[1,16,4,4] = conv2d_packed(%h, %wp, %b, act='none', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1),
              kernel_size=(1, 1), out_channels=16, groups=1)
          return (%y)
        }

    After::

        graph(%x: f32[1,16,4,4]) {
          %h_scale: f32[16] = constant
          %h_shift: f32[16] = constant
          %wp: f32[1,16,16] = constant
          %b: f32[16] = constant
          %y: f32[1,16,4,4] = conv2d_prologue(%x, %h_scale, %h_shift, %wp, %b,
              pre_act='relu', pre_bounds=(-inf, inf), act='none', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1),
              kernel_size=(1, 1), out_channels=16, groups=1)
          return (%y)
        }
    """
    live = needed(graph)
    dropped = {plan[0] for plan in plans.values()}
    dropped |= {n for n in graph.nodes if not any(v in live for v in n.outputs)}

    def emit(b, conv, plan):
        group, x, scale, shift, act, bounds = plan
        h = group.outputs[0]
        s = b.graph.add_constant(scale.astype(np.float32), name=f"{h.name}_scale")
        t = b.graph.add_constant(shift.astype(np.float32), name=f"{h.name}_shift")
        out = conv.outputs[0]
        (b.env[out],) = b.add(CONV2D_PROLOGUE, [b.get(x), s, t, *map(b.get, conv.inputs[1:])],
                              dict(pre_act=act, pre_bounds=bounds, **conv.attrs),
                              conv.location, [out.name])
        report.count("prologues", f"%{h.name} ({act}) -> {CONV2D_PROLOGUE.name} %{out.name}")
    new = rebuild(graph, plans, dropped, emit)
    report.nodes_after = len(new.nodes)
    return new
