"""Resampling of the spatial dims: ``F.interpolate`` (``upsample``), ``pixel_shuffle`` and
``pixel_unshuffle``, as in ``torch.nn.functional``.

Interpolation is separable: every resized dim is a product with a constant (out, in) matrix
of weights (linear modes) or an ``index_select`` of source positions (nearest modes), both
computed from the static sizes when the call is made. So the result is built from ordinary
ops: gradients, tracing, compiled steps and ONNX export come with them, and the weights are
exactly torch's (its source-index formulas with and without ``align_corners``).
"""
from __future__ import annotations

import math

import numpy as np

from ..ops import conv, index as index_ops, linalg, shape as shape_ops
from ..ops.creation import tensor

# the modes that mix neighbours by weights, and the spatial dims each takes
_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3, "bicubic": 2}
_MODES = ("nearest", "nearest-exact", "area") + tuple(_LINEAR)
_CUBIC_A = -0.75   # torch's (and OpenCV's) cubic convolution coefficient


def _spatial(input, mode: str) -> int:
    """How many trailing dims are resized: all but (N, C)."""
    spatial = input.ndim - 2
    if spatial not in (1, 2, 3):
        raise ValueError(f"interpolate expects 3-d, 4-d or 5-d (N, C, ...) input, got shape "
                         f"{tuple(input.shape)}")
    if mode not in _MODES:
        raise NotImplementedError(
            f"interpolate: mode {mode!r} is not supported; use one of {', '.join(_MODES)}")
    if _LINEAR.get(mode, spatial) != spatial:
        raise ValueError(f"interpolate: mode {mode!r} expects {_LINEAR[mode] + 2}-d input, "
                         f"got shape {tuple(input.shape)}")
    sizes = input.shape[2:]
    if not all(isinstance(d, int) for d in sizes):
        raise ValueError(f"interpolate needs concrete spatial sizes, got {tuple(sizes)}: "
                         f"the weights are computed from them when the call is made")
    return spatial


def _per_dim(value, spatial: int, what: str) -> tuple:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * spatial
    if len(values) != spatial:
        raise ValueError(f"interpolate: {what} {value!r} should give {spatial} values, one per "
                         f"spatial dim")
    return values


def _plan(input, spatial, size, scale_factor, recompute_scale_factor):
    """Each spatial dim's (input length, output length, input positions per output one)."""
    sizes = input.shape[2:]
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        outs = tuple(int(s) for s in _per_dim(size, spatial, "size"))
        return [(n, o, n / o) for n, o in zip(sizes, outs)]
    factors = tuple(float(f) for f in _per_dim(scale_factor, spatial, "scale_factor"))
    outs = [int(math.floor(n * f)) for n, f in zip(sizes, factors)]
    # torch's source positions use the given factor unless told to recompute it from sizes
    return [(n, o, n / o if recompute_scale_factor else 1.0 / f)
            for n, o, f in zip(sizes, outs, factors)]


def _source(n: int, out: int, step: float, align_corners: bool, cubic=False) -> np.ndarray:
    """The (fractional) input position of each output position of a linear mode (torch
    clamps it at 0 for the linear modes, not for bicubic, whose taps are clamped instead)."""
    dst = np.arange(out, dtype=np.float64)
    if align_corners:
        return dst * ((n - 1) / (out - 1) if out > 1 else 0.0)
    src = (dst + 0.5) * step - 0.5
    return src if cubic else np.maximum(src, 0.0)


def _linear_weights(n: int, out: int, step: float, align_corners: bool) -> np.ndarray:
    """The (out, n) matrix mixing each output position's two neighbours."""
    src = _source(n, out, step, align_corners)
    left = np.minimum(np.floor(src).astype(np.int64), n - 1)
    right = np.minimum(left + 1, n - 1)
    frac = src - left
    weights = np.zeros((out, n))
    np.add.at(weights, (np.arange(out), left), 1.0 - frac)
    np.add.at(weights, (np.arange(out), right), frac)
    return weights


def _cubic_weights(n: int, out: int, step: float, align_corners: bool) -> np.ndarray:
    """The (out, n) matrix of torch's bicubic: four taps per output position, at the
    source's floor -1 .. +2 clamped into the input (its border pixels repeat), weighted by
    Keys' cubic convolution with a = -0.75."""
    src = _source(n, out, step, align_corners, cubic=True)
    base = np.floor(src)
    t = src - base
    a = _CUBIC_A

    def near(x):   # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):    # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    taps = (far(t + 1), near(t), near(1 - t), far(2 - t))
    weights = np.zeros((out, n))
    for k, w in enumerate(taps):
        at = np.clip(base.astype(np.int64) + k - 1, 0, n - 1)
        np.add.at(weights, (np.arange(out), at), w)
    return weights


def _aa_linear(x):
    return np.maximum(1.0 - np.abs(x), 0.0)


def _aa_cubic(x, a=-0.5):   # (torch's antialiased bicubic takes PIL's a = -0.5)
    x = np.abs(x)
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def _antialias_weights(n: int, out: int, step: float, align_corners: bool,
                       cubic: bool) -> np.ndarray:
    """The (out, n) matrix of torch's ``antialias=True`` (PIL's resampling): each output
    position averages the inputs under its filter (triangle, or cubic with a = -0.5)
    stretched by the scale when shrinking, the taps cut at the borders and the weights
    renormalised to sum to 1 (torch's ``_compute_weights_aa``)."""
    scale = ((n - 1) / (out - 1) if out > 1 else 0.0) if align_corners else step
    half = 2.0 if cubic else 1.0
    support = half * scale if scale >= 1.0 else half
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    taps = 2 * math.ceil(support) + 1
    weights = np.zeros((out, n))
    for i in range(out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        size = min(max(min(int(center + support + 0.5), n) - lo, 0), taps)
        w = (_aa_cubic if cubic else _aa_linear)((np.arange(lo, lo + size) - center + 0.5)
                                                 * invscale)
        if w.sum() != 0.0:
            weights[i, lo:lo + size] = w / w.sum()
    return weights


def _nearest_index(n: int, out: int, step: float, exact: bool) -> np.ndarray:
    dst = np.arange(out, dtype=np.float64) + (0.5 if exact else 0.0)
    return np.minimum(np.floor(dst * step).astype(np.int64), n - 1)


def _repeat_whole(y, plan, exact: bool):
    """The nearest modes' dims whose source index repeats each position ``k`` times in
    order (an integer scale factor) resized at once, as a broadcast view of ``y`` with a
    length-``k`` dim after each of them, copied by one reshape (its gradient one sum),
    where an ``index_select`` per dim was a gather each and a scatter-add each backward;
    returns the result and the plan of the dims left to resize (the others)."""
    lead = tuple(y.shape[:2])
    shape, spread, sizes, rest = [*lead], [*lead], [*lead], list(plan)
    for k, (n, out, step) in enumerate(plan):
        times = out // n
        if out == n * times > n and np.array_equal(_nearest_index(n, out, step, exact),
                                                   np.arange(out) // times):
            shape, spread, sizes = shape + [n, 1], spread + [n, times], sizes + [out]
            rest[k] = (out, out, 1.0)
        else:
            shape, spread, sizes = shape + [n], spread + [n], sizes + [n]
    if len(spread) == y.ndim:
        return y, plan
    wide = shape_ops.expand(shape_ops.reshape(y, tuple(shape)), tuple(spread))
    return shape_ops.reshape(wide, tuple(sizes)), rest


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize the spatial dims of (N, C, ...) input to ``size`` or by ``scale_factor``
    (``mode`` 'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear' or
    'area'; ``antialias`` for bilinear and bicubic, as PIL resamples when shrinking),
    as ``torch.nn.functional.interpolate``.

    >>> import dualgraph as dg
    >>> x = dg.arange(4.0).reshape(1, 1, 2, 2)
    >>> interpolate(x, scale_factor=2, mode="bilinear").shape
    (1, 1, 4, 4)
    >>> interpolate(x, size=(1, 3)).tolist()
    [[[[0.0, 0.0, 1.0]]]]
    """
    spatial = _spatial(input, mode)
    if align_corners is not None and mode not in _LINEAR:
        raise ValueError(f"interpolate: align_corners is only for the linear modes "
                         f"{tuple(_LINEAR)}, not {mode!r}")
    if antialias and (mode not in ("bilinear", "bicubic") or input.ndim != 4):
        raise ValueError("Anti-alias option restricted to bilinear and bicubic modes and "
                         "requires a 4-D tensor as input")
    plan = _plan(input, spatial, size, scale_factor, recompute_scale_factor)
    if mode == "area":
        pool = {1: conv.adaptive_avg_pool1d, 2: conv.adaptive_avg_pool2d}.get(spatial)
        if pool is None:
            raise NotImplementedError("interpolate: mode 'area' of 5-d input is not supported")
        return pool(input, [o for _, o, _ in plan])
    y = input
    if mode not in _LINEAR:
        y, plan = _repeat_whole(y, plan, mode == "nearest-exact")
    for k, (n, out, step) in enumerate(plan):
        dim = 2 + k
        if out == n and step == 1.0:
            continue
        if mode in _LINEAR:
            if antialias:
                weights = _antialias_weights(n, out, step, bool(align_corners),
                                             mode == "bicubic")
            else:
                mix = _cubic_weights if mode == "bicubic" else _linear_weights
                weights = mix(n, out, step, bool(align_corners))
            moved = shape_ops.movedim(y, dim, -1)
            moved = linalg.matmul(moved, tensor(weights.T, dtype=input.dtype))
            y = shape_ops.movedim(moved, -1, dim)
        else:
            index = _nearest_index(n, out, step, mode == "nearest-exact")
            y = index_ops.index_select(y, dim, tensor(index))
    return y


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """``F.upsample``: the older name of :func:`interpolate`."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def pixel_shuffle(input, upscale_factor: int):
    """(*, C * r * r, H, W) -> (*, C, H * r, W * r), as ``torch.nn.functional.pixel_shuffle``
    (sub-pixel convolution's rearrangement).

    >>> import dualgraph as dg
    >>> pixel_shuffle(dg.zeros(1, 8, 3, 3), 2).shape
    (1, 2, 6, 6)
    """
    r = int(upscale_factor)
    *batch, c, h, w = input.shape
    if input.ndim < 3 or c % (r * r):
        raise ValueError(f"pixel_shuffle: the channels (dim -3) of input shape "
                         f"{tuple(input.shape)} must be divisible by upscale_factor**2 = {r * r}")
    n = len(batch)
    y = shape_ops.reshape(input, (*batch, c // (r * r), r, r, h, w))
    y = shape_ops.permute(y, (*range(n), n, n + 3, n + 1, n + 4, n + 2))
    return shape_ops.reshape(y, (*batch, c // (r * r), h * r, w * r))


def pixel_unshuffle(input, downscale_factor: int):
    """(*, C, H * r, W * r) -> (*, C * r * r, H, W), the inverse of :func:`pixel_shuffle`."""
    r = int(downscale_factor)
    *batch, c, h, w = input.shape
    if input.ndim < 3 or h % r or w % r:
        raise ValueError(f"pixel_unshuffle: the height and width of input shape "
                         f"{tuple(input.shape)} must be divisible by downscale_factor = {r}")
    n = len(batch)
    y = shape_ops.reshape(input, (*batch, c, h // r, r, w // r, r))
    y = shape_ops.permute(y, (*range(n), n, n + 2, n + 4, n + 1, n + 3))
    return shape_ops.reshape(y, (*batch, c * r * r, h // r, w // r))
