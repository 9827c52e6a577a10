"""``squeeze_excite``: squeeze-and-excitation's channel gate and scale as one op, made by
the lowering rule ``squeeze_excite`` (``passes/excite.py``) after autodiff, so it has no
VJP; its decomposition is the ops it replaces.

``squeeze_excite(x, w1, b1, w2, b2, acts=(a1, a2), bounds=(bounds1, bounds2))`` is
``x * a2(conv2d(a1(conv2d(mean(x, (2, 3), keepdim=True), w1, b1)), w2, b2))`` for ``x
(N, C, H, W)``, ``w1 (S, C, 1, 1)``, ``w2 (C, S, 1, 1)``; ``a1``, ``a2`` are activations of
``kernels/epilogue.py``'s ``ACTIVATIONS`` (``"clamp"`` between its bounds). float32 runs
``kernels/excite.py``'s loop (one per image); other dtypes NumPy's passes.
"""
from __future__ import annotations

import math

import numpy as np

from .. import kernels
from ..dispatch import apply
from ..kernels.epilogue import ACTIVATIONS
from ..kernels.threads import run_kept, threads_for
from ..kernels.tuning import cores
from ..shapes import ShapedType, is_static
from . import conv as conv_ops
from . import reduce as red
from ._util import filling
from .epilogue import _numpy_activation, activation
from .opdef import defop

_POINT = dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)


def _decomposition(x, w1, b1, w2, b2, *, acts, bounds):
    h = red.mean(x, (2, 3), keepdim=True)
    h = activation(apply(conv_ops.CONV2D, h, w1, b1, **_POINT), acts[0], bounds[0])
    return x * activation(apply(conv_ops.CONV2D, h, w2, b2, **_POINT), acts[1], bounds[1])


def compiled(x, w1, b1, w2, b2) -> bool:
    """Whether the loops of ``kernels/excite.py`` run: float32 throughout, Numba."""
    return kernels.enabled(x, min_elements=0) and all(
        a.dtype == np.float32 for a in (w1, b1, w2, b2))


def activation_codes(acts, bounds) -> tuple:
    """The loops' arguments for the two activations: each one's code and bounds."""
    return tuple(v for act, (lo, hi) in zip(acts, bounds)
                 for v in (ACTIVATIONS.index(act), np.float32(lo), np.float32(hi)))


def run_loop(loop, x, w1, b1, w2, b2, acts, bounds, shape):
    """``loop`` (``kernels/excite.py``'s, over images) of ``x`` viewed as ``shape`` (its
    images first), the weights as matrices and the activations as codes: the output,
    ``x``'s shape."""
    return fitted_loop(loop, x.shape, acts, bounds, shape)(x, w1, b1, w2, b2)


def fitted_loop(loop, x_shape, acts, bounds, shape):
    """``run(x, w1, b1, w2, b2, out=None)``: :func:`run_loop` fitted to ``x_shape`` once
    (codes, threads, the loop's compiled entry), for a compiled graph's node, into ``out``
    (its planned buffer: a fresh output of an image's channels is megabytes, whose pages
    each call faulted in again) where given."""
    codes, size = activation_codes(acts, bounds), math.prod(x_shape)
    workers, entry = min(threads_for(size) or cores(), shape[0]), []

    def run(x, w1, b1, w2, b2, out=None):
        out = np.empty(x_shape, np.float32) if out is None else out
        run_kept(loop, workers, entry, np.ascontiguousarray(x).reshape(shape),
                 kernels.rows(w1, w1.shape[1]), kernels.flat(b1),
                 kernels.rows(w2, w2.shape[1]), kernels.flat(b2), *codes,
                 out.reshape(shape), rows=shape[0])
        return out
    return run


def specialise_loop(loop, shape_of, x, w1, b1, w2, b2, *, acts, bounds):
    """``specialise`` of a squeeze-and-excitation op whose kernel runs ``loop`` on
    ``x`` viewed as ``shape_of(x_shape)``: float32 throughout, static shapes and Numba
    (the eager kernel's test, ``compiled``), ``(name, run)`` of :func:`fitted_loop`;
    else None."""
    if not (kernels.numba_available() and is_static(x.shape) and all(
            getattr(v, "dtype", None) == np.float32 for v in (x, w1, b1, w2, b2))):
        return None
    x_shape = tuple(x.shape)
    return loop.__name__, fitted_loop(loop, x_shape, acts, bounds, shape_of(x_shape))


def _kernel(x, w1, b1, w2, b2, *, acts, bounds):
    n, c = x.shape[:2]
    if compiled(x, w1, b1, w2, b2):
        return run_loop(kernels.excite.squeeze_excite, x, w1, b1, w2, b2, acts, bounds,
                        (n, c, -1))
    h = x.mean(axis=(2, 3))
    for w, b, act, bound in zip((w1, w2), (b1, b2), acts, bounds):
        h = _numpy_activation(h @ w.reshape(w.shape[0], -1).T + b, act, bound)
    return x * h.astype(x.dtype, copy=False)[:, :, None, None]


def _infer(x, w1, b1, w2, b2, *, acts, bounds):
    squeezed = w1.shape[0] if len(w1.shape) == 4 else None
    want = [(squeezed, x.shape[1], 1, 1), (squeezed,), (x.shape[1], squeezed, 1, 1),
            (x.shape[1],)]
    got = [tuple(v.shape) for v in (w1, b1, w2, b2)]
    if len(x.shape) != 4 or got != want or any(a not in ACTIVATIONS for a in acts):
        raise ValueError(f"squeeze_excite: input {tuple(x.shape)} and weights and biases "
                         f"{got} (want (N, C, H, W) and {want}), activations {acts}")
    return ShapedType(tuple(x.shape), x.dtype)


SQUEEZE_EXCITE = defop(
    "squeeze_excite", filling(_kernel), _infer, attrs=("acts", "bounds"), saves="", onnx=None,
    compiler_only=True, decomposition=_decomposition, fills_out=True,
    specialise=lambda *inputs, **attrs: specialise_loop(
        kernels.excite.squeeze_excite, lambda s: (s[0], s[1], -1), *inputs, **attrs),
    doc="x * gate(conv1x1(act(conv1x1(mean(x, (2, 3))))): squeeze-and-excitation's "
        "pooling, two small convolutions, gate and channel scale in one loop per image")
