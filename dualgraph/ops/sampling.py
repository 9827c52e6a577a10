"""Sampling an image at computed positions, as torch.nn.functional's ``affine_grid`` and
``grid_sample`` (spatial transformer networks, warping, deformable sampling).

Both are compositions of registry ops: ``affine_grid`` is one product of a constant base
grid with ``theta``; ``grid_sample`` maps the grid's [-1, 1] coordinates to pixel
positions (with the padding mode's clamping or reflection), gathers the four neighbours
(bilinear; the eight corners of a volume's trilinear sampling), the sixteen (bicubic) or the
nearest pixel, and weighs them. Gradients with respect to the image and
to the grid (hence ``theta``) are the ops' VJPs; positions clamped at a border get no
gradient, as in torch.

>>> import dualgraph as dg
>>> theta = dg.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
>>> img = dg.arange(16.0).reshape(1, 1, 4, 4)
>>> out = grid_sample(img, affine_grid(theta, [1, 1, 4, 4]))   # the identity transform
>>> bool((out - img).abs().max() < 1e-5)
True
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from .. import dtypes
from ..shapes import ShapeError
from . import creation, elementwise as ew, index, linalg
from . import shape as shape_ops

__all__ = ["affine_grid", "grid_sample"]

_PADDING_MODES = ("zeros", "border", "reflection")


def _base_coordinates(size: int, align_corners: bool, dt: np.dtype) -> np.ndarray:
    """The normalised coordinates of ``size`` pixel centres (or corners) in ``dt``, by
    torch's arithmetic (its linspace, then ``* (size - 1)`` and ``/ size`` rounded each):
    an ulp off would put a centre on the other side of a pixel edge, where
    ``grid_sample``'s gradient with respect to the grid jumps."""
    if size <= 1:
        return np.zeros(size, dt)
    lin = creation.linspace_values(-1.0, 1.0, size, dt)
    return lin if align_corners else (lin * dt.type(size - 1)) / dt.type(size)


def affine_grid(theta, size, align_corners=None):
    """The sampling grid (N, H, W, 2) (or (N, D, H, W, 3)) of the affine maps ``theta``
    (N, 2, 3) (or (N, 3, 4)) for an output of ``size`` (N, C, H, W) (or (N, C, D, H, W)),
    as ``torch.nn.functional.affine_grid``; the last dim is (x, y[, z])."""
    size = [int(s) for s in size]
    k = len(size) - 2
    if k not in (2, 3):
        raise ValueError(f"affine_grid: size must be 4-D (N, C, H, W) or 5-D (N, C, D, H, "
                         f"W), got {size}")
    if tuple(theta.shape) != (size[0], k, k + 1):
        raise ValueError(f"affine_grid: expected theta of shape ({size[0]}, {k}, {k + 1}) "
                         f"for size {size}, got {tuple(theta.shape)}")
    if not theta.dtype.is_floating_point:
        raise TypeError(f"affine_grid: theta must be floating point, got {theta.dtype}")
    spatial = size[2:]
    dt = dtypes.to_np(theta.dtype)
    axes = np.meshgrid(*[_base_coordinates(s, bool(align_corners), dt) for s in spatial],
                       indexing="ij")
    base = np.stack(list(axes[::-1]) + [np.ones(spatial, dt)], -1).reshape(-1, k + 1)
    grid = linalg.matmul(creation.tensor(base, dtype=theta.dtype), linalg.mT(theta))
    return shape_ops.reshape(grid, [size[0]] + spatial + [k])


def _clip(c, high: float):
    """``c`` clamped to [0, high], with no gradient where it was clamped (torch's)."""
    inside = ew.logical_and(ew.gt(c, 0.0), ew.lt(c, high))
    return ew.where(inside, c, ew.clamp(c.detach(), 0.0, high))


def _reflect(c, twice_low: int, twice_high: int):
    """``c`` reflected into [twice_low / 2, twice_high / 2] as often as it takes."""
    if twice_low == twice_high:
        return creation.zeros_like(c)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    d = ew.abs(c - low)
    extra = ew.fmod(d, span)
    even = ew.eq(ew.remainder(ew.floor(d / span), 2.0), 0.0)
    return ew.where(even, extra + low, span - extra + low)


def _unnormalize(coord, size: int, align_corners: bool):
    """Pixel positions of normalised coordinates along an axis of ``size`` pixels. Without
    ``align_corners``, torch's CPU kernels compute ``(coord + 1) * (size / 2) - 0.5`` as one
    fused multiply-add: in float32 that is done here too (exact in float64, rounded once),
    so that a grid point at a pixel centre (an identity ``affine_grid``, where spatial
    transformers start) falls on the same side of it as in torch, and so takes the same
    one-sided gradient with respect to the grid."""
    if align_corners:
        return (coord + 1) * ((size - 1) / 2)
    shifted = coord + 1
    if shifted.dtype == dtypes.float32:
        return (shifted.to(dtypes.float64) * (size / 2) - 0.5).to(dtypes.float32)
    return shifted * (size / 2) - 0.5


def _source(coord, size: int, padding_mode: str, align_corners: bool):
    """Pixel positions of normalised coordinates, moved inside by the padding mode."""
    return _padded(_unnormalize(coord, size, align_corners), size, padding_mode,
                   align_corners)


def _padded(c, size: int, padding_mode: str, align_corners: bool):
    """Positions ``c`` clamped (border) or reflected (reflection) into the image; as they
    are for zeros padding (the taps outside read zeros)."""
    if padding_mode == "border":
        c = _clip(c, size - 1)
    elif padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (size - 1)) if align_corners else _reflect(c, -1, 2 * size - 1)
        c = _clip(c, size - 1)
    return c


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """``input`` (N, C, H, W) sampled at ``grid`` (N, Ho, Wo, 2) of (x, y) positions in
    [-1, 1]: (N, C, Ho, Wo), or a volume (N, C, D, H, W) at (N, Do, Ho, Wo, 3) of (x, y, z)
    positions: (N, C, Do, Ho, Wo), as ``torch.nn.functional.grid_sample``. ``mode``
    'bilinear' (trilinear for volumes), 'nearest' or 'bicubic' (images only, as torch's);
    ``padding_mode`` 'zeros', 'border' or 'reflection'; ``align_corners`` False by default
    (-1 and 1 are the outer pixels' edges)."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"grid_sample: mode must be 'bilinear', 'nearest' or 'bicubic', "
                         f"got {mode!r}")
    if padding_mode not in _PADDING_MODES:
        raise ValueError(f"grid_sample: padding_mode must be one of {_PADDING_MODES}, got "
                         f"{padding_mode!r}")
    k = input.ndim - 2
    if k not in (2, 3) or grid.ndim != input.ndim or grid.shape[-1] != k \
            or grid.shape[0] != input.shape[0]:
        raise ShapeError(f"grid_sample: expected input (N, C, H, W) and grid (N, Ho, Wo, 2), "
                         f"or input (N, C, D, H, W) and grid (N, Do, Ho, Wo, 3), with the same "
                         f"N, got {tuple(input.shape)} and {tuple(grid.shape)}")
    if input.dtype != grid.dtype or not input.dtype.is_floating_point:
        raise TypeError(f"grid_sample: input and grid must have the same floating dtype, "
                        f"got {input.dtype} and {grid.dtype}")
    if mode == "bicubic" and k == 3:
        raise ValueError("grid_sample: bicubic interpolation only supports 4D input")
    n, c, *spatial = input.shape
    sizes = spatial[::-1]   # along x, y[, z]: W, H[, D]
    planes = shape_ops.reshape(input, (n, c, math.prod(spatial)))
    if mode == "bicubic":
        return _bicubic(planes, grid, sizes, padding_mode, bool(align_corners))
    coords = [_source(grid[..., a], sizes[a], padding_mode, bool(align_corners))
              for a in range(k)]
    if mode == "nearest":
        return _taps(planes, [[ew.round(v) for v in coords]], None, sizes)
    low = [ew.floor(v) for v in coords]
    frac = [v - f for v, f in zip(coords, low)]
    taps, weights = [], []
    for corner in itertools.product((0, 1), repeat=k):   # (x fastest: torch's order)
        corner = corner[::-1]
        taps.append([f + 1 if up else f for f, up in zip(low, corner)])
        weight = None
        for f, up in zip(frac, corner):
            term = f if up else 1 - f
            weight = term if weight is None else weight * term
        weights.append(weight)
    return _taps(planes, taps, weights, sizes)


def _cubic_weights(t, a=-0.75):
    """The four weights of the taps at -1, 0, 1 and 2 from a position ``t`` in [0, 1)
    past the tap at 0: Keys' cubic convolution with torch's ``a``."""
    def near(x):   # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):    # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic(planes, grid, sizes, padding_mode, align_corners):
    """Bicubic sampling as torch's: the sixteen pixels around each position, each moved
    inside by the padding mode on its own, weighed by cubic weights of the position's
    fraction (the grid's gradient is theirs)."""
    w, h = sizes
    ix = _unnormalize(grid[..., 0], w, align_corners)
    iy = _unnormalize(grid[..., 1], h, align_corners)
    x0, y0 = ew.floor(ix), ew.floor(iy)
    wx, wy = _cubic_weights(ix - x0), _cubic_weights(iy - y0)
    taps, weights = [], []
    for j in range(4):
        for i in range(4):
            taps.append([_padded(x0 + (i - 1), w, padding_mode, align_corners),
                         _padded(y0 + (j - 1), h, padding_mode, align_corners)])
            weights.append(wx[i] * wy[j])
    return _taps(planes, taps, weights, sizes)


def _taps(planes, taps, weights, sizes):
    """The weighted sum of the elements of ``planes`` (N, C, prod(spatial)) at the integer
    positions of each tap (per tap, its position along x, y[, z], each (N, *out)), zero
    outside the input: one gather for every tap (the corners of (tri)linear sampling,
    bicubic's sixteen, or the nearest element)."""
    n, c = tuple(planes.shape[:2])
    out, count = tuple(taps[0][0].shape[1:]), len(taps)
    inside, flat, stride = None, None, 1
    for axis, size in enumerate(sizes):
        p = shape_ops.stack([tap[axis] for tap in taps], 1).long()   # (N, K, *out)
        ok = ew.logical_and(ew.ge(p, 0), ew.lt(p, size))
        inside = ok if inside is None else ew.logical_and(inside, ok)
        offset = ew.clamp(p, 0, size - 1) * stride
        flat = offset if flat is None else flat + offset
        stride *= size
    total = count * math.prod(out)
    where = shape_ops.expand(shape_ops.reshape(flat, (n, 1, total)), (n, c, total))
    values = shape_ops.reshape(index.gather(planes, 2, where), (n, c, count) + out)
    inside = inside.to(planes.dtype)
    scale = inside if weights is None else shape_ops.stack(weights, 1) * inside
    return (values * shape_ops.unsqueeze(scale, 1)).sum(2)
