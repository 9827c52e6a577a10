"""The ``conv_cat`` lowering rule: a concatenation along the channels of convolutions'
results (parallel conv branches joined along the channels) becomes one ``conv2d_cat``
(``ops/epilogue.py``), whose kernel has each convolution write into its own channels of
the one output: the branches' arrays and the copy that joined them are gone.

The precondition, per ``cat`` node: it joins two or more values along dim 1 of a 4-D
result; each is the output of a ``conv2d``, ``conv2d_epilogue``, ``conv2d_packed`` or
``conv2d_winograd`` node that nothing else reads or returns, each read once by the cat;
all of one dtype. The rule runs at the ``kernels`` stage, after ``conv_winograd`` and
``conv_packed``: each member keeps the kernel those rules chose for it by their cost
rules (a 3x3 branch by Winograd's loops, writing its inverse transform's rows into its
channels of the concatenation), and the convs' weights are laid out before the rule sees
them. A cat with any other input (a pooling branch, a
value read elsewhere: it would need its own array) or along another dim stays as it is.
Aliasing is safe by construction: each member writes only its own channels of a fresh
array no other node sees until the node returns.
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph
from ..ops.conv import CONV2D
from ..ops.epilogue import CAT_MEMBERS, CONV2D_CAT, CONV2D_EPILOGUE, cat_member
from ..ops.shape import CAT
from .core import Builder, Report, live_readers, needed, only_reader

# the producers a cat's inputs may have: a plain conv becomes an epilogue conv without one
MEMBERS = (CONV2D, *CAT_MEMBERS.values())


def conv_cats(graph: Graph) -> dict:
    """The precondition (see the module docstring): ``{cat node: [its producers]}``."""
    live = live_readers(graph)
    found = {}
    for node in graph.nodes:
        out = node.outputs[0]
        if node.op is not CAT or out.ndim != 4 or node.attrs["dim"] % 4 != 1:
            continue
        producers = [getattr(v, "producer", None) for v in node.inputs]
        if (len(producers) > 1 and len(set(map(id, producers))) == len(producers)
                and all(p is not None and p.op in MEMBERS
                        and only_reader(live, p.outputs[0]) is node
                        and p.outputs[0].dtype == out.dtype for p in producers)):
            found[node] = producers
    return found


def conv_cat(graph: Graph, plans: dict, report: Report) -> Graph:
    """Each cat of ``conv_cats`` and its producers become one ``conv2d_cat`` at the cat,
    named as its output (a plain ``conv2d`` a member with no activation; a zero bias
    constant where it had none). Dead nodes are dropped.

    Preserves: types, inputs and outputs, and values bit for bit (each member is the
    kernel its node ran, writing elsewhere).

    Before::

        graph(%x: f32[1,2,4,4], %w: f32[3,2,1,1], %b: f32[3], %v: f32[3,2,3,3]) {
          %y: f32[1,3,4,4] = conv2d(%x, %w, %b, stride=(1, 1), padding=((0, 0), (0, 0)),
              dilation=(1, 1), groups=1)
          %z: f32[1,3,4,4] = conv2d_epilogue(%x, %v, %b, act='relu', bounds=(-inf, inf),
              residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
              groups=1)
          %c: f32[1,6,4,4] = cat(%y, %z, dim=1)
          return (%c)
        }

    After::

        graph(%x: f32[1,2,4,4], %w: f32[3,2,1,1], %b: f32[3], %v: f32[3,2,3,3]) {
          %c: f32[1,6,4,4] = conv2d_cat(%x, %w, %b, %x, %v, %b, members=(('conv2d_epilogue',
              3, 'none', (-inf, inf), None, (1, 1), ((0, 0), (0, 0)), (1, 1), 1),
              ('conv2d_epilogue', 3, 'relu', (-inf, inf), None, (1, 1), ((1, 1), (1, 1)),
              (1, 1), 1)))
          return (%c)
        }
    """
    skip = {p for producers in plans.values() for p in producers}
    live = needed(graph)
    b = Builder(graph)
    for node in graph.nodes:
        if not any(v in live for v in node.outputs) or node in skip:
            continue
        if node not in plans:
            b.copy(node)
            continue
        inputs, members = [], []
        for p in plans[node]:
            x, w, *rest = [b.get(v) for v in p.inputs]
            op, attrs = p.op, p.attrs
            if op is CONV2D:
                bias = rest[0] if rest and rest[0] is not None else b.graph.add_constant(
                    np.zeros(w.shape[0], p.outputs[0].dtype), name=f"{p.outputs[0].name}_bias")
                rest = [bias]
                op = CONV2D_EPILOGUE
                attrs = dict(attrs, act="none", bounds=(-np.inf, np.inf), residual_at=None)
            inputs += [x, w, *rest]
            members.append(cat_member(op, 2 + len(rest), attrs))
        (b.env[node.outputs[0]],) = b.add(CONV2D_CAT, inputs, dict(members=tuple(members)),
                                          node.location, [node.outputs[0].name])
        report.count("concatenations written in place",
                     f"%{node.outputs[0].name}: {len(members)} convs -> {CONV2D_CAT.name}")
    report.nodes_after = len(b.graph.nodes)
    return b.finish()
