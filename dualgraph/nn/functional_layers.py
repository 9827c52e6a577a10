"""The less common layers of ``torch.nn.functional``, as composites of registry ops: bags of
embeddings (``embedding_bag``), local response normalisation, channel shuffling, power-
average pooling, max unpooling, randomised leaky ReLU, alpha dropout (for SELU networks),
3-D channel dropout, the in-place forms of the activations (``relu_``, ...), the
``*_with_indices`` pools and the deprecated ``upsample_*`` spellings, and the pairwise
distances of a set's rows (``pdist``). Each
follows torch's formula, defaults and shape rules; ``dg.nn.functional`` exports them."""
from __future__ import annotations

import math

from ..ops import creation, elementwise as ew, index as index_ops, reduce as red
from ..ops import shape as shape_ops
from ..ops.inplace import commit_inplace
from ..ops.windows import volume_index
from . import functional_core as F
from .functional_core import _dropout, _feature_dropout, _shape

__all__ = ["embedding_bag", "local_response_norm", "channel_shuffle", "lp_pool1d", "lp_pool2d",
           "lp_pool3d", "adaptive_max_pool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d", "rrelu", "alpha_dropout", "feature_alpha_dropout",
           "dropout3d", "relu_", "leaky_relu_", "elu_", "hardtanh_", "selu_", "celu_",
           "threshold_", "rrelu_", "max_pool1d_with_indices", "max_pool2d_with_indices",
           "max_pool3d_with_indices", "adaptive_max_pool1d_with_indices",
           "adaptive_max_pool2d_with_indices", "upsample_bilinear", "upsample_nearest", "pdist"]


# -- embedding bags ------------------------------------------------------------------------------
def _bag_ids(input, offsets, include_last_offset):
    """Each position's bag for 1-D ``input`` split at ``offsets``, and the bag count: bag
    ``b`` holds the positions from ``offsets[b]`` to the next offset, the last bag those to
    the end (``include_last_offset``: ``offsets`` also holds the end, which is not read,
    as torch does not)."""
    if offsets is None or offsets.ndim != 1:
        raise ValueError(f"embedding_bag: a 1-D input needs 1-D offsets (where each bag "
                         f"starts), got {None if offsets is None else _shape(offsets)}")
    if include_last_offset:
        offsets = offsets[:-1]
    bags = offsets.shape[0]
    length = input.shape[0]
    starts = creation.zeros((length + 1,), dtype=offsets.dtype)
    starts = index_ops.index_add(starts, 0, offsets[1:], creation.ones_like(offsets[1:]))
    return red.cumsum(starts[:length], 0), bags


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """The sum, mean or max of bags of embedding rows, as torch's ``embedding_bag``: a 2-D
    ``input`` (B, L) is B bags of L indices; a 1-D ``input`` is split into bags at
    ``offsets``. Entries equal to ``padding_idx`` are left out of their bag (and of its
    count); an empty bag gives zeros. ``per_sample_weights`` (input's shape) scales each
    row, with ``mode="sum"`` only."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights is only supported "
                                      f"for mode='sum' (got mode={mode!r})")
        if _shape(per_sample_weights) != _shape(input):
            raise ValueError(f"embedding_bag: per_sample_weights of shape "
                             f"{_shape(per_sample_weights)} must have input's shape "
                             f"{_shape(input)}")
    rows = F.embedding(input, weight, None, max_norm, norm_type, scale_grad_by_freq, sparse)
    keep = None if padding_idx is None else ew.ne(input, padding_idx % weight.shape[0])
    if per_sample_weights is not None:
        rows = rows * shape_ops.unsqueeze(per_sample_weights, -1)
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: if input is 2-D, offsets must be None (each row "
                             "is a bag)")
        return _reduce_bags_2d(rows, keep, mode, input.shape[1])
    if input.ndim != 1:
        raise ValueError(f"embedding_bag: input must be 1-D or 2-D, got shape {_shape(input)}")
    ids, bags = _bag_ids(input, offsets, include_last_offset)
    return _reduce_bags(rows, keep, mode, ids, bags)


def _reduce_bags_2d(rows, keep, mode, length):
    """Bags of equal ``length``: rows (B, L, D) reduced over L."""
    mask = None if keep is None else shape_ops.unsqueeze(keep, -1)
    if mode == "max":
        if mask is None:
            return red.amax(rows, 1)
        best = red.amax(ew.where(mask, rows, -math.inf), 1)
        return ew.where(red.any(mask, 1), best, 0.0)
    total = red.sum(rows if mask is None else ew.where(mask, rows, 0.0), 1)
    if mode == "sum":
        return total
    count = length if mask is None else ew.maximum(red.sum(mask.to(rows.dtype), 1), 1.0)
    return total / count


def _reduce_bags(rows, keep, mode, ids, bags):
    """Rows (L, D) summed, averaged or maximised into ``bags`` rows by their bag ``ids``
    (sums into ``bags + 1`` rows, the last one dropped: an offset equal to L, an empty last
    bag, points there)."""
    width = rows.shape[1]
    if keep is not None:
        rows = ew.where(shape_ops.unsqueeze(keep, -1), rows, -math.inf if mode == "max" else 0.0)
        counted = keep.to(rows.dtype)
    else:
        counted = creation.ones((rows.shape[0],), dtype=rows.dtype)
    count = index_ops.index_add(creation.zeros((bags + 1,), dtype=rows.dtype), 0, ids,
                                counted)[:bags]
    if mode == "max":
        start = creation.full((bags + 1, width), -math.inf, dtype=rows.dtype)
        where = shape_ops.expand(shape_ops.unsqueeze(ids, -1), _shape(rows))
        best = index_ops.scatter_reduce(start, 0, where, rows, "amax")[:bags]
        return ew.where(shape_ops.unsqueeze(count > 0, -1), best, 0.0)
    total = index_ops.index_add(creation.zeros((bags + 1, width), dtype=rows.dtype), 0, ids,
                                rows)[:bags]
    if mode == "sum":
        return total
    return total / shape_ops.unsqueeze(ew.maximum(count, 1.0), -1)


# -- normalisation and channel order -------------------------------------------------------------
def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """AlexNet's normalisation across channels: ``x / (k + alpha / size * s) ** beta``, where
    ``s`` sums ``x ** 2`` over the ``size`` channels around each one (zeros beyond the
    edges), for (N, C, *) input."""
    if input.ndim < 3:
        raise ValueError(f"local_response_norm: expected 3-D or higher input (N, C, ...), got "
                         f"shape {_shape(input)}")
    channels = input.shape[1]
    spatial = [0, 0] * (input.ndim - 2)
    padded = F.pad(input * input, spatial + [size // 2, (size - 1) // 2])
    window = padded[:, 0:channels]
    for i in range(1, size):
        window = window + padded[:, i:i + channels]
    return input / (window * (alpha / size) + k) ** beta


def channel_shuffle(input, groups):
    """ShuffleNet's channel shuffle: (N, C, *) with C = groups * m viewed as (groups, m)
    and transposed, so that each group's channels spread over the next layer's groups."""
    shape = _shape(input)
    if input.ndim < 3 or shape[1] % groups:
        raise ValueError(f"channel_shuffle: expected (N, C, *) input with C divisible by "
                         f"groups={groups}, got shape {shape}")
    split = shape_ops.reshape(input, (shape[0], groups, shape[1] // groups) + shape[2:])
    return shape_ops.reshape(shape_ops.transpose(split, 1, 2), shape)


# -- pooling -------------------------------------------------------------------------------------
def _lp_pool(average, input, norm_type, kernel_size, stride, ceil_mode, window: int):
    pooled = average(input ** norm_type, kernel_size, stride, 0, ceil_mode)
    return (ew.sign(pooled) * ew.relu(ew.abs(pooled)) * window) ** (1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """The power average ``(sum over each window of x ** p) ** (1 / p)`` over L."""
    return _lp_pool(F.avg_pool1d, input, norm_type, kernel_size, stride, ceil_mode,
                    kernel_size if isinstance(kernel_size, int) else kernel_size[0])


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """The power average ``(sum over each window of x ** p) ** (1 / p)`` over (H, W)."""
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    return _lp_pool(F.avg_pool2d, input, norm_type, kernel_size, stride, ceil_mode, kh * kw)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """Max pooling of ``(N, C, D, H, W)`` to a fixed ``output_size`` (an int, or a triple
    whose None entries keep the input's size), as torch's: the maxima over (H, W) of each
    depth slice (``adaptive_max_pool2d``), then over D; the indices, as
    :func:`max_pool3d`'s, flat in each ``D * H * W`` volume (ties: the first in (D, H, W)
    order)."""
    sizes = (output_size,) * 3 if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != 3:
        raise ValueError(f"adaptive_max_pool3d: output_size must be an int or a triple, got "
                         f"{output_size!r}")

    def run(x):
        n, c, d, h, w = x.shape
        out = tuple(x.shape[2 + a] if sizes[a] is None else int(sizes[a]) for a in range(3))
        y, plane_index = F.adaptive_max_pool2d(
            shape_ops.reshape(x, (n, c * d, h, w)), out[1:], return_indices=True)
        y, depth_index = F.adaptive_max_pool2d(
            shape_ops.reshape(y, (n, c, d, out[1] * out[2])), (out[0], None),
            return_indices=True)
        shape = (n, c) + out
        if not return_indices:
            return shape_ops.reshape(y, shape)
        return shape_ops.reshape(y, shape), shape_ops.reshape(
            volume_index(plane_index, depth_index, (n, c, d), out[1] * out[2], h * w), shape)
    if input.ndim == 4:   # (one sample: C, D, H, W)
        out = run(shape_ops.unsqueeze(input, 0))
        return tuple(o[0] for o in out) if return_indices else out[0]
    if input.ndim != 5:
        raise ValueError(f"adaptive_max_pool3d: expected a 4-D or 5-D input, got shape "
                         f"{_shape(input)}")
    return run(input)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """The power average ``(sum over each window of x ** p) ** (1 / p)`` over (D, H, W)."""
    k = (kernel_size,) * 3 if isinstance(kernel_size, int) else tuple(kernel_size)
    return _lp_pool(F.avg_pool3d, input, norm_type, kernel_size, stride, ceil_mode,
                    math.prod(k))


def _pair_list(value, n: int) -> list:
    return [value] * n if isinstance(value, int) else list(value)


def _max_unpool(name, input, indices, kernel_size, stride, padding, output_size, dims: int):
    """Each value of ``input`` written at its ``indices`` (flat positions in a plane of the
    output, as max pooling's ``return_indices`` gives them), zeros elsewhere."""
    if _shape(indices) != _shape(input):
        raise ValueError(f"{name}: indices of shape {_shape(indices)} must have input's shape "
                         f"{_shape(input)}")
    if input.ndim not in (dims + 1, dims + 2):
        raise ValueError(f"{name}: expected a {dims + 1}-D or {dims + 2}-D input, got shape "
                         f"{_shape(input)}")
    kernel = _pair_list(kernel_size, dims)
    stride = kernel if stride is None else _pair_list(stride, dims)
    padding = _pair_list(padding, dims)
    sizes = [(n - 1) * s - 2 * p + k for n, s, p, k in
             zip(_shape(input)[-dims:], stride, padding, kernel)]
    if output_size is not None:
        wanted = [int(n) for n in list(output_size)[-dims:]]
        for d, (n, default, s) in enumerate(zip(wanted, sizes, stride)):
            if not default - s < n < default + s:
                raise ValueError(f"{name}: invalid output_size {tuple(output_size)} (dim {d} "
                                 f"must be between {default - s} and {default + s}, "
                                 "exclusive)")
        sizes = wanted
    lead = _shape(input)[:-dims]
    flat = shape_ops.reshape(input, lead + (-1,))
    out = creation.zeros(lead + (math.prod(sizes),), dtype=input.dtype)
    out = index_ops.scatter(out, -1, shape_ops.reshape(indices, lead + (-1,)), flat)
    return shape_ops.reshape(out, lead + tuple(sizes))


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of ``max_pool1d(..., return_indices=True)``: maxima back in place."""
    return _max_unpool("max_unpool1d", input, indices, kernel_size, stride, padding,
                       output_size, 1)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of ``max_pool2d(..., return_indices=True)``: maxima back in place."""
    return _max_unpool("max_unpool2d", input, indices, kernel_size, stride, padding,
                       output_size, 2)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of ``max_pool3d(..., return_indices=True)``: maxima back in place."""
    return _max_unpool("max_unpool3d", input, indices, kernel_size, stride, padding,
                       output_size, 3)


# -- random activations and dropout --------------------------------------------------------------
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Leaky ReLU whose negative slope is drawn uniformly from [lower, upper] per element
    in training, and is their mean otherwise."""
    if not training:
        return F.leaky_relu(input, (lower + upper) / 2, inplace)
    slope = creation.rand(_shape(input), dtype=input.dtype) * (upper - lower) + lower
    out = ew.where(input >= 0, input, input * slope)
    return commit_inplace(input, out) if inplace else out


_SELU_ALPHA = 1.7580993408473766   # -SELU's negative saturation value (scale * alpha)


def _alpha_mix(input, keep, p):
    """Alpha dropout's output: dropped values set to SELU's saturation value, then all
    scaled and shifted back to zero mean and unit variance (torch's formula)."""
    a = 1.0 / math.sqrt((_SELU_ALPHA ** 2 * p + 1) * (1 - p))
    return input * (keep * a) + ((keep - 1.0) * (_SELU_ALPHA * a) + _SELU_ALPHA * a * p)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout of single elements (for self-normalising, SELU networks)."""
    return _dropout(input, p, training, inplace, None, _alpha_mix)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout of whole channels of (N, C, *) input."""
    if input.ndim < 2:
        raise ValueError(f"feature_alpha_dropout: expected (N, C, *) input, got shape "
                         f"{_shape(input)}")
    return _dropout(input, p, training, inplace, 2, _alpha_mix)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) input with probability ``p``."""
    return _feature_dropout("dropout3d", input, p, training, inplace, 5)


# -- in-place forms ------------------------------------------------------------------------------
def _in_place_form(fn):
    def in_place(input, *args, **kwargs):
        return fn(input, *args, inplace=True, **kwargs)
    in_place.__name__ = in_place.__qualname__ = fn.__name__ + "_"
    in_place.__doc__ = f"``{fn.__name__}(input, ..., inplace=True)``: the result written " \
                       "into ``input``, which is returned."
    return in_place


relu_, leaky_relu_, elu_, hardtanh_, selu_, celu_, threshold_, rrelu_ = map(
    _in_place_form, (F.relu, F.leaky_relu, F.elu, F.hardtanh, F.selu, F.celu, F.threshold, rrelu))


# -- torch's other spellings of the pools and of interpolation ---------------------------------
def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    """``max_pool1d`` with the indices (``return_indices=True``)."""
    return F.max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode,
                        return_indices=return_indices)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    """``max_pool2d`` with the indices (``return_indices=True``)."""
    return F.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode,
                        return_indices=return_indices)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    """``max_pool3d`` with the indices (``return_indices=True``)."""
    return F.max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode,
                        return_indices=return_indices)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=True):
    return F.adaptive_max_pool1d(input, output_size, return_indices=return_indices)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=True):
    return F.adaptive_max_pool2d(input, output_size, return_indices=return_indices)


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated in torch: ``interpolate(..., mode="bilinear", align_corners=True)``."""
    return F.interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated in torch: ``interpolate(..., mode="nearest")``."""
    return F.interpolate(input, size, scale_factor, mode="nearest")


def pdist(input, p=2.0):
    """The p-norm distances between the rows of an ``(N, M)`` input, pair ``(i, j)`` for
    ``i < j`` in row-major order (``N (N - 1) / 2`` values), as torch's ``pdist``."""
    if input.ndim != 2:
        raise ValueError(f"pdist: expected a 2-D input (N, M), got shape {_shape(input)}")
    n = input.shape[0]
    i, j = creation.triu_indices(n, n, 1)
    return F.pairwise_distance(input[i], input[j], p=p, eps=0.0)
