"""The ``attention`` op: ``softmax(q @ kt * scale + mask) @ v`` as one kernel.

Made by the lowering rule ``fuse_attention`` (``passes/attention.py``) from the ops user
code, ``F.scaled_dot_product_attention`` and torch's ONNX export write (a ``matmul``, a
scale, a mask added or filled in, a ``softmax`` over the keys, a ``matmul`` by the
values), where nothing else reads the scores or the weights (inference: a training
graph's backward reads the weights, and keeps the ops). Its kernel runs one head block at
a time (``kernels/attention.py``); where that loop cannot run (no Numba, not float32, an
operand's matrices not ones BLAS reads as they are) it runs the ops' own kernels in turn.

Operands: ``q`` (..., Lq, E), ``kt`` (..., E, Lk) (the second operand of the first
product: a transposed view of the keys), ``v`` (..., Lk, Ev), and optionally ``mask``
broadcastable to (..., Lq, Lk). Attrs: ``scale`` (the scores are multiplied by it, or
divided with ``divide``), ``fill`` (None: the mask is added; a number: it replaces the
scores where the bool mask is True, as ``masked_fill``), ``heads_out`` (the result's dims
-3 and -2 swapped: (..., Lq, H, Ev), as a following ``transpose(1, 2)`` gives it).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes, kernels
from ..shapes import ShapedType, ShapeError, broadcast_shapes
from . import elementwise, linalg, reduce
from . import shape as shape_ops
from .opdef import REGISTRY, defop

__all__: list = []   # internal: a lowering rule makes it, users don't call it


def _attention_kernel(q, kt, v, *mask, scale, divide, fill, heads_out):
    m = mask[0] if mask else None
    if kernels.numba_available() and kernels.attention.wanted(q, kt, v):
        out = kernels.attention.attend(q, kt, v, m, scale, divide, fill, heads_out)
        if out is not None:
            return out
    s = _run("matmul", q, kt)
    s = _run("div" if divide else "mul", s, scale)
    if m is not None:
        s = _run("where", m, fill, s) if fill is not None else _run("add", s, m)
    out = _run("matmul", _run("softmax", s, dim=s.ndim - 1), v)
    return np.ascontiguousarray(np.swapaxes(out, -2, -3)) if heads_out else out


def _run(name: str, *args, **attrs):
    """The kernel of the op ``name`` (the ops the attention stands for, one by one)."""
    return REGISTRY[name].kernel(*args, **attrs)


def _infer_attention(q, kt, v, *mask, scale, divide, fill, heads_out):
    sq, sk, sv = tuple(q.shape), tuple(kt.shape), tuple(v.shape)
    if min(len(sq), len(sk), len(sv)) < 2 or sq[-1] != sk[-2] or sk[-1] != sv[-2]:
        raise ShapeError(f"attention: q {sq}, kt {sk} and v {sv} do not fit: q (..., Lq, E), "
                         "kt (..., E, Lk), v (..., Lk, Ev)")
    batch = broadcast_shapes(sq[:-2], sk[:-2], sv[:-2])
    if mask:
        broadcast_shapes(tuple(mask[0].shape), batch + (sq[-2], sk[-1]))
    if heads_out and not batch:
        raise ShapeError("attention: heads_out needs a heads dim before the sequence dim")
    shape = (batch[:-1] + (sq[-2], batch[-1]) if heads_out else batch + (sq[-2],)) + sv[-1:]
    return ShapedType(shape, dtypes.result_type(q, kt, v))


def _decomposition(q, kt, v, *mask, scale, divide, fill, heads_out):
    s = linalg.matmul(q, kt)
    s = elementwise.div(s, scale) if divide else elementwise.mul(s, scale)
    if mask:
        s = elementwise.where(mask[0], fill, s) if fill is not None else s + mask[0]
    out = linalg.matmul(reduce.softmax(s, -1), v)
    return shape_ops.transpose(out, -2, -3) if heads_out else out


ATTENTION = defop("attention", _attention_kernel, _infer_attention,
                  attrs=("scale", "divide", "fill", "heads_out"), onnx=None,
                  compiler_only=True, decomposition=_decomposition,
                  doc="softmax(q @ kt * scale + mask) @ v, one head block at a time: the "
                      "scores of one head stay in cache, no transpose is copied.")
