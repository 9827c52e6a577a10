"""A convolution whose kernel tiles its input without overlap as a linear layer over the
tiles: the lowering rule ``patchify_conv`` (its row is in ``passes/lower.py``).

A conv whose kernel equals its stride, without padding or dilation, of one group (a
patchify stem, ViT's 16x16/16 patch embedding, ConvNeXt's 2x2/2 downsampling) reads each
input pixel once: every output pixel is one patch of ``C*kh*kw`` inputs times the weight.
That is space-to-depth (a reshape, a permute and a copy of the input, no overlap, no
im2col growth) then a linear layer of ``Cout`` outputs over the patches, which takes the
rules and kernels written for linears (``linear_epilogue``, ``linear_packed``), where the
conv loops spend most of their time on a few taps per output. The result is the linear's
``(N, Ho, Wo, Cout)`` seen as NCHW by a ``permute`` view: a reader that permutes back to
channels last (LayerNorm over channels) then reads the rows as the linear wrote them
(``simplify`` composes the two permutes).

Where the conv's input is itself a ``permute`` view of a channels-last tensor, the patches
are cut from that tensor (their ``kw * C`` values contiguous, the weight's taps reordered
to match), so the copy reads whole runs. Rows and columns past the last whole patch are
dropped, as the conv drops them.
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Node, Value
from ..ops.conv import CONV2D
from ..ops.linalg import BLAS_DTYPES, LINEAR
from ..ops.shape import PERMUTE, RESHAPE, SLICE
from ..shapes import is_static
from .core import Report, rebuild

TO_NCHW = (0, 3, 1, 2)     # a channels-last (N, H, W, C) tensor seen as (N, C, H, W)
# The shortest run of an input row the patches' copy reads at once (a cache line): NumPy's
# copy of a 4x4/4 stem's NCHW patches (runs of 16 bytes) took 0.21 ms at 3 x 224 x 224, two
# thirds of the conv it would replace; 16x16/16's runs of 64 bytes 0.05 ms
MIN_RUN_BYTES = 64


def patchify_convs(graph: Graph) -> list[Node]:
    """The precondition of ``patchify_conv``: the ``conv2d`` nodes of one group whose
    kernel equals their stride, without padding or dilation, on a static 4-D input of a
    float32/float64 dtype, whose weight (and bias, if any) are constants of that dtype, and
    whose patches are copied in runs of ``MIN_RUN_BYTES`` or more (``_run``)."""
    found = []
    for node in graph.nodes:
        if node.op is not CONV2D:
            continue
        x, w, *bias = node.inputs
        a = node.attrs
        if (isinstance(x, Value) and x.ndim == 4 and is_static(x.shape)
                and x.dtype in BLAS_DTYPES and a["groups"] == 1
                and tuple(a["stride"]) == tuple(w.shape[2:])
                and not np.any(a["padding"]) and all(d == 1 for d in a["dilation"])
                and all(v in graph.constants and v.dtype == x.dtype for v in (w, *bias))
                and _run(x, w) * x.dtype.itemsize >= MIN_RUN_BYTES):
            found.append(node)
    return found


def _channels_last_source(x: Value) -> Value | None:
    """The channels-last tensor ``x`` is a ``permute`` view of, else None."""
    p = x.producer
    return p.inputs[0] if p is not None and p.op is PERMUTE and tuple(
        p.attrs["perm"]) == TO_NCHW else None


def _run(x: Value, w: Value) -> int:
    """How many values of the input a patch's copy reads at once: a kernel row of all the
    channels (``kw * C``) from a channels-last tensor, ``kw`` from an NCHW one."""
    return w.shape[3] * (w.shape[1] if _channels_last_source(x) is not None else 1)


def patchify_conv(graph: Graph, convs: list, report: Report) -> Graph:
    """Each conv of ``patchify_convs`` becomes its input's whole patches (``slice`` where
    rows or columns are left over, ``reshape``, ``permute``, ``reshape``: one copy), a
    ``linear`` of the weight as ``(Cout, C*kh*kw)`` (a new constant, taps in the patches'
    order) and the conv's bias, and a ``permute`` of its result to NCHW, named as the conv.

    Preserves: types, inputs and outputs; values up to rounding (the same sums of
    ``C*kh*kw`` products, which the linear's kernel may add in another order).

    Before::

        graph(%x: f32[1,3,33,32]) {
          %w: f32[5,3,16,16] = constant
          %y: f32[1,5,2,2] = conv2d(%x, %w, stride=(16, 16), padding=((0, 0), (0, 0)),
              dilation=(1, 1), groups=1)
          return (%y)
        }

    After::

        graph(%x: f32[1,3,33,32]) {
          %w_patches: f32[5,768] = constant
          %y_whole: f32[1,3,32,32] = slice(%x, index=(None, None, (0, 32, 1), None))
          %y_tiles: f32[1,3,2,16,2,16] = reshape(%y_whole, shape=(1, 3, 2, 16, 2, 16))
          %y_taps: f32[1,2,2,3,16,16] = permute(%y_tiles, perm=(0, 2, 4, 1, 3, 5))
          %y_patches: f32[1,2,2,768] = reshape(%y_taps, shape=(1, 2, 2, 768))
          %y_rows: f32[1,2,2,5] = linear(%y_patches, %w_patches)
          %y: f32[1,5,2,2] = permute(%y_rows, perm=(0, 3, 1, 2))
          return (%y)
        }
    """
    def emit(b, node, _):
        x, w, *bias = node.inputs
        out = node.outputs[0]
        n, cout, ho, wo = out.shape
        kh, kw = w.shape[2:]
        source = _channels_last_source(x)
        last = source is not None
        v = b.get(source if last else x)
        weight = graph.constants[w]
        c = weight.shape[1]
        h_at, w_at = (1, 2) if last else (2, 3)
        if v.shape[h_at] != ho * kh or v.shape[w_at] != wo * kw:
            index = [None] * 4
            for at, whole in ((h_at, ho * kh), (w_at, wo * kw)):
                index[at] = (0, whole, 1) if v.shape[at] != whole else None
            (v,) = b.add(SLICE, [v], {"index": tuple(index)}, node.location,
                         [out.name + "_whole"])
        if last:    # (N, H, W, C) -> (N, Ho, kh, Wo, kw, C) -> (N, Ho, Wo, kh, kw, C)
            tiles, perm = (n, ho, kh, wo, kw, c), (0, 1, 3, 2, 4, 5)
            weight = weight.transpose(0, 2, 3, 1)
        else:       # (N, C, H, W) -> (N, C, Ho, kh, Wo, kw) -> (N, Ho, Wo, C, kh, kw)
            tiles, perm = (n, c, ho, kh, wo, kw), (0, 2, 4, 1, 3, 5)
        (v,) = b.add(RESHAPE, [v], {"shape": tiles}, node.location, [out.name + "_tiles"])
        (v,) = b.add(PERMUTE, [v], {"perm": perm}, node.location, [out.name + "_taps"])
        (v,) = b.add(RESHAPE, [v], {"shape": (n, ho, wo, c * kh * kw)}, node.location,
                     [out.name + "_patches"])
        w2 = b.graph.add_constant(np.ascontiguousarray(weight.reshape(cout, -1)),
                                  name=w.name + "_patches")
        (v,) = b.add(LINEAR, [v, w2, *[b.get(u) for u in bias]], {}, node.location,
                     [out.name + "_rows"])
        (b.env[out],) = b.add(PERMUTE, [v], {"perm": TO_NCHW}, node.location, [out.name])
        report.count("patchify convs", f"%{out.name}: {kh}x{kw}/{kh}x{kw} conv -> linear "
                                       f"over {'channels-last ' if last else ''}patches")
    new = rebuild(graph, {node: None for node in convs}, set(), emit)
    report.nodes_after = len(new.nodes)
    return new
