"""A convolution's epilogue in one pass: per output plane, the bias, a residual added
before or after the activation, and the activation, written over the conv's own result
(``ops/epilogue.py``'s ``conv2d_epilogue``; the compiler's ``conv_epilogue`` rule makes it);
and a linear layer's, per row of its product (``rows``: ``linear_epilogue``).

Unfused, a conv with bias, ReLU6 and a residual is the bias pass in the conv kernel and a
fused loop (or four NumPy passes and two bool arrays for clamp's ``where``s) that reads
the result again and writes another array. Here each plane of ``(N*C, H*W)`` is read and
written once while it is in cache. The activations are those of ``ACTIVATIONS`` (codes
in that order), with the formulas the fused kernels use (``fastmath``'s ``sigmoid32``,
``gelu32``, ``gelu_tanh32``); NaN stays NaN.
"""
from __future__ import annotations

import numpy as np

from . import helper, loop, split_gemm
from .fastmath import gelu32, gelu_tanh32, sigmoid32
from .normalization import _REDUCE, normalise_row
from .simd import add, broadcast_at_like, divide, maximum, minimum, multiply, wide_loops
from .threads import fitted_rows

ACTIVATIONS = ("none", "relu", "clamp", "sigmoid", "silu", "hardswish", "gelu", "gelu_tanh",
               "hardsigmoid")
F = np.float32
_ZERO, _THREE, _SIX = F(0), F(3), F(6)


@helper(inline="always")
def _clamp(v, lo, hi):
    """``min(max(v, lo), hi)`` keeping NaN (a comparison with NaN is false)."""
    if v < lo:
        v = lo
    if v > hi:
        v = hi
    return v


@helper(inline="always")
def _activate(row, act, lo, hi):
    """``ACTIVATIONS[act]`` of each element of the float32 ``row``, in place (one loop per
    activation, so that each vectorises)."""
    if act == 1:   # (``v + 0``: storing ``v`` back unchanged, LLVM made the store
        #             conditional and left the loop scalar, 3x slower than the clamp)
        for i in range(row.size):
            v = row[i] + _ZERO
            row[i] = _ZERO if v < _ZERO else v
    elif act == 2:
        for i in range(row.size):
            row[i] = _clamp(row[i], lo, hi)
    elif act == 3:
        for i in range(row.size):
            row[i] = sigmoid32(row[i])
    elif act == 4:
        for i in range(row.size):
            v = row[i]
            row[i] = v * sigmoid32(v)
    elif act == 5:
        for i in range(row.size):
            v = row[i]
            row[i] = v * (_clamp(v + _THREE, _ZERO, _SIX) / _SIX)
    elif act == 6:
        for i in range(row.size):
            row[i] = gelu32(row[i])
    elif act == 7:
        for i in range(row.size):
            row[i] = gelu_tanh32(row[i])
    elif act == 8:
        for i in range(row.size):
            row[i] = _clamp(row[i] + _THREE, _ZERO, _SIX) / _SIX


# Activations :func:`activate_vector` applies, by code: the piecewise-linear ones, a few
# vector instructions (the others need ``exp`` or ``erf``, left to :func:`_activate`'s pass).
VECTOR_ACTS = (0, 1, 2, 5, 8)


def vector_constants(lo, hi) -> np.ndarray:
    """The constants :func:`activate_vector` broadcasts: 0, 3, 6, ``lo``, ``hi``."""
    return np.array([0, 3, 6, lo, hi], F)


@helper(inline="always")
def in_registers(act, where):
    """Whether a loop's sums take the epilogue in registers (:func:`activate_vector`): no
    residual and an activation of ``VECTOR_ACTS``."""
    return where == 0 and (act == 0 or act == 1 or act == 2 or act == 5 or act == 8)


@helper(inline="always")
def activate_vector(v, act, consts):
    """:func:`_activate` of the vector ``v`` (an ``act`` of ``VECTOR_ACTS``; ``consts``
    from :func:`vector_constants`), the same bits lane by lane: ``maximum(a, v)`` is ``a >
    v ? a : v``, so a NaN ``v`` stays NaN as in :func:`_clamp`, and ReLU adds 0 first
    (-0.0 becomes +0.0, as there)."""
    if act == 1:
        return maximum(broadcast_at_like(consts, 0, v), add(v, broadcast_at_like(consts, 0, v)))
    if act == 2:
        return minimum(broadcast_at_like(consts, 4, v),
                       maximum(broadcast_at_like(consts, 3, v), v))
    if act == 5 or act == 8:
        six = broadcast_at_like(consts, 2, v)
        t = minimum(six, maximum(broadcast_at_like(consts, 0, v),
                                 add(v, broadcast_at_like(consts, 1, v))))
        t = divide(t, six)
        return multiply(v, t) if act == 5 else t
    return v


@helper(inline="always")
def _add_activate(row, src, b, act, lo, hi):
    """``row = act(src + b)`` for a scalar ``b`` (``src`` may be ``row``): one pass for
    ReLU and clamp (the common epilogues: half the time of the sum's pass and then the
    activation's), else the sum, then :func:`_activate`'s pass. The same roundings either
    way (``+ 0`` as in :func:`_activate`)."""
    if act == 1:
        for i in range(row.size):
            v = src[i] + b + _ZERO
            row[i] = _ZERO if v < _ZERO else v
    elif act == 2:
        for i in range(row.size):
            row[i] = _clamp(src[i] + b, lo, hi)
    else:
        for i in range(row.size):
            row[i] = src[i] + b
        _activate(row, act, lo, hi)


@helper(inline="always")
def plane_tail(row, b, r, act, lo, hi, where):
    """``act(row + b (+ r)) (+ r)`` of one plane or run of a plane, in place, for a scalar
    bias ``b`` (``where`` as in :func:`planes`; ``r`` unread where it is 0)."""
    if where == 1:
        for i in range(row.size):
            row[i] = row[i] + b + r[i]
        _activate(row, act, lo, hi)
    else:
        _add_activate(row, row, b, act, lo, hi)
    if where == 2:
        for i in range(row.size):
            row[i] = row[i] + r[i]


@loop
def planes(start, stop, out, bias, residual, act, lo, hi, where):
    """Planes ``start:stop`` of ``out (N*C, H*W)``, in place: ``act(out + bias[c] (+ r))``
    (``where`` 1: the residual ``r = residual[p]`` is added before the activation, 2: after
    it, 0: none; ``residual`` is then any 2-D float32 array). A plane stays in cache
    through its short loops. Its loops run sixteen lanes wide where the CPU
    has them (``simd.wide_loops``: the same bits, a fifth less time)."""
    wide_loops()
    channels = bias.shape[0]
    for p in range(start, stop):
        plane_tail(out[p], bias[p % channels], residual[p if where else 0], act, lo, hi,
                   where)


@helper(inline="always")
def _row_tail(row, bias, r, act, lo, hi, where):
    """``act(row + bias (+ r))`` (+ r) of one row, in place (:func:`rows`)."""
    if where == 1:
        for i in range(row.size):
            row[i] = row[i] + bias[i] + r[i]
    else:
        for i in range(row.size):
            row[i] = row[i] + bias[i]
    _activate(row, act, lo, hi)
    if where == 2:
        for i in range(row.size):
            row[i] = row[i] + r[i]


@loop
def rows(start, stop, out, bias, residual, act, lo, hi, where):
    """Rows ``start:stop`` of a product ``out (M, N)``, in place: ``act(out + bias (+ r))``
    with one bias entry per column (``linear_epilogue``; ``where`` and ``residual`` as in
    :func:`planes`, the residual ``(M, N)``). A row stays in cache through its loops
    (sixteen lanes wide, as in :func:`planes`)."""
    wide_loops()
    for p in range(start, stop):
        _row_tail(out[p], bias, residual[p if where else 0], act, lo, hi, where)


@loop(fastmath=_REDUCE)
def rows_norm(start, stop, out, bias, residual, act, lo, hi, where, weight, shift, eps):
    """:func:`rows`, then each row normalised as LayerNorm's loop does it
    (``normalization.normalise_row``: zero mean, unit variance, ``* weight + shift``) while
    it is in cache (``linear_norm``)."""
    for p in range(start, stop):
        row = out[p]
        _row_tail(row, bias, residual[p if where else 0], act, lo, hi, where)
        normalise_row(row, weight, shift, eps, row)


def pointwise(x_shape: tuple, cout: int, groups: int, act: int, bounds: tuple, bias: bool,
              where: int):
    """A 1x1, stride-1, unpadded float32 convolution of inputs of the static ``x_shape``
    (N, C, H, W) into ``cout`` channels, with its epilogue (``act``: an index into
    ``ACTIVATIONS``; ``where`` as in :func:`planes`), fitted to those shapes once: the
    compiler's ``specialise`` of ``conv2d`` and ``conv2d_epilogue`` binds the returned
    ``run(x, w[, b][, r])``, which is one batched GEMM into a fresh output and then, where
    there is a bias, an activation or a residual, :func:`planes` over it through the loop's
    compiled entry. A call does no shape arithmetic, no method choice and no type
    dispatch: at batch 1 on small planes (squeeze-and-excitation's 1x1 convs on a 1x1
    plane) that work was most of the node's time. On a 1x1 plane (one group) the product
    is one GEMM over the batch, ``x (N, C) @ w (Cout, C)ᵀ``, not N matrix-vector
    products, and the epilogue is :func:`rows` over each image's row of ``cout``
    channels (the same arithmetic, one vectorised loop instead of ``cout`` planes of one
    element: a sigmoid over 672 channels took 17 us as planes, 6 as a row)."""
    n, c, h, w = x_shape
    one = h * w == 1
    planes_shape, count = ((n, cout), n) if one else ((n * cout, h * w), n * cout)
    x_view, w_view = (n, groups, c // groups, h * w), (groups, cout // groups, c // groups)
    gemm_view = (n, groups, cout // groups, h * w)
    lo, hi = np.float32(bounds[0]), np.float32(bounds[1])
    no_residual = np.zeros((1, 1), np.float32)
    zero_bias = np.zeros(cout, np.float32)
    epilogue = bias or act or where
    finish = fitted_rows(rows if one else planes)
    shared = split_gemm.fitted(cout, c, n, h * w)     # (groups 1: one weight for the stack)

    def run(x, wt, *rest, out=None):
        """(``out``: a C-contiguous float32 array of the output's shape to write, a slice
        of a concatenation's; a fresh one otherwise)"""
        out = np.empty((n, cout, h, w), np.float32) if out is None else out
        if one and groups == 1:
            np.matmul(x.reshape(n, c), wt.reshape(cout, c).T, out=out.reshape(n, cout))
        elif not (groups == 1 and shared(wt.reshape(cout, c), x.reshape(n, c, h * w),
                                         out.reshape(n, cout, h * w))):
            np.matmul(wt.reshape(w_view), x.reshape(x_view), out=out.reshape(gemm_view))
        if not epilogue or not out.size:
            return out
        r = np.ascontiguousarray(rest[-1]).reshape(planes_shape) if where else no_residual
        finish(count, out.reshape(planes_shape),
               np.ascontiguousarray(rest[0]) if bias else zero_bias, r, act, lo, hi, where)
        return out
    return run
