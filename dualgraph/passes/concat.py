"""The ``conv_cat`` and ``cat_in_place`` lowering rules.

``conv_cat``: a concatenation along the channels of convolutions'
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

``cat_in_place``: a chain of concatenations each extending the one before, ``c_i =
cat(c_{i-1}, y_i, ...)`` (a dense block: every layer's output joined to all before it),
copies the whole growing value at every link, quadratic in the chain's length. The rule
makes the last link's buffer once, at the first link (``cat_grown``: the first block,
then zeros), writes each later block into it (``slice_update_in_place``; a conv's output
read by the link only is written there by the conv itself: ``conv2d_into``), and makes
each ``c_i`` a slice of it (the last the buffer itself): each block is copied once at
most. The
precondition, per chain: each link a ``cat`` of static shape along one dim whose inputs
share its dtype; each ``c_i`` but the last extended by exactly one ``cat`` (its first
input, once), not returned. Aliasing is safe: a write fills the block after every
earlier ``c_j``, which no slice of the chain reads, and the buffer's storage is live
while any slice of it is (the writes are views to the memory plan).
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph
from ..ops.conv import CONV2D
from ..ops.epilogue import CAT_MEMBERS, CONV2D_CAT, CONV2D_EPILOGUE, CONV2D_INTO, cat_member
from ..graph import Node
from ..ops.shape import CAT, CAT_GROWN, SLICE, SLICE_UPDATE_IN_PLACE
from ..shapes import is_static
from .core import Builder, Report, live_readers, needed, only_reader, rebuild

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
            args, member = _member(b, p)
            inputs += args
            members.append(member)
        (b.env[node.outputs[0]],) = b.add(CONV2D_CAT, inputs, dict(members=tuple(members)),
                                          node.location, [node.outputs[0].name])
        report.count("concatenations written in place",
                     f"%{node.outputs[0].name}: {len(members)} convs -> {CONV2D_CAT.name}")
    report.nodes_after = len(b.graph.nodes)
    return b.finish()


def _member(b: Builder, p: Node) -> tuple[list, tuple]:
    """The inputs (in ``b``'s graph) and the ``members`` entry of the conv ``p`` as a
    member of ``conv2d_cat`` or ``conv2d_into`` (a plain ``conv2d`` as a
    ``conv2d_epilogue`` without an activation; a zero bias constant where it had none)."""
    x, w, *rest = [b.get(v) for v in p.inputs]
    op, attrs = p.op, p.attrs
    if op is CONV2D:
        bias = rest[0] if rest and rest[0] is not None else b.graph.add_constant(
            np.zeros(w.shape[0], p.outputs[0].dtype), name=f"{p.outputs[0].name}_bias")
        rest = [bias]
        op = CONV2D_EPILOGUE
        attrs = dict(attrs, act="none", bounds=(-np.inf, np.inf), residual_at=None)
    return [x, w, *rest], cat_member(op, 2 + len(rest), attrs)


def cat_chains(graph: Graph) -> list[list[Node]]:
    """The precondition of ``cat_in_place`` (the module docstring): each chain of two
    links or more, in order."""
    live = live_readers(graph)
    links = [n for n in graph.nodes if n.op is CAT and is_static(n.outputs[0].shape)
             and all(getattr(x, "dtype", None) == n.outputs[0].dtype for x in n.inputs)]
    dim = {n: n.attrs["dim"] % n.outputs[0].ndim for n in links}
    after = {}
    for n in links:
        v = n.outputs[0]
        users = live.get(v, [])
        extending = [u for u in users if u in dim and u.inputs[0] is v and dim[u] == dim[n]]
        if (len(extending) == 1 and all(isinstance(u, Node) for u in users)
                and sum(x is v for x in extending[0].inputs) == 1):
            after[n] = extending[0]
    chains = []
    for n in links:
        if n in after.values():
            continue
        chain = [n]
        while chain[-1] in after:
            chain.append(after[chain[-1]])
        if len(chain) > 1:
            chains.append(chain)
    return chains


def cat_in_place(graph: Graph, chains: list, report: Report) -> Graph:
    """Each chain of ``cat_chains`` grown in one buffer: the first link's first input a
    ``cat_grown`` to the last link's size, each later block a ``slice_update_in_place``
    (where it is the output of a conv that ``conv2d_cat`` takes as a member, read by the
    link only, along the channels of a 4-D value: a ``conv2d_into``, the conv writing its
    block itself), each link but the last a ``slice`` of the buffer named as it, the last
    the buffer. Dead nodes are dropped.

    Preserves: types, inputs and outputs, and values bit for bit (the same copies, into
    one buffer; each conv by the kernel its node ran, writing elsewhere).

    Before::

        graph(%x: f32[1,2,3], %y: f32[1,1,3], %z: f32[1,2,3]) {
          %c: f32[1,3,3] = cat(%x, %y, dim=1)
          %d: f32[1,5,3] = cat(%c, %z, dim=1)
          %e: f32[1,3,3] = exp(%c)
          return (%d, %e)
        }

    After::

        graph(%x: f32[1,2,3], %y: f32[1,1,3], %z: f32[1,2,3]) {
          %c_grown: f32[1,5,3] = cat_grown(%x, dim=1, size=5)
          %c_grown_1: f32[1,5,3] = slice_update_in_place(%c_grown, %y, index=(None, (2, 3,
              1), None))
          %c: f32[1,3,3] = slice(%c_grown_1, index=(None, (0, 3, 1), None))
          %d: f32[1,5,3] = slice_update_in_place(%c_grown_1, %z, index=(None, (3, 5, 1),
              None))
          %e: f32[1,3,3] = exp(%c)
          return (%d, %e)
        }
    """
    live = live_readers(graph)
    plans, written = {}, {}
    for chain in chains:
        for k, link in enumerate(chain):
            plans[link] = (chain, k)
            for y in link.inputs[1:]:
                p = getattr(y, "producer", None)
                if (link.attrs["dim"] == 1 and y.ndim == 4 and p is not None
                        and p.op in MEMBERS and only_reader(live, y) is link):
                    written[y] = p    # (the conv writes its block: conv2d_into)

    def emit(b, link, plan):
        chain, k = plan
        out, last = link.outputs[0], chain[-1].outputs[0]
        d = link.attrs["dim"]
        index = lambda start, stop: tuple((start, stop, 1) if i == d else None
                                          for i in range(out.ndim))
        if k == 0:
            (buf,) = b.add(CAT_GROWN, [b.get(link.inputs[0])], dict(dim=d, size=last.shape[d]),
                           link.location, [f"{out.name}_grown"])
            report.count("concatenations grown in place",
                         f"%{out.name} .. %{last.name}: {len(chain)} links")
        else:
            buf = b.env[chain[k - 1].outputs[0]].producer.inputs[0]
        at = link.inputs[0].shape[d]
        for i, y in enumerate(link.inputs[1:]):
            name = out.name if link is chain[-1] and i == len(link.inputs) - 2 else \
                f"{out.name}_grown"
            if y in written:
                args, member = _member(b, written[y])
                (buf,) = b.add(CONV2D_INTO, [buf, *args], dict(members=(member,), at=at),
                               link.location, [name])
            else:
                (buf,) = b.add(SLICE_UPDATE_IN_PLACE, [buf, b.get(y)],
                               dict(index=index(at, at + y.shape[d])), link.location, [name])
            at += y.shape[d]
        if link is chain[-1]:
            b.env[out] = buf
        else:
            (b.env[out],) = b.add(SLICE, [buf], dict(index=index(0, out.shape[d])),
                                  link.location, [out.name])
    new = rebuild(graph, plans, set(written.values()), emit)
    report.nodes_after = len(new.nodes)
    return new
