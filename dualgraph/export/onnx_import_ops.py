"""The ONNX import's rules: :func:`import_rules` maps each ONNX op type to a small function
``convert(b, xs, attrs) -> output(s)`` that emits registry ops through the importer ``b``
(``b.op(op, *inputs, **attrs)`` adds a node, or runs the kernel now when every input is
known; ``b.error`` names the node). Where a registry op is the natural target of an ONNX op
type (Relu -> relu), the rule is part of that op's OpDef (``onnx_import``); the op types that
decompose into several registry ops have their converters here, in ``CONVERTERS``. ``xs``
are the node's inputs (graph Values, or NumPy arrays when known at load time), ``attrs``
its attributes as Python values. The importer itself (walking the model, folding,
subgraphs) is ``onnx_import.py``.
"""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from .. import dtypes
from ..graph import Graph
from ..graph.ir import Value, type_str
from ..ops.opdef import REGISTRY
from ..shapes import ShapedType, ShapeError, Sym, numel
from .errors import OnnxError
from .onnx_runtime import RunTimeValue

_BIG = 2 ** 62   # a Slice end at or past this means "to the end", whatever the dim's size
FOLD_LIMIT = 2 ** 24   # elements of an array computed when loading (see _Importer.op)


def tidy(x):
    """A folded shape value: plain int64 again once no symbolic dim is left in it."""
    x = np.asarray(x)
    if x.dtype == object and not any(isinstance(v, Sym) for v in x.reshape(-1)):
        return x.astype(np.bool_ if x.size and isinstance(x.flat[0], bool) else np.int64)
    return x


# -- helpers shared by converters -------------------------------------------------------------
def _is_int(x) -> bool:
    return x.dtype.kind in "biuO"


def _scalar(x):
    """A known one-element array as a Python number (weakly typed, as in PyTorch: it keeps
    the tensor's dtype); anything else as it is."""
    if isinstance(x, np.ndarray) and x.size == 1 and x.dtype != object:
        return x.reshape(()).item()
    return x


def _variadic(name):
    def convert(b, xs, attrs):
        return functools.reduce(lambda acc, x: b.op(name, acc, x), xs)
    return convert


# -- elementwise --------------------------------------------------------------------------------
def _div(b, xs, attrs):
    a, c = xs
    if not (_is_int(a) and _is_int(c)):
        return b.op("div", a, c)
    if object in (a.dtype, c.dtype) and not any(isinstance(x, Value) for x in xs):
        try:
            return tidy(np.floor_divide(a, c))   # a symbolic shape: sizes are positive
        except (ShapeError, TypeError):   # (T // 2 is no product of dims: as it runs)
            pass
    q = b.op("div", b.cast(a, np.float64), b.cast(c, np.float64))
    dtype = np.int64 if object in (a.dtype, c.dtype) else dtypes.result_type(a, c)
    return b.cast(b.op("trunc", q), dtype)   # ONNX: truncating


def _pow(b, xs, attrs):
    return b.cast(b.op("pow", xs[0], xs[1]), xs[0].dtype)   # ONNX keeps the base's type


def _mod(b, xs, attrs):
    if attrs.get("fmod", 0) not in (0, 1):
        raise b.error(f"attr 'fmod' of Mod is {attrs['fmod']}; it must be 0 or 1")
    return b.op("fmod" if attrs.get("fmod", 0) else "remainder", xs[0], xs[1])


def _reciprocal(b, xs, attrs):
    return b.op("div", 1.0, xs[0])


def _mean(b, xs, attrs):
    return b.op("div", _variadic("add")(b, xs, attrs), float(len(xs)))


def _clip(b, xs, attrs):
    x = xs[0]
    if b.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
    else:
        lo, hi = (list(xs[1:]) + [None, None])[:2]
    if lo is not None:
        x = b.op("maximum", x, _scalar(lo))
    if hi is not None:
        x = b.op("minimum", x, _scalar(hi))
    return x


def _dropout(b, xs, attrs):
    """Dropout in inference (or with a ratio of 0): the input, and a mask of trues."""
    training = attrs.get("training_mode", 0) or (len(xs) > 2 and xs[2] is not None
                                                 and b.static(xs[2], "training_mode").any())
    ratio = xs[1] if len(xs) > 1 and xs[1] is not None else attrs.get("ratio", 0.5)
    if training and np.any(b.static(ratio, "ratio") if not isinstance(ratio, float) else ratio):
        raise b.error("training-mode Dropout is not supported; export the model in eval mode")
    return xs[0], b.op("full_like", xs[0], fill_value=True, dtype=np.dtype(np.bool_))


def _compress(b, xs, attrs):
    """Compress: the slices along ``axis`` (of the flattened input without one) where the
    condition holds; the condition sets the output's length, so it must be known (as a
    graph input, the model is specialised on it)."""
    x, cond = xs
    keep = np.flatnonzero(np.asarray(b.static(cond, "condition"), bool).reshape(-1))
    if "axis" not in attrs:
        x, dim = b.reshape(x, (-1,)), 0
    else:
        dim = b.dim(attrs["axis"], x.ndim)
    keep = keep[keep < x.shape[dim]]
    return b.op("index", x, keep.astype(np.int64), dims=(dim,))


def _nonzero(b, xs, attrs):
    """NonZero: the indices of the nonzero elements, one row per dim (their count is set
    by the values: as the model runs, a ``by_value`` node)."""
    x = b.static(xs[0], "input")
    return np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)


def _unique(b, xs, attrs):
    """Unique: the distinct values (or slices along ``axis``), sorted or in the order they
    first appear, with their first indices, each element's index among them and their
    counts (sizes set by the values: as the model runs, a ``by_value`` node)."""
    x = b.static(xs[0], "input")
    axis = None if attrs.get("axis") is None else b.dim(attrs["axis"], x.ndim)
    y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                          return_counts=True, axis=axis)
    if not attrs.get("sorted", 1):   # (in order of first appearance)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=axis or 0)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return (y, first.astype(np.int64), inverse.reshape(-1).astype(np.int64),
            counts.astype(np.int64))


def _non_max_suppression(b, xs, attrs):
    """NonMaxSuppression: per batch and class, boxes by score (the lower index first among
    equal scores), each kept unless its IoU with a kept one exceeds the threshold, up to
    ``max_output_boxes_per_class`` of them; rows (batch, class, box) in that order, as
    ONNX's reference. The count kept is set by the values: as the model runs, a
    ``by_value`` node."""
    boxes, scores = (b.static(x, what) for x, what in zip(xs, ("boxes", "scores")))
    count, iou_max, low = (None if len(xs) <= k or xs[k] is None else
                           np.asarray(b.static(xs[k], what)).reshape(-1)
                           for k, what in ((2, "max_output_boxes_per_class"),
                                           (3, "iou_threshold"), (4, "score_threshold")))
    count = 0 if count is None or not count.size else int(count[0])
    iou_max = 0.0 if iou_max is None or not iou_max.size else float(iou_max[0])
    if attrs.get("center_point_box", 0):   # (x, y, w, h) -> corners
        cx, cy, w, h = np.moveaxis(boxes.astype(np.float64), -1, 0)
        lo, hi = np.stack([cx - w / 2, cy - h / 2], -1), np.stack([cx + w / 2, cy + h / 2], -1)
    else:   # (y1, x1, y2, x2) in either order
        corners = boxes.astype(np.float64)[..., [1, 0, 3, 2]]
        lo, hi = np.minimum(corners[..., :2], corners[..., 2:]), \
            np.maximum(corners[..., :2], corners[..., 2:])
    area = np.prod(hi - lo, axis=-1)
    rows = []
    for n, c in np.ndindex(scores.shape[:2]):
        score = scores[n, c]
        order = np.lexsort((np.arange(score.size), -score))
        if low is not None and low.size:
            order = order[score[order] > low[0]]
        kept = []
        for i in order:
            if len(kept) >= count:
                break
            inter = np.prod(np.clip(np.minimum(hi[n, i], hi[n, kept]) -
                                    np.maximum(lo[n, i], lo[n, kept]), 0, None), axis=-1)
            union = area[n, i] + area[n, kept] - inter
            with np.errstate(divide="ignore", invalid="ignore"):
                over = (inter > 0) & (area[n, i] > 0) & (area[n, kept] > 0) & \
                    (union > 0) & (inter / union > iou_max)
            if not over.any():
                kept.append(i)
        rows += [(n, c, i) for i in kept]
    return np.array(rows, np.int64).reshape(-1, 3)


def _mel_weight_matrix(b, xs, attrs):
    """MelWeightMatrix of sizes and frequencies known when loading (ONNX's formula)."""
    bins, length, rate, low, high = (float(np.asarray(b.static(v, "argument")).reshape(-1)[0])
                                     for v in xs)
    bins, length, rate = int(bins), int(length), int(rate)
    b.check_size((length // 2 + 1) * bins, "MelWeightMatrix")
    points = np.arange(bins + 2)
    low_mel, high_mel = (2595 * np.log1p(f / 700) / np.log(10) for f in (low, high))
    hz = 700 * np.expm1((points * (high_mel - low_mel) / (bins + 2) + low_mel) / 2595
                        * np.log(10))
    edges = (((length + 1) * hz) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        lo, mid, hi = edges[i:i + 3]
        if mid == lo:
            out[mid, i] = 1
        else:
            out[lo:mid + 1, i] = (np.arange(lo, mid + 1) - lo) / (mid - lo)
        if hi > mid:
            out[mid:hi, i] = (hi - np.arange(mid, hi)) / (hi - mid)
    return out.astype(b.onnx_dtype(attrs.get("output_datatype", 1), "output_datatype"))


def _leaky_relu(b, xs, attrs):
    x = xs[0]
    return b.op("where", b.op("lt", x, 0), b.op("mul", x, attrs.get("alpha", 0.01)), x)


def _prelu(b, xs, attrs):
    x, slope = xs
    if b.opset < 7 and slope.ndim == 1 and x.ndim > 2:   # (before opset 7: per channel)
        slope = _per_channel(b, slope, x.ndim)
    return b.op("where", b.op("lt", x, 0), b.op("mul", x, slope), x)


def _selu(b, xs, attrs):
    alpha = float(attrs.get("alpha", 1.6732632423543772))
    gamma = float(attrs.get("gamma", 1.0507009873554805))
    return b.op("mul", b.op("elu", xs[0], alpha=alpha), gamma)


def _hard_sigmoid_of(b, x, alpha, beta):
    y = b.op("add", b.op("mul", x, alpha), beta)
    return b.op("minimum", b.op("maximum", y, 0.0), 1.0)


def _hard_sigmoid(b, xs, attrs):
    return _hard_sigmoid_of(b, xs[0], attrs.get("alpha", 0.2), attrs.get("beta", 0.5))


def _hard_swish(b, xs, attrs):
    return b.op("mul", xs[0], _hard_sigmoid_of(b, xs[0], 1 / 6, 0.5))


def _softsign(b, xs, attrs):
    return b.op("div", xs[0], b.op("add", b.op("abs", xs[0]), 1.0))


def _gelu(b, xs, attrs):
    approximate = attrs.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise b.error(f"approximate={approximate!r} is not one of 'none' and 'tanh'")
    return b.op("gelu" if approximate == "none" else "gelu_tanh", xs[0])


def _is_inf(b, xs, attrs):
    x, neg, pos = xs[0], attrs.get("detect_negative", 1), attrs.get("detect_positive", 1)
    if neg and pos:
        return b.op("isinf", x)
    if neg or pos:
        return b.op("bitwise_and", b.op("isinf", x), b.op("gt" if pos else "lt", x, 0))
    return b.op("full_like", x, fill_value=False, dtype=np.dtype(np.bool_))


def _unary(fn):
    """An elementwise op written with other ops: ``fn(b, x, attrs)``."""
    return lambda b, xs, attrs: fn(b, xs[0], attrs)


def _half(b, y):
    return b.op("mul", y, 0.5)


def _sinh(b, x, attrs):
    return _half(b, b.op("sub", b.op("exp", x), b.op("exp", b.op("neg", x))))


def _cosh(b, x, attrs):
    return _half(b, b.op("add", b.op("exp", x), b.op("exp", b.op("neg", x))))


def _celu(b, x, attrs):
    alpha = float(attrs.get("alpha", 1.0))
    neg = b.op("mul", b.op("expm1", b.op("div", b.op("minimum", x, 0.0), alpha)), alpha)
    return b.op("add", b.op("maximum", x, 0.0), neg)


def _swish(b, x, attrs):
    return b.op("mul", x, b.op("sigmoid", b.op("mul", x, float(attrs.get("alpha", 1.0)))))


def _thresholded_relu(b, x, attrs):
    return b.op("where", b.op("gt", x, float(attrs.get("alpha", 1.0))), x, 0.0)


def _shrink(b, x, attrs):
    lambd, bias = float(attrs.get("lambd", 0.5)), float(attrs.get("bias", 0.0))
    low = b.cast(b.op("add", x, bias), x.dtype)
    high = b.cast(b.op("sub", x, bias), x.dtype)
    zero = b.op("full_like", x, fill_value=0, dtype=x.dtype)
    return b.op("where", b.op("lt", x, -lambd), low,
                b.op("where", b.op("gt", x, lambd), high, zero))


def _mish(b, x, attrs):
    return b.op("mul", x, b.op("tanh", b.op("softplus", x, beta=1.0, threshold=20.0)))


def _bit_shift(b, xs, attrs):
    """BitShift: a product or a floor quotient by 2**y, in 64 bits, then wrapped to x's
    type as a shift wraps. A shift out of range (negative, or the type's width or more)
    gives 0, or -1 for a right shift of a negative value (the sign bit fills it)."""
    x, y = xs
    direction = attrs["direction"]
    if direction not in ("LEFT", "RIGHT"):
        raise b.error(f"BitShift's direction {direction!r} is not LEFT or RIGHT")
    wide = np.dtype(np.uint64 if x.dtype == np.uint64 else np.int64)
    inside = b.op("bitwise_and", b.op("ge", y, 0), b.op("lt", y, 8 * x.dtype.itemsize))
    power = b.op("pow", np.asarray(2, wide), b.cast(b.op("where", inside, y, 0), wide))
    out = b.op("mul" if direction == "LEFT" else "floor_divide", b.cast(x, wide), power)
    outside = np.zeros((), x.dtype)
    if direction == "RIGHT" and x.dtype.kind == "i":
        outside = b.op("where", b.op("lt", x, 0), np.asarray(-1, x.dtype), outside)
    return b.op("where", inside, b.cast(out, x.dtype), outside)


def _hardmax(b, xs, attrs):
    """1 at the first largest value along ``axis`` (opset 13+; before, over the dims from
    ``axis`` on as one), 0 elsewhere."""
    x = xs[0]
    axis = b.dim(attrs.get("axis", -1 if b.opset >= 13 else 1), x.ndim)
    flat = x if b.opset >= 13 else b.reshape(x, tuple(x.shape[:axis]) + (-1,))
    dim = axis if b.opset >= 13 else flat.ndim - 1
    top = b.op("argmax", flat, dim=dim, keepdim=True)
    count = flat.shape[dim]
    positions = np.arange(count).reshape([-1 if k == dim else 1 for k in range(flat.ndim)])
    y = b.cast(b.op("eq", top, positions), x.dtype)
    return b.reshape(y, tuple(x.shape))


def _lp_normalization(b, xs, attrs):
    x = xs[0]
    dim = b.dim(attrs.get("axis", -1), x.ndim)
    p = attrs.get("p", 2)
    norm = b.op("norm", x, ord=float(p), dims=(dim,), keepdim=True)
    return b.op("div", x, b.op("where", b.op("eq", norm, 0), 1.0, norm))   # (0 stays 0)


def _eye_like(b, xs, attrs):
    x = xs[0]
    b.need_rank(x, 2, "input", 2)
    if any(isinstance(d, Sym) for d in x.shape):
        raise b.error(f"EyeLike of symbolic shape {tuple(x.shape)} is not supported")
    dtype = b.onnx_dtype(attrs["dtype"], "EyeLike's dtype") if "dtype" in attrs else x.dtype
    b.check_size(numel(x.shape), "EyeLike's result")
    return np.eye(*x.shape, k=int(attrs.get("k", 0)), dtype=dtype)


def _det(b, xs, attrs):
    """Det of [..., n, n] by Gaussian elimination with partial pivoting, unrolled over the
    n columns: each step swaps the pivot row in (a product with the permutation matrix
    I - d d^T, d = e_k - e_pivot: no per-matrix gather), multiplies the determinant by the
    pivot (and -1 for a swap) and clears the column below it."""
    a = xs[0]
    n = a.shape[-1]
    if a.ndim < 2 or a.shape[-2] != n or not isinstance(n, int):
        raise b.error(f"Det takes square matrices [..., n, n] with a static n, got "
                      f"{tuple(a.shape)}")
    batch, lead = tuple(a.shape[:-2]), [None] * (a.ndim - 2)
    one = np.ones((), a.dtype)
    det, eye = one, np.eye(n, dtype=a.dtype)
    for k in range(n):
        col = b.reshape(b.slice_dims(a, lead + [(k, n, 1), (k, k + 1, 1)]), (*batch, n - k))
        q = b.op("add", b.op("argmax", b.op("abs", col), dim=a.ndim - 2, keepdim=True), k)
        d = b.op("sub", eye[k], b.cast(b.op("eq", q, np.arange(n)), a.dtype))   # [..., n]
        swap = b.op("mul", b.reshape(d, (*batch, n, 1)), b.reshape(d, (*batch, 1, n)))
        a = b.op("matmul", b.op("sub", eye, swap), a)
        pivot = b.reshape(b.slice_dims(a, lead + [(k, k + 1, 1)] * 2), batch)
        swapped = b.op("eq", b.reshape(q, batch), k)
        det = b.op("mul", det, b.op("where", swapped, pivot, b.op("neg", pivot)))
        if k + 1 < n:   # (a zero pivot: det is 0 whatever the rows below become)
            safe = b.op("where", b.op("eq", pivot, 0.0), one, pivot)
            factor = b.op("div", b.slice_dims(a, lead + [(k + 1, n, 1), (k, k + 1, 1)]),
                          b.reshape(safe, (*batch, 1, 1)))
            rest = b.op("sub", b.slice_dims(a, lead + [(k + 1, n, 1), None]),
                        b.op("mul", factor, b.slice_dims(a, lead + [(k, k + 1, 1), None])))
            a = b.op("cat", b.slice_dims(a, lead + [(0, k + 1, 1), None]), rest,
                     dim=a.ndim - 2)
    return det


def _reduce_log_sum(b, xs, attrs):
    dims, keep = b.reduce_dims(xs, attrs)
    x = xs[0]
    return b.op("log", x if dims is None else b.op("sum", x, dims=dims, keepdim=keep,
                                                      dtype=x.dtype))


# -- matrix products ----------------------------------------------------------------------------
def _gemm(b, xs, attrs):
    a, w = xs[0], xs[1]
    b.need_rank(a, 2, "input A", 2)
    b.need_rank(w, 2, "input B", 2)
    c = xs[2] if len(xs) > 2 else None
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if attrs.get("transA", 0):
        a = b.op("permute", a, perm=(1, 0))
    if not attrs.get("transB", 0):   # linear takes the weight as (N, K)
        w = b.op("permute", w, perm=(1, 0))
    if c is not None and alpha == 1.0 and beta == 1.0 and c.ndim == 1 and c.shape == w.shape[:1]:
        return b.op("linear", a, w, c)
    y = b.op("linear", a, w)
    if alpha != 1.0:
        y = b.op("mul", y, float(alpha))
    if c is not None and beta != 0.0:
        y = b.op("add", y, c if beta == 1.0 else b.op("mul", c, float(beta)))
    return y


# -- shapes ---------------------------------------------------------------------------------
def _shape(b, xs, attrs):
    dims = list(xs[0].shape)[attrs.get("start", 0):attrs.get("end")]
    return tidy(np.array(dims, dtype=object).reshape(len(dims)))


def _size(b, xs, attrs):
    return tidy(np.array(numel(xs[0].shape), dtype=object))


def _split(b, xs, attrs):
    x = xs[0]
    b.need_rank(x, 1, "input")
    dim = b.dim(attrs.get("axis", 0), x.ndim)
    sizes = b.attr_or_input(attrs, "split", xs, 1, since=13)
    n = x.shape[dim]
    outputs = len(b.node.output)
    if sizes is None:
        if b.opset >= 18 and "num_outputs" not in attrs:
            raise b.error("Split needs its split input or its num_outputs attr (opset 18+)")
        count = attrs.get("num_outputs", outputs)
        size = -(-n // count) if count > 0 else 0
        sizes = [size] * (count - 1) + [n - size * (count - 1)]
    if len(sizes) != outputs or isinstance(n, int) and (min(sizes) < 0 or sum(sizes) != n):
        raise b.error(f"Split of a dim of size {n} into {sizes} (split or num_outputs) does "
                      f"not fit its {outputs} outputs: the sizes must be at least 0, one per "
                      "output, and add up to the dim")
    outs, start = [], 0
    for size in sizes:
        index = [None] * x.ndim
        index[dim] = (start, start + size, 1)
        outs.append(b.slice_dims(x, index))
        start += size
    return tuple(outs)


def _slice(b, xs, attrs):
    x = xs[0]
    if b.opset < 10:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes, steps = attrs.get("axes"), None
    else:
        starts, ends = b.ints(xs[1], "starts", shape=True), b.ints(xs[2], "ends", shape=True)
        axes = b.ints(xs[3], "axes") if len(xs) > 3 and xs[3] is not None else None
        steps = b.ints(xs[4], "steps") if len(xs) > 4 and xs[4] is not None else None
    axes = list(axes if axes is not None else range(len(starts)))
    steps = steps or [1] * len(starts)
    if x.ndim == 0 or not len(starts) == len(ends) == len(axes) == len(steps):
        raise b.error(f"Slice of a tensor of shape {tuple(x.shape)} needs as many starts, ends, "
                      f"axes and steps (at most one per dim), got {starts}, {ends}, {axes}, "
                      f"{steps}")
    axes = [b.dim(a, x.ndim) for a in axes]
    if len(set(axes)) != len(axes):
        raise b.error(f"Slice's axes {axes} name a dim twice")
    index, flips = [None] * x.ndim, []
    for a, start, end, step in zip(axes, starts, ends, steps):
        index[a] = _slice_range(b, x.shape[a], start, end, step)
        if index[a] is not None and index[a][2] < 0:
            flips.append(a)
            n = x.shape[a]
            s, e, k = index[a]
            index[a] = (n - 1 - s, n - 1 - e, -k)   # the same elements of x flipped
    if flips:
        x = b.op("flip", x, dims=tuple(flips))
    index = [None if s is not None and s == (0, x.shape[i], 1) else s
             for i, s in enumerate(index)]
    return b.slice_dims(x, index)


def _slice_range(b, n, start, end, step):
    """ONNX's (start, end, step) on a dim of size n -> normalised (start, stop, step)."""
    if step == 0:
        raise b.error("a Slice step is 0")
    if isinstance(n, Sym) or isinstance(start, Sym) or isinstance(end, Sym):
        if step == 1 and start == 0 and (end == n or isinstance(end, int) and end >= _BIG):
            return None
        raise b.error(f"slicing {start}:{end}:{step} of the symbolic dim {n} is not "
                      "supported (the bounds must not depend on the dim's run-time size)")
    return slice(start, end, step).indices(n)


def _scatter_nd(b, xs, attrs):
    """ScatterND -> index_put on the leading dims (ScatterND's updates are laid out as
    NumPy's x[i0, i1, ...] is); reduction "add" accumulates."""
    data, indices, updates = xs
    b.need_rank(indices, 1, "indices")
    reduction = attrs.get("reduction", "none")
    if reduction not in ("none", "add"):
        known = np.asarray(b.static(indices, "indices"), np.int64)
        coords = known.reshape(-1, indices.shape[-1])
        rest = tuple(updates.shape[indices.ndim - 1:])
        return _scatter_reduce(b, data, coords, b.reshape(updates, (-1,) + rest), reduction)
    k = indices.shape[-1]
    if not isinstance(k, int) or not 1 <= k <= data.ndim:
        raise b.error(f"ScatterND needs indices with a static last dim of 1 to {data.ndim} "
                      f"(one index per leading dim of the data), got shape "
                      f"{tuple(indices.shape)}")
    columns = []
    for j in range(k):
        window = [None] * indices.ndim
        window[-1] = (j, j + 1, 1)
        columns.append(b.reshape(b.slice_dims(indices, window), indices.shape[:-1]))
    return b.op("index_put", data, b.cast(updates, data.dtype), *columns,
                dims=tuple(range(k)), accumulate=reduction == "add")


def _gather_elements(b, xs, attrs):
    x, i = xs
    b.need_rank(x, 1, "input")
    b.need_rank(i, x.ndim, "indices", x.ndim)
    dim = b.dim(attrs.get("axis", 0), x.ndim)
    if any(isinstance(d, Sym) for d in i.shape):
        raise b.error(f"GatherElements with indices of symbolic shape {tuple(i.shape)} is "
                      "not supported")
    b.check_size(max(i.shape, default=0), "GatherElements' index grid")
    # x[grid_0, ..., i, ..., grid_n]: an index per dim, the others broadcast aranges
    grids = [np.arange(n).reshape([-1 if k == d else 1 for k in range(x.ndim)])
             for d, n in enumerate(i.shape)]
    grids[dim] = i
    return b.op("index", x, *grids, dims=tuple(range(x.ndim)))


def _gather_nd(b, xs, attrs):
    """GatherND (batch_dims 0): the last axis of the indices holds one index per leading
    dim of x, which is ``index`` over those dims with the columns as index tensors."""
    x, i = xs
    b.need_rank(i, 1, "indices")
    lead = int(attrs.get("batch_dims", 0))
    if lead:   # (the batch dims' own positions as the first index columns)
        if any(isinstance(d, Sym) for d in i.shape[:lead]):
            raise b.error("GatherND with batch_dims over symbolic dims is not supported")
        grids = [np.broadcast_to(np.arange(n).reshape([-1 if k == d else 1
                                                        for k in range(i.ndim - 1)] + [1]),
                                 tuple(i.shape[:-1]) + (1,))
                 for d, n in enumerate(i.shape[:lead])]
        return _gather_nd(b, [x, b.op("cat", *[g.astype(i.dtype) for g in grids], i,
                                      dim=i.ndim - 1)], {})
    if not _is_int(i) or isinstance(i.shape[-1], Sym) or not 1 <= i.shape[-1] <= x.ndim:
        raise b.error(f"GatherND's indices must be integers with a static last dim of 1 to "
                      f"{x.ndim} (the input's dims), got {i.dtype} of shape {tuple(i.shape)}")
    lead = (None,) * (i.ndim - 1)
    columns = [b.reshape(b.slice_dims(i, lead + ((k, k + 1, 1),)), tuple(i.shape[:-1]))
               for k in range(i.shape[-1])]
    return b.op("index", x, *columns, dims=tuple(range(len(columns))))


def _tile(b, xs, attrs):
    x = xs[0]
    reps = b.ints(xs[1], "repeats")
    shape = tuple(x.shape)
    # As Tensor.repeat: a broadcast dim before each dim, (1, s0, 1, s1) -> (r0, s0, r1, s1)
    x = b.reshape(x, [d for s in shape for d in (1, s)])
    x = b.op("expand", x, shape=tuple(d for r, s in zip(reps, shape) for d in (r, s)))
    return b.reshape(x, [r * s for r, s in zip(reps, shape)])


def _constant(b, xs, attrs):
    if "value" in attrs:
        return attrs["value"]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype)
    raise b.error(f"Constant with attrs {sorted(attrs)} is not supported (sparse and "
                  "string constants are not)")


def _constant_of_shape(b, xs, attrs):
    shape = b.ints(xs[0], "shape", shape=True)
    value = attrs.get("value", np.zeros(1, np.float32))
    if value.size != 1 or any(isinstance(d, int) and d < 0 for d in shape):
        raise b.error(f"ConstantOfShape needs a one-element value and a shape without "
                      f"negative dims, got {value.size} elements and shape {shape}")
    value = value.reshape(())
    if _numel(shape) is not None and _numel(shape) <= FOLD_LIMIT:
        return np.full(shape, value, value.dtype)
    return b.op("expand", value, shape=tuple(shape))   # (filled when the model runs)


def _range_type(start, limit, delta):
    """``[(shape, dtype)]`` of a Range from 0 to a symbolic dim by 1 (``arange(T)``: its
    length is that dim); None for another (its length is a fresh dim)."""
    if isinstance(limit, Sym) and start == 0 and delta == 1:
        return [((limit,), np.dtype(np.int64))]
    return None


def _range(b, xs, attrs):
    start, limit, delta = (b.static(x, "Range's start, limit and delta").reshape(())
                           for x in xs)
    if object in (start.dtype, limit.dtype, delta.dtype):   # (counted as the model runs)
        raise RunTimeValue(None, "Range's start, limit and delta",
                           _range_type(start.item(), limit.item(), delta.item()))
    if delta == 0:
        raise b.error("Range's delta is 0")
    b.check_size(int(max(0, np.ceil((limit - start) / delta))), "Range's result")
    return np.arange(start, limit, delta, dtype=start.dtype)


def _pad(b, xs, attrs):
    x = xs[0]
    mode = attrs.get("mode", "constant")
    if b.opset < 11:
        pads, value, axes = list(attrs["pads"]), attrs.get("value", 0.0), None
    else:
        pads = b.ints(xs[1], "pads")
        value = _scalar(b.static(xs[2], "pad value")) if len(xs) > 2 and xs[2] is not None \
            else 0
        axes = b.ints(xs[3], "axes") if len(xs) > 3 and xs[3] is not None else None
    axes = [b.dim(a, x.ndim) for a in (axes if axes is not None else range(x.ndim))]
    k = len(axes)
    for a, lo, hi in zip(axes, pads[:k], pads[k:]):
        if lo or hi:
            x = _pad_dim(b, x, a, lo, hi, mode, value)
    return x


def _pad_dim(b, x, dim, lo, hi, mode, value):
    n = x.shape[dim]
    if isinstance(n, Sym) and mode != "constant":
        raise b.error(f"{mode} padding of the symbolic dim {n} is not supported")
    if mode == "constant":
        index = [None] * x.ndim
        if lo < 0 or hi < 0:   # negative pads crop
            index[dim] = (max(-lo, 0), n - max(-hi, 0), 1)
            x = b.slice_dims(x, index)
        fill = np.asarray(value, x.dtype)
        parts = [b.op("expand", fill, shape=tuple(x.shape[:dim]) + (p,)
                      + tuple(x.shape[dim + 1:])) if p > 0 else None for p in (lo, hi)]
        parts = [p for p in (parts[0], x, parts[1]) if p is not None]
        return parts[0] if len(parts) == 1 else b.op("cat", *parts, dim=dim)
    b.check_size(n + lo + hi, f"{mode}-padded dim")
    pos = np.arange(-lo, n + hi)
    if mode == "edge":
        pos = np.clip(pos, 0, n - 1)
    elif mode == "wrap":
        pos = pos % n
    elif mode == "reflect":
        period = 2 * (n - 1)
        pos = np.abs(pos) % period if period else np.zeros_like(pos)
        pos = np.where(pos >= n, period - pos, pos)
    else:
        raise b.error(f"Pad mode {mode!r} is not one of constant, edge, reflect and wrap")
    return b.op("index", x, pos, dims=(dim,))


# -- reductions ---------------------------------------------------------------------------------
def _reduce_sum_square(b, xs, attrs):
    dims, keep = b.reduce_dims(xs, attrs)
    x = xs[0]
    if dims is None:
        return x
    return b.op("sum", b.op("mul", x, x), dims=dims, keepdim=keep, dtype=x.dtype)


def _topk(b, xs, attrs):
    """TopK -> dualgraph's stable argsort (ONNX's TopK also puts the lower index first
    among equal values) cut to K, and the values it picks; ``sorted=0`` allows any order,
    sorted is one."""
    x = xs[0]
    b.need_rank(x, 1, "input")
    dim = b.dim(attrs.get("axis", -1), x.ndim)
    k = int(b.ints(xs[1], "K")[0]) if b.opset >= 10 else int(attrs["k"])
    order = b.op("argsort", x, dim=dim, descending=bool(attrs.get("largest", 1)))
    window = [None] * x.ndim
    window[dim] = (0, k, 1)
    indices = b.slice_dims(order, window)
    return _gather_elements(b, [x, indices], {"axis": dim}), indices


# -- normalisation ------------------------------------------------------------------------------
def _batch_norm(b, xs, attrs):
    """BatchNormalization. In training mode (opset 14+) it normalises with the batch's mean
    and biased variance and also returns the running statistics updated by ``momentum``."""
    x, scale, bias, mean, var = xs
    b.need_rank(x, 2, "input")
    per_channel = (x.shape[1],) + (1,) * (x.ndim - 2)
    training = attrs.get("training_mode", 0) or len([o for o in b.node.output if o]) > 1
    if training:
        dims = (0,) + tuple(range(2, x.ndim))
        momentum = float(attrs.get("momentum", 0.9))
        batch_mean = b.op("mean", x, dims=dims, keepdim=False)
        centred = b.op("sub", x, b.reshape(batch_mean, per_channel))
        batch_var = b.op("mean", b.op("mul", centred, centred), dims=dims, keepdim=False)
        running = [b.op("add", b.op("mul", old, momentum), b.op("mul", new, 1 - momentum))
                   for old, new in ((mean, batch_mean), (var, batch_var))]
        mean, var = batch_mean, batch_var
    scale, bias, mean, var = (b.reshape(p, per_channel) for p in (scale, bias, mean, var))
    eps = float(attrs.get("epsilon", 1e-5))
    a = b.op("div", scale, b.op("sqrt", b.op("add", var, eps)))
    y = b.op("add", b.op("mul", b.op("sub", x, mean), a), bias)
    return (y, *running) if training else y


def _normalize(b, x, dims, eps):
    """(x - mean) / sqrt(var + eps) over ``dims`` (the biased variance, as ONNX's norms)."""
    mean = b.op("mean", x, dims=dims, keepdim=True)
    centred = b.op("sub", x, mean)
    var = b.op("mean", b.op("mul", centred, centred), dims=dims, keepdim=True)
    return b.op("div", centred, b.op("sqrt", b.op("add", var, eps)))


def _per_channel(b, p, ndim):
    """A (C,) parameter shaped to scale dim 1 of an input with ``ndim`` dims."""
    return b.reshape(p, (p.shape[0],) + (1,) * (ndim - 2))


def _instance_norm(b, xs, attrs):
    x, scale, bias = xs
    b.need_rank(x, 3, "input")
    y = _normalize(b, x, tuple(range(2, x.ndim)), float(attrs.get("epsilon", 1e-5)))
    return b.op("add", b.op("mul", y, _per_channel(b, scale, x.ndim)),
                _per_channel(b, bias, x.ndim))


def _group_norm(b, xs, attrs):
    """GroupNormalization: statistics per (sample, group); the scale and bias are per
    channel (opset 21) or per group (opset 18, repeated over the group's channels)."""
    x, scale, bias = xs
    b.need_rank(x, 3, "input")
    groups, c = int(attrs["num_groups"]), x.shape[1]
    if not isinstance(c, int) or groups < 1 or c % groups:
        raise b.error(f"GroupNormalization of {c} channels into {groups} groups")
    grouped = b.reshape(x, (x.shape[0], groups, c // groups) + tuple(x.shape[2:]))
    y = b.reshape(_normalize(b, grouped, tuple(range(2, grouped.ndim)),
                             float(attrs.get("epsilon", 1e-5))), tuple(x.shape))
    if scale.shape[0] != c:   # (per group)
        scale, bias = (b.reshape(b.op("expand", b.reshape(p, (groups, 1)),
                                      shape=(groups, c // groups)), (c,))
                       for p in (scale, bias))
    return b.op("add", b.op("mul", y, _per_channel(b, scale, x.ndim)),
                _per_channel(b, bias, x.ndim))


def _mean_variance_norm(b, xs, attrs):
    x = xs[0]
    return _normalize(b, x, b.dims(attrs.get("axes", (0, 2, 3)), x.ndim), 1e-9)


def _rms_norm(b, xs, attrs):
    """RMSNormalization: x / sqrt(mean(x^2) + eps) over the dims from ``axis`` on, in
    float32 for narrower floats (stash_type 1), times the scale."""
    x, scale = xs
    dims = tuple(range(b.dim(attrs.get("axis", -1), x.ndim), x.ndim))
    wide = b.cast(x, np.float32) if x.dtype.itemsize < 4 else x
    square = b.op("mean", b.op("mul", wide, wide), dims=dims, keepdim=True)
    rms = b.op("sqrt", b.op("add", square, float(attrs.get("epsilon", 1e-5))))
    return b.cast(b.op("mul", b.op("div", wide, rms), scale), x.dtype)


def _lrn(b, xs, attrs):
    """LRN: x / (bias + alpha / size * (sum of squares over a window of channels))**beta,
    the window from c - floor((size-1)/2) to c + ceil((size-1)/2)."""
    x = xs[0]
    b.need_rank(x, 3, "input")
    size = int(attrs["size"])
    alpha, beta = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    square = b.op("mul", x, x)
    padded = _pad_dim(b, square, 1, lo, hi, "constant", 0)
    c = x.shape[1]
    total = None
    for k in range(size):
        window = b.slice_dims(padded, [(k, k + c, 1) if d == 1 else None
                                       for d in range(x.ndim)])
        total = window if total is None else b.op("add", total, window)
    scale = b.op("add", b.op("mul", total, alpha / size), float(attrs.get("bias", 1.0)))
    return b.op("div", x, b.op("pow", scale, beta))


def _reverse_sequence(b, xs, attrs):
    """ReverseSequence: the first ``sequence_lens[i]`` steps of sequence i reversed, picked
    with ``index`` (the lengths must be known: as an input, the model is specialised on
    them)."""
    x, lens = xs
    lens = b.ints(lens, "sequence_lens")
    t_axis, b_axis = attrs.get("time_axis", 0), attrs.get("batch_axis", 1)
    steps, batch = x.shape[t_axis], x.shape[b_axis]
    t = np.arange(steps).reshape(-1, 1)
    n = np.asarray(lens).reshape(1, -1)
    order = np.where(t < n, n - 1 - t, t)                      # (steps, batch)
    rows = np.broadcast_to(np.arange(batch).reshape(1, -1), order.shape)
    picks = (order, rows) if t_axis == 0 else (rows.T, order.T)
    return b.op("index", x, *picks, dims=(0, 1))


def _tensor_scatter(b, xs, attrs):
    """TensorScatter: the update written into the cache along ``axis`` from each batch's
    write index on (wrapping around with mode "circular"), with ``index_put``."""
    cache, update, where = (list(xs) + [None])[:3]
    axis = b.dim(attrs.get("axis", -2), cache.ndim)
    length, steps = cache.shape[axis], update.shape[axis]
    lead = [1] * (axis + 1)
    grids = [np.arange(n).reshape(lead[:d] + [-1] + lead[d + 1:])
             for d, n in enumerate(cache.shape[:axis])]
    pos = np.arange(steps).reshape(lead[:axis] + [-1])
    if where is not None:
        pos = b.op("add", b.reshape(b.cast(where, np.int64), [-1] + lead[1:]), pos)
    if attrs.get("mode", "linear") == "circular":
        pos = b.op("remainder", pos, length)
    return b.op("index_put", cache, update, *grids, pos, dims=tuple(range(axis + 1)),
                accumulate=False)


def _depth_to_space(b, xs, attrs):
    x = xs[0]
    b.need_rank(x, 4, "input", 4)
    n, c, h, w = x.shape
    k = int(attrs["blocksize"])
    if attrs.get("mode", "DCR") == "DCR":
        y = b.reshape(x, (n, k, k, c // (k * k), h, w))
        y = b.op("permute", y, perm=(0, 3, 4, 1, 5, 2))
    else:
        y = b.reshape(x, (n, c // (k * k), k, k, h, w))
        y = b.op("permute", y, perm=(0, 1, 4, 2, 5, 3))
    return b.reshape(y, (n, c // (k * k), h * k, w * k))


def _space_to_depth(b, xs, attrs):
    x = xs[0]
    b.need_rank(x, 4, "input", 4)
    n, c, h, w = x.shape
    k = int(attrs["blocksize"])
    y = b.reshape(x, (n, c, h // k, k, w // k, k))
    crd = attrs.get("mode", "DCR") == "CRD"
    y = b.op("permute", y, perm=(0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4))
    return b.reshape(y, (n, c * k * k, h // k, w // k))


def _one_hot(b, xs, attrs):
    """OneHot: ``on`` where the index (negative ones counted from ``depth``) is the position
    along the new ``axis``, else ``off``."""
    indices, depth, values = xs
    depth = int(np.asarray(b.static(depth, "depth")).reshape(-1)[0])
    ndim = indices.ndim + 1
    axis = b.dim(attrs.get("axis", -1), ndim)
    idx = b.op("where", b.op("lt", indices, 0), b.op("add", indices, depth), indices)
    idx = b.reshape(idx, tuple(indices.shape[:axis]) + (1,) + tuple(indices.shape[axis:]))
    positions = np.arange(depth).reshape([-1 if k == axis else 1 for k in range(ndim)])
    hit = b.op("eq", idx, positions)
    off, on = (b.reshape(b.slice_dims(values, [(k, k + 1, 1)]), ()) for k in (0, 1))
    return b.op("where", hit, on, off)


def _scatter_reduce(b, x, coords: np.ndarray, updates, reduction: str):
    """Updates combined into ``x`` at ``coords`` (known: one row of leading-dim indices per
    update) by "mul", "max" or "min": in rounds, each writing at most one update per
    position (a position named n times takes n rounds), so repeats combine in order."""
    if reduction not in ("mul", "max", "min"):
        raise b.error(f"reduction {reduction!r} is not one of none, add, mul, max and min")
    combine = "mul" if reduction == "mul" else "maximum" if reduction == "max" else "minimum"
    coords = np.where(coords < 0, coords + np.asarray(x.shape[:coords.shape[1]]), coords)
    seen: dict = {}
    rounds: list = []
    for row, key in enumerate(map(tuple, coords.tolist())):
        r = seen.get(key, 0)
        seen[key] = r + 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append(row)
    dims = tuple(range(coords.shape[1]))
    for rows in rounds:
        cols = [coords[rows, d] for d in dims]
        now = b.op("index", x, *cols, dims=dims)
        new = b.op(combine, now, b.op("index", updates, np.asarray(rows), dims=(0,)))
        x = b.op("index_put", x, b.cast(new, x.dtype), *cols, dims=dims, accumulate=False)
    return x


def _scatter_elements(b, xs, attrs):
    """ScatterElements (and the old Scatter) -> index_put at the positions the indices
    name along ``axis`` and their own positions in the other dims."""
    x, i, updates = xs
    b.need_rank(x, 1, "input")
    reduction = attrs.get("reduction", "none")
    dim = b.dim(attrs.get("axis", 0), x.ndim)
    if reduction not in ("none", "add"):
        known = np.asarray(b.static(i, "indices"), np.int64)
        known = np.where(known < 0, known + x.shape[dim], known)
        coords = np.stack([known.reshape(-1) if d == dim else
                           np.broadcast_to(np.arange(n).reshape([-1 if k == d else 1 for k in
                                                                  range(x.ndim)]),
                                           known.shape).reshape(-1)
                           for d, n in enumerate(known.shape)], axis=1)
        return _scatter_reduce(b, x, coords, b.reshape(updates, (-1,)), reduction)
    if any(isinstance(d, Sym) for d in i.shape):
        raise b.error(f"ScatterElements with indices of symbolic shape {tuple(i.shape)} is "
                      "not supported")
    n = x.shape[dim]
    i = b.op("where", b.op("lt", i, 0), b.op("add", i, n), i)
    grids = [np.broadcast_to(np.arange(m).reshape([-1 if k == d else 1
                                                   for k in range(x.ndim)]), i.shape)
             for d, m in enumerate(i.shape)]
    grids[dim] = i
    return b.op("index_put", x, b.cast(updates, x.dtype), *grids, dims=tuple(range(x.ndim)),
                accumulate=reduction == "add")


# -- training ops (domain ai.onnx.preview.training) ----------------------------------------------
def _optimizer(kind):
    """Adagrad, Momentum and Adam: one update of every tensor X_i by its gradient G_i and
    state, from the learning rate R and step count T, as the ONNX definitions give it; the
    outputs are the new tensors, then the new states."""
    def convert(b, xs, attrs):
        rate, step = b.reshape(xs[0], ()), b.cast(b.reshape(xs[1], ()), np.float64)
        per = {"Adagrad": 3, "Momentum": 3, "Adam": 4}[kind]
        n = (len(xs) - 2) // per
        groups = [xs[2 + k * n:2 + (k + 1) * n] for k in range(per)]
        norm = float(attrs.get("norm_coefficient", 0.0))
        outs = [[] for _ in range(per - 1)]
        for x, g, *state in zip(*groups):
            g = b.op("add", b.op("mul", x, norm), g)
            if kind == "Adagrad":
                r = b.op("div", rate, b.op("add", b.op("mul", step,
                                                        float(attrs.get("decay_factor", 0.0))),
                                             1.0))
                h = b.op("add", state[0], b.op("mul", g, g))
                root = b.op("add", b.op("sqrt", h), float(attrs.get("epsilon", 0.0)))
                new = [b.op("sub", x, b.op("div", b.op("mul", r, g), root)), h]
            elif kind == "Momentum":
                alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
                scale = b.op("where", b.op("gt", step, 0.0), beta, 1.0)
                v = b.op("add", b.op("mul", state[0], alpha), b.op("mul", g, scale))
                move = v if attrs.get("mode", "standard") == "standard" else \
                    b.op("add", g, b.op("mul", v, alpha))
                new = [b.op("sub", x, b.op("mul", rate, move)), v]
            else:
                alpha, beta = float(attrs.get("alpha", 0.9)), float(attrs.get("beta", 0.999))
                v = b.op("add", b.op("mul", state[0], alpha), b.op("mul", g, 1 - alpha))
                h = b.op("add", b.op("mul", state[1], beta),
                         b.op("mul", b.op("mul", g, g), 1 - beta))
                root = b.op("add", b.op("sqrt", h), float(attrs.get("epsilon", 1e-6)))
                fix = b.op("div", b.op("sqrt", b.op("sub", 1.0, b.op("pow", beta, step))),
                           b.op("sub", 1.0, b.op("pow", alpha, step)))
                r = b.op("where", b.op("gt", step, 0.0), b.op("mul", rate, fix), rate)
                x_new = b.op("sub", x, b.op("mul", r, b.op("div", v, root)))
                x_new = b.op("mul", x_new, 1 - float(attrs.get("norm_coefficient_post", 0.0)))
                new = [x_new, v, h]
            for k, t in enumerate(new):
                outs[k].append(b.cast(t, x.dtype))
        return tuple(t for part in outs for t in part)
    return convert


# The op types imported from a domain other than the default one, and that domain.
DOMAINS = {**dict.fromkeys(("Adagrad", "Momentum", "Adam"), "ai.onnx.preview.training"),
           **dict.fromkeys(("Binarizer", "ArrayFeatureExtractor"), "ai.onnx.ml")}


# -- the classical-ML domain's plain math (ai.onnx.ml) -------------------------------------------
def _binarizer(b, xs, attrs):
    x = xs[0]
    above = b.op("gt", x, np.asarray(attrs.get("threshold", 0.0), x.dtype))
    return b.op("where", above, np.ones((), x.dtype), np.zeros((), x.dtype))


def _array_feature_extractor(b, xs, attrs):
    """The elements of X at indices Y along its last axis (a 1-D X gives a [1, n] result)."""
    x, y = xs
    x = b.reshape(x, (1, *x.shape)) if x.ndim == 1 else x
    return b.op("index", x, b.reshape(y, (numel(y.shape),)), dims=(x.ndim - 1,))


# -- quantisation -------------------------------------------------------------------------------
_QUANT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535),
                 "int16": (-32768, 32767), "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3),
                 "int2": (-2, 1), "int32": (-2 ** 31, 2 ** 31 - 1)}


def _quant_param(b, p, x, axis: int, block: int):
    """A scale or zero point shaped to broadcast against ``x``: one value, one per index of
    ``axis``, or (``block``) one per block of that many indices along it."""
    if p is None or p.ndim == 0:
        return p
    if numel(p.shape) == 1:
        return b.reshape(p, ())
    axis = b.dim(axis, x.ndim)
    if not block:
        return b.reshape(p, tuple(-1 if k == axis else 1 for k in range(x.ndim)))
    shape = tuple(p.shape)
    spread = b.op("expand", b.reshape(p, shape[:axis + 1] + (1,) + shape[axis + 1:]),
                  shape=shape[:axis + 1] + (block,) + shape[axis + 1:])
    whole = b.reshape(spread, shape[:axis] + (shape[axis] * block,) + shape[axis + 1:])
    return _part(b, whole, axis, 0, x.shape[axis])


def _quantize(b, x, scale, zero, dtype, saturate=True):
    """round(x / scale) + zero, clipped to ``dtype``'s range (float8 and float4 types: the
    saturating cast)."""
    y = b.cast(x, np.float32) if scale is None else \
        b.op("div", b.cast(x, np.float32), b.cast(scale, np.float32))
    if dtype.name in _QUANT_RANGES:
        y = b.op("round", y)
        if zero is not None:
            y = b.op("add", y, b.cast(zero, np.float32))
        lo, hi = _QUANT_RANGES[dtype.name]
        return b.cast(b.op("minimum", b.op("maximum", y, float(lo)), float(hi)), dtype)
    if zero is not None and "float4" in dtype.name:
        y = b.op("add", y, b.cast(zero, np.float32))
    if saturate:
        big = float(ml_dtypes.finfo(dtype).max)
        y = b.op("minimum", b.op("maximum", y, -big), big)
    return b.cast(y, dtype)


def _quantize_linear(b, xs, attrs):
    x, scale, zero = (list(xs) + [None])[:3]
    axis, block = attrs.get("axis", 1), int(attrs.get("block_size", 0))
    dtype = zero.dtype if zero is not None else \
        b.onnx_dtype(attrs["output_dtype"], "output_dtype") if attrs.get("output_dtype") \
        else np.dtype(np.uint8)
    if "precision" in attrs:
        wide = b.onnx_dtype(attrs["precision"], "precision")
        x, scale = b.cast(x, wide), b.cast(scale, wide)
    return _quantize(b, x, _quant_param(b, scale, x, axis, block),
                     _quant_param(b, zero, x, axis, block), dtype,
                     bool(attrs.get("saturate", 1)))


def _dequantize_linear(b, xs, attrs):
    x, scale, zero = (list(xs) + [None])[:3]
    axis, block = attrs.get("axis", 1), int(attrs.get("block_size", 0))
    y = b.cast(x, np.float32)
    if zero is not None and x.dtype.kind in "iu" or zero is not None and \
            x.dtype.name in ("int4", "uint4", "int2", "uint2"):
        y = b.op("sub", y, b.cast(_quant_param(b, zero, x, axis, block), np.float32))
    y = b.op("mul", y, _quant_param(b, scale, x, axis, block))
    dtype = b.onnx_dtype(attrs["output_dtype"], "output_dtype") if attrs.get("output_dtype") \
        else scale.dtype
    return b.cast(y, dtype)


def _dynamic_quantize_linear(b, xs, attrs):
    """uint8 with the scale and zero point that map [min(x, 0), max(x, 0)] onto 0..255."""
    x = xs[0]
    every = tuple(range(x.ndim))
    hi = b.op("maximum", b.op("amax", x, dims=every, keepdim=False), 0.0)
    lo = b.op("minimum", b.op("amin", x, dims=every, keepdim=False), 0.0)
    span = b.op("sub", hi, lo)
    scale = b.op("div", b.op("where", b.op("eq", span, 0), 1.0, span), 255.0)
    zero = b.op("round", b.op("minimum", b.op("maximum", b.op("div", b.op("neg", lo), scale),
                                               0.0), 255.0))
    y = b.op("minimum", b.op("maximum", b.op("add", b.op("round", b.op("div", x, scale)),
                                                   zero), 0.0), 255.0)
    u8 = np.dtype(np.uint8)
    return b.cast(y, u8), b.cast(scale, x.dtype), b.cast(zero, u8)


def _integer_operands(b, pairs):
    """int32 operands less their zero points (None: none)."""
    return [b.cast(v, np.int32) if z is None else
            b.op("sub", b.cast(v, np.int32), b.cast(z, np.int32)) for v, z in pairs]


def _matmul_integer(b, xs, attrs):
    a, c, za, zc = (list(xs) + [None, None])[:4]
    if zc is not None and zc.ndim == 1 and numel(zc.shape) > 1:   # (per column of c)
        zc = b.reshape(zc, (1, -1))
    if za is not None and za.ndim == 1 and numel(za.shape) > 1:   # (per row of a)
        za = b.reshape(za, (-1, 1))
    left, right = _integer_operands(b, [(a, za), (c, zc)])
    # (exact in float64 while the sums stay below 2**53)
    return b.cast(b.op("matmul", b.cast(left, np.float64), b.cast(right, np.float64)), np.int32)


def _qlinear_matmul(b, xs, attrs):
    a, sa, za, c, sc, zc, sy, zy = xs
    product = _matmul_integer(b, [a, c, za, zc], {})
    scale = b.op("div", b.op("mul", b.cast(sa, np.float64), b.cast(sc, np.float64)),
                 b.cast(sy, np.float64))
    y = b.op("mul", b.cast(product, np.float64), scale)
    return _quantize(b, y, None, zy, zy.dtype)


def _conv_integer(b, xs, attrs):
    x, w, zx, zw = (list(xs) + [None, None])[:4]
    if zw is not None and zw.ndim == 1 and numel(zw.shape) > 1:
        zw = b.reshape(zw, (-1,) + (1,) * (w.ndim - 1))
    left, right = _integer_operands(b, [(x, zx), (w, zw)])
    y = _conv(b, [b.cast(left, np.float64), b.cast(right, np.float64)], attrs)
    return b.cast(b.op("round", y), np.int32)


def _qlinear_conv(b, xs, attrs):
    x, sx, zx, w, sw, zw, sy, zy, bias = (list(xs) + [None])[:9]
    y = b.cast(_conv_integer(b, [x, w, zx, zw], attrs), np.float64)
    if bias is not None:
        y = b.op("add", y, b.reshape(b.cast(bias, np.float64), (-1,) + (1,) * (x.ndim - 2)))
    scale = b.op("mul", b.cast(sx, np.float64), b.cast(sw, np.float64))
    if scale.ndim == 1 and numel(scale.shape) > 1:
        scale = b.reshape(scale, (-1,) + (1,) * (x.ndim - 2))
    y = b.op("div", b.op("mul", y, scale), b.cast(sy, np.float64))
    return _quantize(b, y, None, zy, zy.dtype)


# -- losses -------------------------------------------------------------------------------------
def _nll(b, log_prob, labels, weight, attrs):
    """NegativeLogLikelihoodLoss of ``log_prob`` (N, C, d...) at ``labels`` (N, d...): minus
    the picked entry, times the class weight (0 at ``ignore_index``); "mean" divides by the
    weights' sum (the count of targets not ignored, without weights)."""
    b.need_rank(log_prob, 2, "input")
    n, c = log_prob.shape[:2]
    rest = tuple(log_prob.shape[2:])
    flat = b.reshape(log_prob, (n, c, -1))
    t = b.reshape(labels, (n, -1))
    ignore = attrs.get("ignore_index")
    ignored = None if ignore is None else b.op("eq", t, int(ignore))
    safe = t if ignored is None else b.op("where", ignored, np.zeros((), t.dtype), t)
    rows = np.arange(n).reshape(n, 1)
    cols = np.arange(flat.shape[2]).reshape(1, -1)
    picked = b.op("index", flat, rows, safe, cols, dims=(0, 1, 2))
    w = None if weight is None else b.op("index", weight, safe, dims=(0,))
    if ignored is not None:
        w = b.op("where", ignored, np.zeros((), log_prob.dtype),
                 np.ones((), log_prob.dtype) if w is None else w)
    loss = b.op("neg", picked) if w is None else b.op("mul", b.op("neg", picked), w)
    reduction = attrs.get("reduction", "mean")
    if reduction == "none":
        return b.reshape(loss, (n,) + rest)
    total = b.op("sum", loss, dims=(0, 1), keepdim=False, dtype=log_prob.dtype)
    if reduction == "sum":
        return total
    if reduction != "mean":
        raise b.error(f"reduction {reduction!r} is not one of none, sum and mean")
    if w is None:
        return b.op("div", total, float(numel(loss.shape)))
    return b.op("div", total, b.op("sum", w, dims=(0, 1), keepdim=False, dtype=w.dtype))


def _nll_loss(b, xs, attrs):
    x, labels, weight = (list(xs) + [None])[:3]
    return _nll(b, x, labels, weight, attrs)


def _softmax_cross_entropy(b, xs, attrs):
    """SoftmaxCrossEntropyLoss: the NLL loss of the log-softmax over the classes (dim 1),
    which is also its second output."""
    x, labels, weight = (list(xs) + [None])[:3]
    log_prob = b.op("log_softmax", x, dim=1)
    if x.ndim == 2 and weight is None:   # (dualgraph's cross_entropy: any batch, symbolic too)
        ignore = attrs.get("ignore_index", np.iinfo(np.int64).min)
        return b.op("cross_entropy", x, labels, ignore_index=int(ignore),
                    reduction=attrs.get("reduction", "mean")), log_prob
    return _nll(b, log_prob, labels, weight, attrs), log_prob


# -- resize -------------------------------------------------------------------------------------
def _resize_coeffs(mode: str, attrs, ratio: float, scale: float) -> np.ndarray:
    """The weights of one output position's neighbours, ``ratio`` in (0, 1] past the left
    one (ONNX's Resize reference: nearest, linear and cubic, with antialias)."""
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        rule = attrs.get("nearest_mode", "round_prefer_floor")
        left = ratio <= 0.5 if rule == "round_prefer_floor" else \
            ratio < 0.5 if rule == "round_prefer_ceil" else rule == "floor"
        return np.array([float(left), float(not left)])
    antialias = attrs.get("antialias", 0) and scale < 1
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        coeffs = np.clip(1 - np.abs(args), 0, 1)
        return coeffs / coeffs.sum()
    a = float(attrs.get("cubic_coeff_a", -0.75))

    def cubic(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a if x < 2 else 0.0
    if not antialias:
        return np.array([cubic(ratio + 1), cubic(ratio), cubic(1 - ratio), cubic(2 - ratio)])
    start = int(np.floor(-2 / scale) + 1)
    coeffs = np.array([cubic(scale * (i - ratio)) for i in range(start, 2 - start)])
    return coeffs / coeffs.sum()


def _resize_axis(b, attrs, mode, n: int, out: int, scale: float, roi):
    """The matrix (out, n) that resizes one axis of length ``n`` to ``out``, and a mask of
    the output positions outside the input (tf_crop_and_resize) or None."""
    how = attrs.get("coordinate_transformation_mode", "half_pixel" if b.opset >= 11 else
                    "asymmetric")
    y = np.arange(out, dtype=np.float64)
    width = scale * n
    outside = None
    if how == "align_corners":
        x = np.zeros(out) if width == 1 else y * (n - 1) / (width - 1)
    elif how == "asymmetric":
        x = y / scale
    elif how == "tf_crop_and_resize":
        lo, hi = roi
        x = np.full(out, (hi - lo) * (n - 1) / 2) if width == 1 else \
            y * (hi - lo) * (n - 1) / (width - 1)
        x = x + lo * (n - 1)
        outside = (x < 0) | (x > n - 1)
    elif how == "pytorch_half_pixel":
        x = np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif how == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif how == "half_pixel_symmetric":
        x = n / 2 * (1 - out / width) + (y + 0.5) / scale - 0.5
    else:
        raise b.error(f"coordinate_transformation_mode {how!r} is not supported")
    left = np.floor(x).astype(np.int64)
    ratios = np.where(x == left, 1.0, x - left)
    coeffs = np.stack([_resize_coeffs(mode, attrs, float(r), scale) for r in ratios]) \
        if out else np.zeros((0, 2))
    k = coeffs.shape[1]
    pad = (k + 1) // 2
    padded = x + pad
    p = np.floor(padded).astype(np.int64)
    frac = padded - p
    if k % 2 == 0:
        first = np.where(frac == 0, -(k // 2), -(k // 2) + 1)
    else:
        first = np.where(frac <= 0.5, -((k - 1) // 2), -((k - 1) // 2) + 1)
    idx = (p + first)[:, None] + np.arange(k)[None, :] - pad
    if attrs.get("exclude_outside", 0):
        coeffs = np.where((idx < 0) | (idx >= n), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    matrix = np.zeros((out, n))
    np.add.at(matrix, (np.repeat(np.arange(out), k), np.clip(idx, 0, n - 1).reshape(-1)),
              coeffs.reshape(-1))
    return matrix, outside


def _static_resized_axes(b, x, symbolic: list, by: str) -> None:
    """Resize's weights are computed when loading, so an axis it resizes must have a static
    size (a symbolic one, a dynamic batch say, is fine where its scale is 1): else the model
    is imported per input shape, and where a size is data-dependent, refused."""
    if symbolic:
        b.needs_shapes()
        raise b.error(f"Resize by {by} along the symbolic dims {symbolic} of "
                      f"{tuple(x.shape)} is not supported: its weights are computed when "
                      f"loading, and these sizes are computed from the inputs' values")


def _resize(b, xs, attrs):
    """Resize (and Upsample): separable, so each resized axis is a product with a matrix
    of weights computed when loading (its rows the output positions); nearest picks with
    ``index`` instead, exact for any dtype. Computed in float64 and cast back, as ONNX's
    reference does."""
    x = xs[0]
    if b.node.op_type == "Upsample":   # (asymmetric coordinates, the nearest pixel below)
        attrs = dict(attrs, nearest_mode="floor")
    if b.node.op_type == "Upsample" or b.opset < 11:
        roi, sizes = None, None
        scales = attrs.get("scales") if len(xs) < 2 else b.static(xs[1], "scales")
    else:
        roi, scales, sizes = (list(xs[1:]) + [None] * 3)[:3]
        roi, scales, sizes = (None if t is None or (isinstance(t, np.ndarray) and t.size == 0)
                              else b.static(t, what)
                              for t, what in ((roi, "roi"), (scales, "scales"),
                                              (sizes, "sizes")))
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic", "bilinear"):
        raise b.error(f"Resize mode {mode!r} is not supported")
    mode = "linear" if mode == "bilinear" else mode
    r = x.ndim
    axes = [b.dim(a, r) for a in attrs.get("axes", range(r))]
    shape = list(x.shape)
    rois = {}
    if roi is not None:
        roi = np.reshape(roi, -1).astype(np.float64)
        rois = {a: (roi[i], roi[len(axes) + i]) for i, a in enumerate(axes)}
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if sizes is not None:
        sizes = [v if isinstance(v, Sym) else int(v) for v in np.reshape(sizes, -1)]
        same = [a for a, size in zip(axes, sizes)   # (a dynamic batch's size read back)
                if isinstance(size, Sym) and size == shape[a] and policy == "stretch"]
        _static_resized_axes(b, x, [a for a, size in zip(axes, sizes) if a not in same and (
            isinstance(size, Sym) or isinstance(shape[a], Sym))], "sizes")
        sizes = [size for a, size in zip(axes, sizes) if a not in same]
        axes = [a for a in axes if a not in same]
        factors = {a: sizes[i] / shape[a] for i, a in enumerate(axes)}
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            common = pick(factors.values())
            factors = dict.fromkeys(axes, common)
            sizes = [int(common * shape[a] + 0.5) for a in axes]
        outs = dict(zip(axes, sizes))
    else:
        factors = {a: float(v) for a, v in zip(axes, np.reshape(scales, -1))}
        same = [a for a in axes if isinstance(shape[a], Sym) and np.isclose(factors[a], 1.0)
                and np.allclose(rois.get(a, (0.0, 1.0)), (0.0, 1.0))]
        axes = [a for a in axes if a not in same]
        _static_resized_axes(b, x, [a for a in axes if isinstance(shape[a], Sym)], "scales")
        outs = {a: int(factors[a] * shape[a]) for a in axes}
    y = x if mode == "nearest" else b.cast(x, np.float64)
    for a in axes:
        n, out, factor = shape[a], outs[a], factors[a]
        span = rois.get(a, (0.0, 1.0))
        if out == n and np.isclose(factor, 1.0) and np.allclose(span, (0.0, 1.0)):
            continue
        b.check_size(out * n, "Resize's weights")
        matrix, outside = _resize_axis(b, attrs, mode, n, out, factor, span)
        if mode == "nearest":
            y = b.op("index", y, matrix.argmax(axis=1), dims=(a,))
        else:
            moved = _move_axis(b, y, a, y.ndim - 1)
            y = _move_axis(b, b.op("matmul", moved, np.ascontiguousarray(matrix.T)),
                           y.ndim - 1, a)
        if outside is not None and outside.any():
            where = outside.reshape([-1 if k == a else 1 for k in range(r)])
            fill = np.asarray(attrs.get("extrapolation_value", 0.0), y.dtype)
            y = b.op("where", where, fill, y)
    if y.dtype != x.dtype and x.dtype.kind in "iu":   # (saturating, as the reference)
        info = np.iinfo(x.dtype)
        y = b.op("minimum", b.op("maximum", b.op("round", y), float(info.min)),
                 float(info.max))
    return b.cast(y, x.dtype)


# -- recurrent layers ---------------------------------------------------------------------------
_RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_RNN_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"),
                    "LSTM": ("Sigmoid", "Tanh", "Tanh")}


def _activation(b, name: str, alpha, beta):
    """The ONNX recurrent layers' activation ``name`` as a function of a Value."""
    rules = {
        "Sigmoid": lambda x: b.op("sigmoid", x), "Tanh": lambda x: b.op("tanh", x),
        "Relu": lambda x: b.op("relu", x),
        "LeakyRelu": lambda x: _leaky_relu(b, [x], {"alpha": alpha if alpha is not None
                                                    else 0.01}),
        "ThresholdedRelu": lambda x: _thresholded_relu(b, x, {"alpha": alpha or 1.0}),
        "HardSigmoid": lambda x: _hard_sigmoid_of(b, x, 0.2 if alpha is None else alpha,
                                                  0.5 if beta is None else beta),
        "Affine": lambda x: b.op("add", b.op("mul", x, alpha), beta),
        "ScaledTanh": lambda x: b.op("mul", b.op("tanh", b.op("mul", x, beta)), alpha),
        "Elu": lambda x: b.op("elu", x, alpha=1.0 if alpha is None else alpha),
        "Softsign": lambda x: _softsign(b, [x], {}),
        "Softplus": lambda x: b.op("softplus", x, beta=1.0, threshold=20.0),
    }
    if name not in rules:
        raise b.error(f"activation {name!r} is not supported")
    return rules[name]


def _part(b, x, dim: int, k: int, size: int):
    """Part ``k`` of ``x`` cut into parts of ``size`` along ``dim``."""
    index = [None] * x.ndim
    index[dim] = (k * size, (k + 1) * size, 1)
    return b.slice_dims(x, index)


def _recurrent(b, xs, attrs):
    """RNN, GRU and LSTM, unrolled over the (static) sequence: per direction, the input
    projections of every step in one product, then one step's gates after another, as the
    ONNX equations give them (gate orders: GRU z r h, LSTM i o f c; peepholes i o f).
    ``sequence_lens`` keeps a finished sequence's state and gives zeros past its end."""
    kind = b.node.op_type
    x, w, r, bias, lens, h0 = (list(xs) + [None] * 6)[:6]
    c0, peep = ((list(xs[6:]) + [None, None])[:2]) if kind == "LSTM" else (None, None)
    layout = attrs.get("layout", 0)
    if layout:
        x = b.op("permute", x, perm=(1, 0, 2))
        h0, c0 = (None if t is None else b.op("permute", t, perm=(1, 0, 2)) for t in (h0, c0))
    steps, batch, _ = x.shape
    hidden = int(attrs.get("hidden_size", w.shape[1] // _RNN_GATES[kind]))
    if not isinstance(steps, int):
        raise b.error(f"{kind} over a symbolic number of steps {steps} is not supported")
    direction = attrs.get("direction", "forward")
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
    if lens is not None and True in dirs:
        raise b.error(f"{kind} in reverse with sequence_lens is not supported")
    names = list(attrs.get("activations", _RNN_ACTIVATIONS[kind] * len(dirs)))
    per = len(_RNN_ACTIVATIONS[kind])
    alphas = list(attrs.get("activation_alpha", ())) + [None] * len(names)
    betas = list(attrs.get("activation_beta", ())) + [None] * len(names)
    clip = attrs.get("clip")
    gates = _RNN_GATES[kind]
    ys, last_h, last_c = [], [], []
    for d, backwards in enumerate(dirs):
        f, g, h = ([_activation(b, names[d * per + k], alphas[d * per + k],
                                betas[d * per + k]) for k in range(per)] + [None, None])[:3]

        def pick(t, k=d):
            return b.reshape(_part(b, t, 0, k, 1), tuple(t.shape[1:]))
        wd, rd = pick(w), pick(r)
        proj = b.op("matmul", x, b.op("permute", wd, perm=(1, 0)))   # (steps, batch, G*h)
        rb = None
        if bias is not None:
            bd = pick(bias)
            wb, rb = _part(b, bd, 0, 0, gates * hidden), _part(b, bd, 0, 1, gates * hidden)
            proj = b.op("add", proj, wb if kind == "GRU" else b.op("add", wb, rb))
        zeros = b.op("full", shape=(batch, hidden), fill_value=0, dtype=x.dtype)  # (a batch
        state = pick(h0) if h0 is not None else zeros   # that may be symbolic: not np.zeros)
        cell = pick(c0) if c0 is not None else zeros
        p = pick(peep) if peep is not None else None
        outs = [None] * steps
        for t in (range(steps - 1, -1, -1) if backwards else range(steps)):
            xt = b.reshape(_part(b, proj, 0, t, 1), (batch, gates * hidden))

            def part(v, k):
                return _part(b, v, v.ndim - 1, k, hidden)
            clipped = (lambda v: v) if clip is None else \
                (lambda v: b.op("minimum", b.op("maximum", v, -clip), clip))
            if kind == "GRU":
                rz = b.op("matmul", state, b.op("permute", rd, perm=(1, 0)))
                if rb is not None:
                    rz = b.op("add", rz, rb)
                z = f(clipped(b.op("add", part(xt, 0), part(rz, 0))))
                reset = f(clipped(b.op("add", part(xt, 1), part(rz, 1))))
                if attrs.get("linear_before_reset", 0):
                    hh = b.op("mul", reset, part(rz, 2))
                else:
                    rh = _part(b, rd, 0, 2, hidden)
                    hh = b.op("matmul", b.op("mul", reset, state),
                              b.op("permute", rh, perm=(1, 0)))
                    if rb is not None:
                        hh = b.op("add", hh, _part(b, rb, 0, 2, hidden))
                cand = g(clipped(b.op("add", part(xt, 2), hh)))
                new = b.op("add", b.op("mul", b.op("sub", 1.0, z), cand), b.op("mul", z, state))
            else:
                pre = b.op("add", xt, b.op("matmul", state, b.op("permute", rd, perm=(1, 0))))
                if kind == "RNN":
                    new = f(clipped(pre))
                else:
                    peeps = [None] * 3 if p is None else \
                        [_part(b, p, 0, k, hidden) for k in range(3)]

                    def gate(k, pk, c):
                        v = part(pre, k)
                        return f(clipped(v if pk is None else b.op("add", v, b.op("mul", pk, c))))
                    i = gate(0, peeps[0], cell)
                    forget = gate(2, peeps[2], cell)
                    if attrs.get("input_forget", 0):
                        forget = b.op("sub", 1.0, i)
                    cell_new = b.op("add", b.op("mul", forget, cell),
                                    b.op("mul", i, g(clipped(part(pre, 3)))))
                    o = gate(1, peeps[1], cell_new)
                    new = b.op("mul", o, h(cell_new))
            if lens is not None:   # (finished sequences keep their state)
                going = b.reshape(b.op("lt", t, lens), (batch, 1))
                new = b.op("where", going, new, state)
                if kind == "LSTM":
                    cell_new = b.op("where", going, cell_new, cell)
                outs[t] = b.op("where", going, new, np.zeros((), x.dtype))
            else:
                outs[t] = new
            state = new
            if kind == "LSTM":
                cell = cell_new
        ys.append(b.op("cat", *[b.reshape(o, (1, 1, batch, hidden)) for o in outs], dim=0))
        last_h.append(b.reshape(state, (1, batch, hidden)))
        last_c.append(b.reshape(cell, (1, batch, hidden)) if kind == "LSTM" else None)
    y = ys[0] if len(ys) == 1 else b.op("cat", *ys, dim=1)   # (steps, dirs, batch, hidden)
    yh = last_h[0] if len(dirs) == 1 else b.op("cat", *last_h, dim=0)
    yc = None if kind != "LSTM" else last_c[0] if len(dirs) == 1 else b.op("cat", *last_c, dim=0)
    if layout:
        y = b.op("permute", y, perm=(2, 0, 1, 3))
        yh, yc = (None if t is None else b.op("permute", t, perm=(1, 0, 2)) for t in (yh, yc))
    return (y, yh, yc) if kind == "LSTM" else (y, yh)


# -- region pooling -----------------------------------------------------------------------------
def _roi_axis(b, start, end, bins: int, samples: int, size: int, aligned: bool):
    """RoiAlign's sample points along one axis, [R, bins, samples] per region: the lower
    and upper pixel, the fraction between them and whether the point is inside (the
    reference's clamping: at most 1 before the first pixel, none past the last)."""
    rois = start.shape[0]
    length = b.op("sub", end, start)
    if not aligned:
        length = b.op("maximum", length, 1.0)
    where = (np.arange(bins)[:, None] + (np.arange(samples)[None, :] + 0.5) / samples) / bins
    pos = b.op("add", b.reshape(start, (rois, 1, 1)),
               b.op("mul", b.reshape(length, (rois, 1, 1)), where.astype(start.dtype)))
    inside = b.op("bitwise_and", b.op("ge", pos, -1.0), b.op("le", pos, float(size)))
    pos = b.op("maximum", pos, 0.0)
    low = b.op("floor", pos)
    last = b.op("ge", low, float(size - 1))
    low = b.op("where", last, np.asarray(size - 1, pos.dtype), low)
    frac = b.op("where", last, np.zeros((), pos.dtype), b.op("sub", pos, low))
    high = b.op("where", last, low, b.op("add", low, 1.0))
    return b.cast(low, np.int64), b.cast(high, np.int64), frac, inside


def _roi_align(b, xs, attrs):
    """RoiAlign: per region and output cell, ``sampling_ratio``**2 bilinear samples of the
    region's image (gathered by batch index and pixel), averaged, or for ``mode`` max the
    largest weighted corner value (as the reference defines it)."""
    x, rois, index = xs
    ratio = attrs.get("sampling_ratio", 0)
    if ratio <= 0:
        raise b.error("sampling_ratio 0 (samples per bin from each region's size, known only "
                      "at run time) is not supported; dualgraph's shapes are static")
    oh, ow = attrs.get("output_height", 1), attrs.get("output_width", 1)
    aligned = attrs.get("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    corners = [b.op("sub", b.op("mul", b.reshape(_part(b, rois, 1, k, 1), (rois.shape[0],)),
                                float(attrs.get("spatial_scale", 1.0))), 0.5 * aligned)
               for k in range(4)]   # x1, y1, x2, y2
    ys = _roi_axis(b, corners[1], corners[3], oh, ratio, x.shape[2], aligned)
    xw = _roi_axis(b, corners[0], corners[2], ow, ratio, x.shape[3], aligned)
    rows, cols = (rois.shape[0], oh, ratio, 1, 1), (rois.shape[0], 1, 1, ow, ratio)
    batch = b.reshape(index, (rois.shape[0], 1, 1, 1, 1))
    terms = []
    for iy, wy in ((0, b.op("sub", 1.0, ys[2])), (1, ys[2])):
        for ix, wx in ((0, b.op("sub", 1.0, xw[2])), (1, xw[2])):
            w = b.op("mul", b.reshape(wy, rows), b.reshape(wx, cols))
            w = b.op("where", b.op("bitwise_and", b.reshape(ys[3], rows),
                                   b.reshape(xw[3], cols)), w, np.zeros((), w.dtype))
            v = b.op("index", x, batch, b.reshape(ys[iy], rows), b.reshape(xw[ix], cols),
                     dims=(0, 2, 3))   # [R, oh, ratio, ow, ratio, C]
            terms.append(b.op("mul", v, b.reshape(w, (*w.shape, 1))))
    if attrs.get("mode", "avg") == "max":
        y = b.op("amax", _stack(b, terms), dims=(0, 3, 5), keepdim=False)
    else:
        y = b.op("mean", b.op("add", b.op("add", terms[0], terms[1]),
                              b.op("add", terms[2], terms[3])), dims=(2, 4), keepdim=False)
    return b.op("permute", y, perm=(0, 3, 1, 2))


def _stack(b, xs):
    return b.op("cat", *[b.reshape(t, (1, *t.shape)) for t in xs], dim=0)


# -- grid sampling ------------------------------------------------------------------------------
def _reflect(b, x, low: float, high: float):
    """``x`` reflected at ``low`` and ``high`` until inside (as ONNX's GridSample)."""
    span = high - low
    if span <= 0:
        return b.op("full_like", x, fill_value=low, dtype=x.dtype)
    out = x
    for below in (True, False):
        dx = b.op("sub", low, x) if below else b.op("sub", x, high)
        n = b.op("floor", b.op("div", dx, span))
        r = b.op("sub", dx, b.op("mul", n, span))
        even = b.op("eq", b.op("fmod", n, 2.0), 0.0)
        near, far = (b.op("add", low, r), b.op("sub", high, r))
        moved = b.op("where", even, near if below else far, far if below else near)
        out = b.op("where", b.op("lt", x, low) if below else b.op("gt", x, high), moved, out)
    return out


def _dft(b, xs, attrs):
    """DFT along ``axis`` of a real (..., 1) or complex (..., 2) signal: products with the
    cos and sin matrices (computed when loading, in float64), the signal cut or zero-padded
    to ``dft_length`` first; ``onesided`` keeps the first n // 2 + 1 bins, or with
    ``inverse`` takes them as a Hermitian spectrum and gives the real signal."""
    x = xs[0]
    length = xs[1] if len(xs) > 1 else None
    if b.opset >= 20:
        axis = b.ints(xs[2], "axis")[0] if len(xs) > 2 and xs[2] is not None else -2
    else:
        axis = attrs.get("axis", 1)
    axis = b.dim(axis, x.ndim)
    inverse, onesided = attrs.get("inverse", 0), attrs.get("onesided", 0)
    parts = [_part(b, x, x.ndim - 1, k, 1) for k in range(x.shape[-1])]
    parts = [_move_axis(b, b.cast(b.reshape(p, tuple(p.shape[:-1])), np.float64), axis,
                        x.ndim - 2) for p in parts]
    n_in = parts[0].shape[-1]
    half = inverse and onesided
    n = int(b.ints(length, "dft_length")[0]) if length is not None else \
        2 * (n_in - 1) if half else n_in
    b.check_size(n * n, "DFT's matrices")
    if half:   # (the bins -> the full spectrum, mirrored and conjugated)
        k = np.arange(n)
        mirror = np.where(k <= n // 2, k, n - k)
        keep = np.zeros((n_in, n))
        keep[np.clip(mirror, 0, n_in - 1), k] = 1.0
        flip = keep * np.where(k <= n // 2, 1.0, -1.0)
    else:
        keep = np.eye(n_in, n)
        flip = keep
    n_out = n // 2 + 1 if onesided and not inverse else n
    theta = 2 * np.pi * np.outer(np.arange(n), np.arange(n_out)) / n
    sign = 1.0 if inverse else -1.0
    cos, sin = np.cos(theta), sign * np.sin(theta)
    a = parts[0]
    bi = parts[1] if len(parts) > 1 else None
    real = b.op("matmul", a, keep @ cos)
    imag = b.op("matmul", a, keep @ sin)
    if bi is not None:
        real = b.op("sub", real, b.op("matmul", bi, flip @ sin))
        imag = b.op("add", imag, b.op("matmul", bi, flip @ cos))
    outs = [real] if half else [real, imag]
    if inverse:
        outs = [b.op("div", o, float(n)) for o in outs]
    outs = [_move_axis(b, b.reshape(o, tuple(o.shape) + (1,)), x.ndim - 2, axis) for o in outs]
    y = outs[0] if len(outs) == 1 else b.op("cat", *outs, dim=x.ndim - 1)
    return b.cast(y, x.dtype)


def _stft(b, xs, attrs):
    """STFT: the signal's frames (every ``frame_step``), times the window, through DFT."""
    x, step, window, length = (list(xs) + [None, None])[:4]
    step = int(b.ints(step, "frame_step")[0])
    size = int(b.ints(length, "frame_length")[0]) if length is not None else window.shape[0]
    count = (x.shape[1] - size) // step + 1
    positions = np.arange(count).reshape(-1, 1) * step + np.arange(size).reshape(1, -1)
    frames = b.op("index", x, positions, dims=(1,))            # (B, frames, size, 1|2)
    if window is not None:
        frames = b.op("mul", frames, b.reshape(b.cast(window, x.dtype), (1, 1, size, 1)))
    return _dft(b, [frames, None, np.asarray(2)],
                {"axis": 2, "onesided": attrs.get("onesided", 1)})


def _affine_grid(b, xs, attrs):
    """AffineGrid: the normalised coordinates of each output position (x fastest, then y,
    z), with a 1, times each batch's theta transposed."""
    theta, size = xs
    size = b.ints(size, "size")
    spatial = size[2:]
    align = attrs.get("align_corners", 0)
    axes = [np.linspace(-1, 1, n) if align else (2 * np.arange(n) + 1) / n - 1
            for n in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")[::-1]   # (x, y[, z]) over (D,) H, W
    base = np.stack(list(mesh) + [np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
    b.check_size(base.size, "AffineGrid's base grid")
    grid = b.op("matmul", base.astype(theta.dtype), b.op("permute", theta, perm=(0, 2, 1)))
    return b.reshape(grid, (size[0],) + tuple(spatial) + (len(spatial),))


def _grid_sample(b, xs, attrs):
    """GridSample of any number of spatial dims: each output position's source coordinates
    (the grid's last axis, innermost dim first) un-normalised, moved inside by the padding
    mode, and the input gathered at the 2 (linear), 4 (cubic) or 1 (nearest) neighbours per
    dim, weighted; outside pixels read 0 ("zeros"), the border, or their reflection."""
    x, grid = xs
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(attrs.get("mode", "linear"),
                                                          attrs.get("mode", "linear"))
    padding = attrs.get("padding_mode", "zeros")
    align = bool(attrs.get("align_corners", 0))
    dims = tuple(x.shape[2:])
    nd = len(dims)
    if any(isinstance(d, Sym) for d in x.shape + grid.shape):
        raise b.error("GridSample of symbolic shapes is not supported")
    grid = b.cast(grid, np.float64)
    coords, borders = [], []
    for i, size in enumerate(dims):
        g = b.reshape(_part(b, grid, grid.ndim - 1, nd - 1 - i, 1), tuple(grid.shape[:-1]))
        v = b.op("mul", b.op("add", g, 1.0), (size - 1) / 2) if align else \
            b.op("div", b.op("sub", b.op("mul", b.op("add", g, 1.0), size), 1.0), 2.0)
        if mode == "nearest":
            v = b.op("round", v)
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if padding == "border":
            v = b.op("minimum", b.op("maximum", v, 0.0), float(size - 1))
        elif padding == "reflection":
            v = _reflect(b, v, low, high)
        coords.append(v)
        borders.append((low, high))
    return _interpolate(b, x, coords, mode, padding, borders)


def _interpolate(b, x, coords: list, mode: str, padding: str, borders: list):
    """``x`` (N, C, *dims) read at the float64 pixel coordinates ``coords`` (one tensor
    (N, *out) per dim), interpolated by ``mode`` from the neighbours; with padding "zeros"
    a neighbour outside reads 0. Returns (N, C, *out) in ``x``'s dtype."""
    dims, nd, n = tuple(x.shape[2:]), len(coords), x.shape[0]
    taps = [0] if mode == "nearest" else [0, 1] if mode == "linear" else [-1, 0, 1, 2]
    per_dim = []
    for v, size, (low, high) in zip(coords, dims, borders):
        base = v if mode == "nearest" else b.op("floor", v)
        t = b.op("sub", v, base)
        if mode == "linear":
            weights = [b.op("sub", 1.0, t), t]
        elif mode == "cubic":
            a = -0.75
            weights = [_cubic_weight(b, b.op("add", t, 1.0), a), _cubic_weight(b, t, a),
                       _cubic_weight(b, b.op("sub", 1.0, t), a),
                       _cubic_weight(b, b.op("sub", 2.0, t), a)]
        else:
            weights = [None]
        options = []
        for tap, w in zip(taps, weights):
            i = b.op("add", base, float(tap))
            if padding == "zeros":
                inside = b.op("bitwise_and", b.op("ge", i, 0.0), b.op("le", i, size - 1.0))
            else:
                if padding == "reflection":
                    i = _reflect(b, i, low, high)
                inside = None
            i = b.cast(b.op("minimum", b.op("maximum", i, 0.0), float(size - 1)), np.int64)
            options.append((i, w, inside))
        per_dim.append(options)
    batch = np.arange(n).reshape((n,) + (1,) * (coords[0].ndim - 1))
    total = None
    for combo in np.ndindex(*[len(taps)] * nd):
        picks = [per_dim[d][k] for d, k in enumerate(combo)]
        v = b.op("index", x, batch, *[p[0] for p in picks], dims=(0,) + tuple(range(2, 2 + nd)))
        v = b.op("permute", b.cast(v, np.float64), perm=(0, v.ndim - 1) +
                 tuple(range(1, v.ndim - 1)))   # (N, *out, C) -> (N, C, *out)
        weight = None
        for i, w, inside in picks:
            if inside is not None:
                mask = b.cast(inside, np.float64)
                w = mask if w is None else b.op("mul", w, mask)
            if w is not None:
                weight = w if weight is None else b.op("mul", weight, w)
        if weight is not None:
            v = b.op("mul", v, b.reshape(weight, (n, 1) + tuple(weight.shape[1:])))
        total = v if total is None else b.op("add", total, v)
    return b.cast(total, x.dtype)


def _deform_conv(b, xs, attrs):
    """DeformConv (torchvision's deform_conv2d): each kernel tap samples its offset group's
    channels bilinearly at the tap's place plus its learned offset (a neighbour outside
    reads 0, as GridSample's "zeros"), times the mask; the taps of every channel then go
    through the weights as one grouped product."""
    x, w, offset, bias, mask = (list(xs) + [None] * 5)[:5]
    if x.ndim != 4 or any(isinstance(d, Sym) for d in (*x.shape, *offset.shape)):
        raise b.error(f"DeformConv of a 2-D image of static shape is supported, not "
                      f"{tuple(x.shape)}")
    n, c, h, width = x.shape
    out_c, per_group, kh, kw = w.shape
    stride, dilation = _pairs(attrs, "strides", 2, 1), _pairs(attrs, "dilations", 2, 1)
    pads, group = attrs.get("pads", (0, 0, 0, 0)), attrs.get("group", 1)
    groups, (oh, ow), k = attrs.get("offset_group", 1), offset.shape[2:], kh * kw
    want = [(size + lo + hi - d * (kk - 1) - 1) // s + 1 for size, lo, hi, d, kk, s in
            zip((h, width), pads[:2], pads[2:], dilation, (kh, kw), stride)]
    if want != [oh, ow] or c % groups or offset.shape[1] != 2 * groups * k:
        raise b.error(f"the offsets {tuple(offset.shape)} do not fit an output of {want} "
                      f"with {groups} offset groups of a {kh}x{kw} kernel over {c} channels")
    rows = np.arange(oh, dtype=np.float64)[:, None] * stride[0] - pads[0]
    cols = np.arange(ow, dtype=np.float64)[None, :] * stride[1] - pads[1]
    offset = b.cast(offset, np.float64)
    taps = []
    for g in range(groups):
        image = _part(b, x, 1, g, c // groups)
        for t in range(k):
            at = [b.op("add", b.reshape(_part(b, offset, 1, (g * k + t) * 2 + axis, 1),
                                        (n, oh, ow)), base)   # (y, x: pixel coordinates)
                  for axis, base in ((0, rows + t // kw * dilation[0]),
                                     (1, cols + t % kw * dilation[1]))]
            v = _interpolate(b, image, at, "linear", "zeros", [(-0.5, h - 0.5),
                                                               (-0.5, width - 0.5)])
            if mask is not None:
                v = b.op("mul", v, b.reshape(_part(b, mask, 1, g * k + t, 1), (n, 1, oh, ow)))
            taps.append(v)
    per = c // groups   # taps[g * k + t]: [N, per, oh, ow] -> columns [N, C, k, oh, ow]
    columns = b.op("cat", *[b.op("cat", *[b.reshape(taps[g * k + t], (n, per, 1, oh, ow))
                                          for t in range(k)], dim=2) for g in range(groups)],
                   dim=1)
    y = b.op("matmul", b.reshape(w, (group, out_c // group, per_group * k)),
             b.reshape(columns, (n, group, per_group * k, oh * ow)))
    y = b.reshape(y, (n, out_c, oh, ow))
    return y if bias is None else b.op("add", y, b.reshape(bias, (out_c, 1, 1)))


def _cubic_weight(b, t, a):
    """Keys' cubic convolution weight at distance ``t`` (0 <= t < 2)."""
    t = b.op("abs", t)
    t2 = b.op("mul", t, t)
    t3 = b.op("mul", t2, t)
    near = b.op("add", b.op("sub", b.op("mul", t3, a + 2), b.op("mul", t2, a + 3)), 1.0)
    far = b.op("sub", b.op("add", b.op("sub", b.op("mul", t3, a), b.op("mul", t2, 5 * a)),
                           b.op("mul", t, 8 * a)), 4 * a)
    return b.op("where", b.op("le", t, 1.0), near, far)


# -- attention ----------------------------------------------------------------------------------
def _heads(b, x, heads):
    """(B, S, H*D) -> (B, H, S, D)."""
    n, length, hidden = x.shape
    return b.op("permute", b.reshape(x, (n, length, heads, hidden // heads)), perm=(0, 2, 1, 3))


def _blocked(b, allowed, dtype):
    """0 where ``allowed`` (a bool array or Value), -inf elsewhere, in ``dtype``."""
    if isinstance(allowed, np.ndarray):
        return np.where(allowed, 0, -np.inf).astype(dtype)
    return b.op("where", allowed, np.zeros((), dtype), np.asarray(-np.inf, dtype))


def _add_bias(b, bias, more):
    return more if bias is None else b.op("add", bias, more)


def _attention_bias(b, attrs, q, mask, offset, nonpad, kv_len):
    """The additive bias of Attention's scores (None for none): the mask (a bool mask as
    0 / -inf, padded to the keys with -inf), the causal and sliding-window limits aligned
    to the bottom right (``offset`` keys precede the queries: the past keys, or per batch
    ``nonpad - q_len``), and the keys past ``nonpad``."""
    q_len, dtype = q.shape[2], q.dtype
    if mask is not None:
        if mask.shape[-1] != kv_len:
            mask = _pad_dim(b, mask, mask.ndim - 1, 0, kv_len - mask.shape[-1], "constant",
                            False if mask.dtype == np.bool_ else -np.inf)
        if mask.dtype == np.bool_:
            mask = _blocked(b, mask, dtype)
    bias = mask
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    if nonpad is not None and offset is None:   # (per batch: (B, 1, 1, 1))
        offset = b.op("sub", b.reshape(b.cast(nonpad, np.int64), (-1, 1, 1, 1)), q_len)
    offset = 0 if offset is None else offset
    diff = b.op("sub", b.op("add", i, offset), j)   # the query's position minus the key's
    limits = []
    if attrs.get("is_causal", 0):
        limits.append(b.op("ge", diff, 0))
    left, right = attrs.get("left_window_size", -1), attrs.get("right_window_size", -1)
    if left >= 0:
        limits.append(b.op("le", diff, left))
    if right >= 0:
        limits.append(b.op("ge", diff, -right))
    for limit in limits:
        bias = _add_bias(b, bias, _blocked(b, limit, dtype))
    if nonpad is not None:
        inside = b.op("lt", j, b.reshape(b.cast(nonpad, np.int64), (-1, 1)))
        bias = _add_bias(b, bias, b.reshape(_blocked(b, inside, dtype), (-1, 1, 1, kv_len)))
    return bias


def _linear_attention(b, xs, attrs):
    """LinearAttention, step by step over the (static) sequence in float32: the state
    (B, H_kv, d_k, d_v) decays by exp(decay) ("gated"), takes beta times the value's
    difference from what it retrieves for the key ("delta"), adds key x value, and each
    query reads it (kv heads repeated for grouped queries), times the scale."""
    q, k, v, past, decay, beta = (list(xs) + [None] * 6)[:6]
    heads, kv_heads = attrs["q_num_heads"], attrs["kv_num_heads"]
    rule = attrs.get("update_rule", "gated_delta")
    n, steps = q.shape[0], q.shape[1]
    f32 = np.dtype(np.float32)
    q4, k4, v4 = (b.cast(_heads(b, t, h), f32) for t, h in ((q, heads), (k, kv_heads),
                                                              (v, kv_heads)))
    d_k, d_v = k4.shape[3], v4.shape[3]
    scale = attrs.get("scale") or 1 / np.sqrt(d_k)
    if decay is not None:
        decay = b.cast(b.reshape(decay, (n, steps, kv_heads, -1)), f32)   # (B, T, H, 1|d_k)
    if beta is not None:
        beta = b.cast(b.reshape(beta, (n, steps, beta.shape[-1], 1)), f32)
    state = b.cast(past, f32) if past is not None else np.zeros((n, kv_heads, d_k, d_v), f32)
    outs = []
    for t in range(steps):
        def at(x, axis=2):
            return b.reshape(_part(b, x, axis, t, 1),
                             tuple(d for a, d in enumerate(x.shape) if a != axis))
        qt, kt, vt = at(q4), at(k4), at(v4)
        if rule in ("gated", "gated_delta"):
            g = b.op("exp", at(decay, 1))                                   # (B, H, 1|d_k)
            state = b.op("mul", state, b.reshape(g, tuple(g.shape) + (1,)))
        if rule in ("delta", "gated_delta"):
            got = b.op("einsum", state, kt, equation="bhdm,bhd->bhm")
            vt = b.op("mul", at(beta, 1), b.op("sub", vt, got))
        state = b.op("add", state, b.op("einsum", kt, vt, equation="bhd,bhm->bhdm"))
        read = state
        if heads != kv_heads:
            shape = tuple(state.shape)
            read = b.reshape(b.op("expand", b.reshape(state, shape[:2] + (1,) + shape[2:]),
                                  shape=shape[:2] + (heads // kv_heads,) + shape[2:]),
                             (n, heads) + shape[2:])
        y = b.op("mul", b.op("einsum", qt, read, equation="bhd,bhdm->bhm"), float(scale))
        outs.append(b.reshape(y, (n, 1, heads * d_v)))
    y = outs[0] if len(outs) == 1 else b.op("cat", *outs, dim=1)
    return b.cast(y, q.dtype), b.cast(state, past.dtype if past is not None else q.dtype)


def _attention(b, xs, attrs):
    """Attention (opset 23+): softmax(q k^T * scale + bias) v over (B, H, S, D) heads (3-D
    inputs are split into ``q_num_heads`` and ``kv_num_heads`` heads), with the past keys
    and values prepended, grouped-query heads repeated, a softcap, and the four
    ``qk_matmul_output_mode`` outputs. A query row that the bias blocks entirely gives 0."""
    q, k, v, mask, past_k, past_v, nonpad = (list(xs) + [None] * 7)[:7]
    three = q.ndim == 3
    if three:
        q = _heads(b, q, attrs["q_num_heads"])
        k, v = (_heads(b, t, attrs["kv_num_heads"]) for t in (k, v))
    b.need_rank(q, 4, "query", 4)
    scale = attrs.get("scale")
    scale = 1 / np.sqrt(q.shape[3]) if scale is None else scale
    root = float(q.dtype.type(np.sqrt(scale)))   # (both sides scaled, as the reference)
    if past_k is not None:
        k, v = b.op("cat", past_k, k, dim=2), b.op("cat", past_v, v, dim=2)
    present_k, present_v = k, v
    offset = past_k.shape[2] if past_k is not None else None
    bias = _attention_bias(b, attrs, q, mask, offset, nonpad, k.shape[2])
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads != kv_heads and heads % kv_heads == 0:   # grouped-query: repeat each kv head
        n, _, length, size = k.shape
        k, v = (b.reshape(b.op("expand", b.reshape(t, (n, kv_heads, 1, length, t.shape[3])),
                                 shape=(n, kv_heads, heads // kv_heads, length, t.shape[3])),
                          (n, heads, length, t.shape[3])) for t in (k, v))
    scores = b.op("matmul", b.op("mul", q, root),
                  b.op("permute", b.op("mul", k, root), perm=(0, 1, 3, 2)))
    softcap = float(attrs.get("softcap", 0.0))
    if softcap > 0:
        scores = b.op("mul", b.op("tanh", b.op("div", scores, softcap)), softcap)
    mode = attrs.get("qk_matmul_output_mode", 0)
    biased = scores if bias is None else b.op("add", scores, bias)
    exposed = biased if mode == 2 else scores
    if "softmax_precision" in attrs:
        biased = b.cast(biased, b.onnx_dtype(attrs["softmax_precision"], "softmax_precision"))
    p = import_rules()["Softmax"](b, [biased], {"axis": 3})   # (as ONNX rounds in float16)
    if bias is not None:   # (rows with no key to attend: 0, not softmax's NaN)
        blocked = b.op("isinf", b.op("amax", bias, dims=(bias.ndim - 1,), keepdim=True))
        p = b.op("where", blocked, np.zeros((), p.dtype), p)
    if mode == 3:
        exposed = p
    y = b.op("matmul", b.cast(p, q.dtype), v)
    if three:
        y = b.op("permute", y, perm=(0, 2, 1, 3))
        y = b.reshape(y, (y.shape[0], y.shape[1], -1))
    return y, present_k, present_v, b.cast(exposed, q.dtype)


def _rotary_embedding(b, xs, attrs):
    """RotaryEmbedding: the first ``rotary_embedding_dim`` features of each head rotated
    as pairs (the halves, or neighbours when ``interleaved``) by the cached cos and sin at
    each position (``position_ids`` pick the cache's rows)."""
    x, cos, sin, positions = (list(xs) + [None])[:4]
    shape = tuple(x.shape)
    y = b.op("permute", x, perm=(0, 2, 1, 3)) if x.ndim == 4 else \
        b.reshape(x, shape[:2] + (attrs["num_heads"], -1))        # (B, S, H, D)
    size = y.shape[3]
    rot = int(attrs.get("rotary_embedding_dim", 0)) or size
    if positions is not None:
        cos, sin = (b.op("index", c, positions, dims=(0,)) for c in (cos, sin))
    cos, sin = (b.reshape(c, tuple(c.shape[:-1]) + (1, c.shape[-1])) for c in (cos, sin))
    turned = _part(b, y, 3, 0, rot)
    if attrs.get("interleaved", 0):
        pairs = b.reshape(turned, tuple(turned.shape[:3]) + (rot // 2, 2))
        x1, x2 = (b.reshape(_part(b, pairs, 4, k, 1), tuple(pairs.shape[:4])) for k in (0, 1))
    else:
        x1, x2 = _part(b, turned, 3, 0, rot // 2), _part(b, turned, 3, 1, rot // 2)
    real = b.op("sub", b.op("mul", cos, x1), b.op("mul", sin, x2))
    imag = b.op("add", b.op("mul", sin, x1), b.op("mul", cos, x2))
    if attrs.get("interleaved", 0):
        parts = [b.reshape(t, tuple(t.shape) + (1,)) for t in (real, imag)]
        turned = b.reshape(b.op("cat", *parts, dim=4), tuple(turned.shape))
    else:
        turned = b.op("cat", real, imag, dim=3)
    if rot < size:
        turned = b.op("cat", turned, b.slice_dims(y, [None, None, None, (rot, size, 1)]), dim=3)
    return b.op("permute", turned, perm=(0, 2, 1, 3)) if x.ndim == 4 else \
        b.reshape(turned, shape)


def _causal_conv_with_state(b, xs, attrs):
    """CausalConvWithState: a depthwise 1-D conv over the past state (zeros if none) then
    the input, with an optional SiLU; the new state is the last k - 1 positions."""
    x, w, bias, past = (list(xs) + [None, None])[:4]
    n, c, length = x.shape
    k = w.shape[2]
    past = np.zeros((n, c, k - 1), x.dtype) if past is None else past
    padded = b.op("cat", past, x, dim=2) if k > 1 else x
    y = _conv(b, [padded, w] + ([bias] if bias is not None else []), {"group": c})
    if attrs.get("activation", "none") in ("silu", "swish"):
        wide = b.cast(y, np.float32)
        y = b.cast(b.op("mul", wide, b.op("sigmoid", wide)), x.dtype)
    total = padded.shape[2]
    return y, b.slice_dims(padded, [None, None, (total - (k - 1), total, 1)])


def _swiglu(b, xs, attrs):
    a, c = xs
    gate = b.cast(b.op("sigmoid", b.op("mul", a, float(attrs.get("alpha", 1.0)))), a.dtype)
    return b.op("mul", b.op("mul", a, gate), c)


def _center_crop_pad(b, xs, attrs):
    """CenterCropPad: each named axis cut or zero-padded about its centre to the size asked
    (the odd element on the far side)."""
    x, sizes = xs
    sizes = b.ints(sizes, "shape")
    axes = [b.dim(a, x.ndim) for a in attrs.get("axes", range(x.ndim))]
    for a, want in zip(axes, sizes):
        n = x.shape[a]
        if want < n:
            start = (n - want) // 2
            x = _part(b, b.slice_dims(x, [(start, n, 1) if k == a else None
                                          for k in range(x.ndim)]), a, 0, want)
        elif want > n:
            lo = (want - n) // 2
            x = _pad_dim(b, x, a, lo, want - n - lo, "constant", 0)
    return x


def _window(kind):
    """HannWindow, HammingWindow, BlackmanWindow of a size known when loading."""
    def convert(b, xs, attrs):
        n = int(b.ints(xs[0], "size")[0])
        b.check_size(n, "window")
        length = n if attrs.get("periodic", 1) else n - 1
        k = np.arange(n) * 2 * np.pi / max(length, 1)
        a0 = {"hann": 0.5, "hamming": 25 / 46, "blackman": 0.42}[kind]
        w = a0 - (1 - a0 if kind != "blackman" else 0.5) * np.cos(k)
        if kind == "blackman":
            w = w + 0.08 * np.cos(2 * k)
        dtype = b.onnx_dtype(attrs.get("output_datatype", 1), "output_datatype")
        return w.astype(dtype)
    return convert


# -- convolution and pooling --------------------------------------------------------------------
def _window_pads(b, attrs, hw, kernel, stride, dilation):
    """((top, bottom), (left, right)) from ``pads`` or ``auto_pad``."""
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        pads = attrs.get("pads", (0,) * 4) if auto == "NOTSET" else (0,) * 4
        return ((pads[0], pads[2]), (pads[1], pads[3]))
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise b.error(f"auto_pad={auto!r} is not supported")
    if any(isinstance(d, Sym) for d in hw):
        raise b.error(f"auto_pad={auto} needs static spatial dims, got {tuple(hw)}")
    out = []
    for n, k, s, d in zip(hw, kernel, stride, dilation):
        total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
        small = total // 2
        out.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    return tuple(out)


def _as_2d(b, x):
    """1-D windows run as 2-D ones on a unit height: (N, C, L) -> (N, C, 1, L)."""
    if x.ndim == 3:
        return b.reshape(x, tuple(x.shape[:2]) + (1,) + tuple(x.shape[2:]))
    return x


def _pairs(attrs, key, n: int, default: int):
    vals = tuple(attrs.get(key, (default,) * n))
    return ((default,) + vals) if n == 1 else vals


# A window attr's numbers per spatial dim (pads: all the starts, then all the ends), and its
# least value
_WINDOW = {"kernel_shape": (1, 1), "strides": (1, 1), "dilations": (1, 1), "pads": (2, 0),
           "output_padding": (1, 0)}


def _check_rank(b, x, attrs):
    """The number of spatial dims of a Conv's, ConvTranspose's or pool's input ``x`` (1 or
    2), its window attrs checked against it."""
    what = b.node.op_type
    if x.ndim not in (3, 4):
        raise b.error(f"{what} of a {x.ndim - 2}-D input (shape {tuple(x.shape)}) is not "
                      "supported; dualgraph has 1-D and 2-D windows")
    n = x.ndim - 2
    for key, (per, least) in _WINDOW.items():
        vals = list(attrs.get(key, ()))
        if key in attrs and len(vals) != per * n:
            raise b.error(f"{key} {vals} holds {len(vals)} numbers; the input (shape "
                          f"{tuple(x.shape)}) has {n} spatial dims, so it needs {per * n}")
        if any(v < least for v in vals):
            raise b.error(f"{key} {vals} must all be at least {least}")
    return n


def _window_attrs(b, attrs, x, kernel):
    n = _check_rank(b, x, attrs)
    stride = _pairs(attrs, "strides", n, 1)
    dilation = _pairs(attrs, "dilations", n, 1)
    if n == 1:
        attrs = dict(attrs, pads=(0, attrs["pads"][0], 0, attrs["pads"][1])) \
            if "pads" in attrs else attrs
    padding = _window_pads(b, attrs, x.shape[-2:] if n == 2 else (1,) + tuple(x.shape[-1:]),
                           kernel, stride, dilation)
    return n, stride, padding, dilation


def _conv3d(b, xs, attrs):
    """A 3-D Conv as one 2-D conv per offset of the kernel's depth: the input's depth slices
    at that offset (strided) folded into the batch, the products summed."""
    x, w = xs[0], xs[1]
    bias = xs[2] if len(xs) > 2 else None
    kernel = tuple(w.shape[2:])
    stride, dilation, pads = _nd_windows(b, attrs, x, kernel)
    if any(isinstance(d, Sym) for d in x.shape):
        raise b.error(f"a 3-D Conv of symbolic shape {tuple(x.shape)} is not supported")
    (lo, hi), depth = pads[0], x.shape[2]
    if lo or hi:
        x = _pad_dim(b, x, 2, lo, hi, "constant", 0)
    out = (depth + lo + hi - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    n, c = x.shape[:2]
    total = None
    for k in range(kernel[0]):
        start = k * dilation[0]
        part = b.slice_dims(x, [None, None, (start, start + stride[0] * (out - 1) + 1,
                                             stride[0]), None, None])
        part = b.reshape(b.op("permute", part, perm=(0, 2, 1, 3, 4)),
                         (n * out, c) + tuple(x.shape[3:]))
        wk = b.reshape(_part(b, w, 2, k, 1), tuple(w.shape[:2]) + kernel[1:])
        y = b.op("conv2d", part, wk, stride=stride[1:], padding=tuple(pads[1:]),
                 dilation=dilation[1:], groups=int(attrs.get("group", 1)))
        total = y if total is None else b.op("add", total, y)
    y = b.op("permute", b.reshape(total, (n, out) + tuple(total.shape[1:])),
             perm=(0, 2, 1, 3, 4))
    return y if bias is None else b.op("add", y, b.reshape(bias, (-1, 1, 1, 1)))


def _conv(b, xs, attrs):
    x, w = xs[0], xs[1]
    if x.ndim == 5:
        return _conv3d(b, xs, attrs)
    bias = xs[2:3] if len(xs) > 2 and xs[2] is not None else []
    kernel = tuple(w.shape[2:]) if w.ndim == 4 else (1,) + tuple(w.shape[2:])
    n, stride, padding, dilation = _window_attrs(b, attrs, x, kernel)
    if tuple(attrs.get("kernel_shape", w.shape[2:])) != tuple(w.shape[2:]):
        raise b.error(f"kernel_shape {list(attrs['kernel_shape'])} is not the weight's "
                      f"window {list(w.shape[2:])} (shape {tuple(w.shape)})")
    y = b.op("conv2d", _as_2d(b, x), _as_2d(b, w), *bias, stride=stride,
             padding=padding, dilation=dilation, groups=int(attrs.get("group", 1)))
    return y if n == 2 else b.reshape(y, tuple(y.shape[:2]) + tuple(y.shape[3:]))


def _conv_transpose(b, xs, attrs):
    """ConvTranspose (1-D as 2-D of unit height) -> conv2d_input_grad. ``output_shape`` or
    SAME ``auto_pad`` (the input's size times the stride) give the pads: the total needed
    split with the odd one at the end (SAME_UPPER, and output_shape) or the start
    (SAME_LOWER); an output larger than the pads allow grows at the end."""
    x, w = xs[0], xs[1]
    if x.ndim == 5:
        return _conv_transpose3d(b, xs, attrs)
    one = _check_rank(b, x, attrs) == 1
    if one:
        x, w, attrs = _as_2d(b, x), _as_2d(b, w), dict(attrs)
        for key, unit in (("strides", 1), ("dilations", 1), ("output_padding", 0),
                          ("kernel_shape", 1), ("output_shape", 1)):
            if key in attrs:
                attrs[key] = (unit,) + tuple(attrs[key])[-1:]
        if "pads" in attrs:
            attrs["pads"] = (0, attrs["pads"][0], 0, attrs["pads"][1])
    kernel = tuple(w.shape[2:])
    stride, dilation = _pairs(attrs, "strides", 2, 1), _pairs(attrs, "dilations", 2, 1)
    extra = list(_pairs(attrs, "output_padding", 2, 0))
    auto = attrs.get("auto_pad", "NOTSET")
    wanted = attrs.get("output_shape")
    if wanted is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        wanted = tuple(n * s for n, s in zip(x.shape[-2:], stride))
    if wanted is not None:
        wanted = tuple(wanted)[-2:]
        padding = []
        for k, (n, s, e, kk, d, want) in enumerate(zip(x.shape[-2:], stride, extra, kernel,
                                                       dilation, wanted)):
            total = s * (n - 1) + e + (kk - 1) * d + 1 - want
            if total < 0:
                extra[k], total = e - total, 0
            small = total // 2
            padding.append((total - small, small) if auto == "SAME_LOWER" else
                           (small, total - small))
        padding = tuple(padding)
    else:
        padding = _window_pads(b, dict(attrs, auto_pad="NOTSET" if auto == "NOTSET"
                                       else "VALID"), x.shape[-2:], kernel, stride, dilation)
    size = tuple(s * (n - 1) + e + (k - 1) * d + 1 - lo - hi for n, s, e, k, d, (lo, hi)
                 in zip(x.shape[-2:], stride, extra, kernel, dilation, padding))
    y = b.op("conv2d_input_grad", x, w, input_size=size, stride=stride, padding=padding,
             dilation=dilation, groups=int(attrs.get("group", 1)))
    if len(xs) > 2 and xs[2] is not None:
        y = b.op("add", y, b.reshape(xs[2], (xs[2].shape[0], 1, 1)))
    return b.reshape(y, tuple(y.shape[:2]) + tuple(y.shape[3:])) if one else y


def _col2im(b, xs, attrs):
    """Col2Im (torch's fold): the columns [N, C * prod(block), L] summed back into the image,
    each block at its place: a ConvTranspose with a group per channel whose one-hot weight
    puts column entry k at block position k."""
    x = xs[0]
    image, block = b.ints(xs[1], "image_shape"), b.ints(xs[2], "block_shape")
    n = len(image)
    stride, dilation = attrs.get("strides", (1,) * n), attrs.get("dilations", (1,) * n)
    pads = attrs.get("pads", (0,) * 2 * n)
    k = numel(block)
    counts = [(i + lo + hi - d * (kk - 1) - 1) // s + 1 for i, kk, s, d, lo, hi in
              zip(image, block, stride, dilation, pads[:n], pads[n:])]
    if (len(block) != n or n not in (2, 3) or len(stride) != n or len(pads) != 2 * n
            or not isinstance(x.shape[1], int) or x.shape[1] % k or numel(counts) != x.shape[2]):
        raise b.error(f"input {tuple(x.shape)}, image_shape {image} and block_shape {block} "
                      "do not fit (a 2-D or 3-D image, C * prod(block) rows, one column per "
                      f"block place: {counts})")
    c = x.shape[1] // k
    cols = b.reshape(x, (x.shape[0], c * k, *counts))
    w = np.tile(np.eye(k, dtype=x.dtype).reshape(k, 1, *block), (c, 1) + (1,) * n)
    extra = [i + lo + hi - (s * (m - 1) + d * (kk - 1) + 1) for i, lo, hi, s, m, d, kk in
             zip(image, pads[:n], pads[n:], stride, counts, dilation, block)]
    return _conv_transpose(b, [cols, w], {"strides": stride, "dilations": dilation,
                                          "pads": pads, "group": c, "output_padding": extra})


def _conv_transpose3d(b, xs, attrs):
    """A 3-D ConvTranspose as one 2-D ConvTranspose per offset of the kernel's depth: the
    input's depth slices folded into the batch, each result spread to every stride-th output
    depth from the offset (times the dilation), the parts summed, then the depth pads cut."""
    x, w = xs[0], xs[1]
    if "output_shape" in attrs or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") \
            or any(isinstance(d, Sym) for d in x.shape):
        raise b.error("a 3-D ConvTranspose is supported with static shapes and explicit pads "
                      f"only, not output_shape or SAME auto_pad (input {tuple(x.shape)})")
    kernel = tuple(w.shape[2:])
    stride, dilation, pads = _nd_windows(b, attrs, x, kernel)
    extra = tuple(attrs.get("output_padding", (0, 0, 0)))
    plane = dict(attrs, **{key: tuple(attrs[key])[1:] for key in (
        "strides", "dilations", "output_padding", "kernel_shape") if key in attrs})
    if "pads" in attrs:
        plane["pads"] = tuple(attrs["pads"][k] for k in (1, 2, 4, 5))
    n, c, depth = x.shape[:3]
    flat = b.reshape(b.op("permute", x, perm=(0, 2, 1, 3, 4)), (n * depth, c) + x.shape[3:])
    full = stride[0] * (depth - 1) + (kernel[0] - 1) * dilation[0] + 1 + extra[0]
    total = None
    for k in range(kernel[0]):
        wk = b.reshape(_part(b, w, 2, k, 1), tuple(w.shape[:2]) + kernel[1:])
        y = _conv_transpose(b, [flat, wk], plane)                 # (n * depth, oc, h, w)
        rest = tuple(y.shape[1:])
        y = b.reshape(y, (n, depth, 1) + rest)
        if stride[0] > 1:   # (stride - 1 zero slices after each input depth)
            y = b.op("cat", y, np.zeros((n, depth, stride[0] - 1) + rest, y.dtype), dim=2)
        y = _part(b, b.reshape(y, (n, depth * stride[0]) + rest), 1, 0,
                  stride[0] * (depth - 1) + 1)
        start = k * dilation[0]
        y = _pad_dim(b, y, 1, start, full - start - y.shape[1], "constant", 0)
        total = y if total is None else b.op("add", total, y)
    (lo, hi) = pads[0]
    y = b.slice_dims(total, [None, (lo, full - hi, 1), None, None, None])
    y = b.op("permute", y, perm=(0, 2, 1, 3, 4))
    if len(xs) > 2 and xs[2] is not None:
        y = b.op("add", y, b.reshape(xs[2], (-1, 1, 1, 1)))
    return y


def _pool_attrs(b, xs, attrs):
    """(n, the input as 2-D, pool attrs, dilation) of a MaxPool or AveragePool node."""
    x = xs[0]
    kernel = _pairs(attrs, "kernel_shape", _check_rank(b, x, attrs), 1)
    n, stride, padding, dilation = _window_attrs(b, attrs, x, kernel)
    if any(lo != hi for lo, hi in padding):
        raise b.error(f"asymmetric pads {attrs.get('pads')} are not supported by "
                      f"dualgraph's pools (pad with a Pad node first)")
    pool = dict(kernel_size=kernel, stride=stride, padding=tuple(p[0] for p in padding),
                ceil_mode=bool(attrs.get("ceil_mode", 0)))
    return n, _as_2d(b, x), pool, dilation


def _pool_result(y, n: int, b):
    return y if n == 2 else b.reshape(y, tuple(y.shape[:2]) + tuple(y.shape[3:]))


def _max_pool(b, xs, attrs):
    if _needs_window_sum(b, xs[0], attrs, "max") and len([o for o in b.node.output if o]) == 1:
        return _window_pool(b, xs[0], attrs, "max")
    n, x2, pool, dilation = _pool_attrs(b, xs, attrs)
    y, where = b.op("max_pool2d", x2, dilation=dilation, **pool)
    if len([o for o in b.node.output if o]) > 1:
        return y, _flat_indices(b, xs[0], where, attrs)
    return _pool_result(y, n, b)


def _average_pool(b, xs, attrs):
    if _needs_window_sum(b, xs[0], attrs, "avg"):
        return _window_pool(b, xs[0], attrs, "avg")
    n, x2, pool, dilation = _pool_attrs(b, xs, attrs)
    y = b.op("avg_pool2d", x2, count_include_pad=bool(attrs.get("count_include_pad", 0)),
             divisor_override=None, **pool)
    return _pool_result(y, n, b)


def _lp_pool(b, xs, attrs):
    return _window_pool(b, xs[0], attrs, "lp")


def _nd_windows(b, attrs, x, kernel):
    """(strides, dilations, (start, end) pads) per spatial dim, for any number of them."""
    n = x.ndim - 2
    stride = tuple(attrs.get("strides", (1,) * n))
    dilation = tuple(attrs.get("dilations", (1,) * n))
    if len(kernel) != n or len(stride) != n or len(dilation) != n:
        raise b.error(f"the window attrs of a {n}-D {b.node.op_type} need {n} numbers each")
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        pads = attrs.get("pads", (0,) * 2 * n) if auto == "NOTSET" else (0,) * 2 * n
        return stride, dilation, list(zip(pads[:n], pads[n:]))
    if auto not in ("SAME_UPPER", "SAME_LOWER") or any(isinstance(d, Sym) for d in x.shape):
        raise b.error(f"auto_pad={auto!r} needs static spatial dims and SAME_UPPER, "
                      "SAME_LOWER, VALID or NOTSET")
    pads = []
    for size, k, st, d in zip(x.shape[2:], kernel, stride, dilation):
        total = max(0, (-(-size // st) - 1) * st + (k - 1) * d + 1 - size)
        small = total // 2
        pads.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    return stride, dilation, pads


def _needs_window_sum(b, x, attrs, kind) -> bool:
    """Whether a pool needs ``_window_pool``: dualgraph's pools take 1-D and 2-D windows
    with pads that are symmetric and at most half the kernel, and undilated averages."""
    if x.ndim not in (3, 4) or "kernel_shape" not in attrs:
        return x.ndim == 5
    kernel = tuple(attrs["kernel_shape"])
    if len(kernel) != x.ndim - 2:
        return False   # (the old path names the problem)
    _, dilation, pads = _nd_windows(b, attrs, x, kernel)
    return any(lo != hi or 2 * lo > k for (lo, hi), k in zip(pads, kernel)) or (
        kind == "avg" and any(d != 1 for d in dilation))


def _window_pool(b, x, attrs, kind):
    """A max, average or Lp pool of any number of spatial dims, any pads and dilations: the
    input padded explicitly, one strided slice per kernel offset, combined elementwise. An
    average divides by the count of the window's elements inside the input (and the pads,
    with count_include_pad), computed when loading; ceil_mode's last window may overhang."""
    kernel = tuple(attrs["kernel_shape"])
    if any(isinstance(d, Sym) for d in x.shape[2:]):
        raise b.error(f"{b.node.op_type} of symbolic spatial dims {tuple(x.shape[2:])}")
    stride, dilation, pads = _nd_windows(b, attrs, x, kernel)
    ceil = attrs.get("ceil_mode", 0)
    sizes, outs, extras = list(x.shape[2:]), [], []
    for size, k, st, d, (lo, hi) in zip(sizes, kernel, stride, dilation, pads):
        span = size + lo + hi - d * (k - 1) - 1
        out = (-(-span // st) if ceil else span // st) + 1
        if ceil and (out - 1) * st >= size + lo:   # (a window must start inside)
            out -= 1
        outs.append(max(out, 0))
        extras.append(max(0, (out - 1) * st + d * (k - 1) + 1 - (size + lo + hi)))
    if kind == "max":
        fill = -np.inf if x.dtype.kind == "f" or x.dtype.kind == "V" else np.iinfo(x.dtype).min
    else:
        fill = 0
    xp = x
    for a, ((lo, hi), extra) in enumerate(zip(pads, extras)):
        if lo or hi or extra:
            xp = _pad_dim(b, xp, a + 2, lo, hi + extra, "constant", fill)
    p = float(attrs.get("p", 2))
    acc, offsets = None, list(np.ndindex(*kernel))
    for offset in offsets:
        index = [None, None] + [(o * d, o * d + st * (n - 1) + 1, st)
                                for o, d, st, n in zip(offset, dilation, stride, outs)]
        part = b.slice_dims(xp, index)
        if kind == "lp":
            part = b.op("pow", b.op("abs", part), p)
        acc = part if acc is None else b.op("maximum" if kind == "max" else "add", acc, part)
    if kind == "lp":
        return b.op("pow", acc, 1 / p)
    if kind == "avg":
        mask = np.zeros([n + lo + hi + e for n, (lo, hi), e in zip(sizes, pads, extras)])
        inside = attrs.get("count_include_pad", 0)
        mask[tuple(slice(0 if inside else lo, lo + n + (hi if inside else 0))
                   for n, (lo, hi) in zip(sizes, pads))] = 1
        count = sum(mask[tuple(slice(o * d, o * d + st * (n - 1) + 1, st)
                               for o, d, st, n in zip(offset, dilation, stride, outs))]
                    for offset in offsets)
        acc = b.cast(b.op("div", acc, np.maximum(count, 1).astype(x.dtype)), x.dtype)
    return acc


def _max_unpool(b, xs, attrs):
    """MaxUnpool: the values written at their (whole-tensor, row-major) indices into zeros
    of the unpooled shape (``output_shape``, or what the pool's attrs give)."""
    x, where, shape = (list(xs) + [None])[:3]
    kernel = tuple(attrs["kernel_shape"])
    n = len(kernel)
    stride = tuple(attrs.get("strides", (1,) * n))
    pads = tuple(attrs.get("pads", (0,) * 2 * n))
    natural = tuple(x.shape[:2]) + tuple((m - 1) * st - pads[k] - pads[k + n] + kk for k, (
        m, st, kk) in enumerate(zip(x.shape[2:], stride, kernel)))
    zeros = np.zeros(numel(natural), x.dtype)
    flat = b.op("index_put", zeros, b.reshape(x, (-1,)), b.reshape(where, (-1,)), dims=(0,),
                accumulate=False)
    y = b.reshape(flat, natural)
    if shape is not None:   # (a larger output: zeros after each spatial dim's end)
        for d, (have, want) in enumerate(zip(natural, b.ints(shape, "output_shape"))):
            if want > have:
                y = _pad_dim(b, y, d, 0, want - have, "constant", 0)
    return y


def _flat_indices(b, x, where, attrs):
    """MaxPool's Indices: dualgraph's row-major count within each H x W plane, ONNX's over
    the whole NCHW tensor (plane k starts at k * H * W), column-major within the plane
    (``h + w * H``) when ``storage_order`` is 1."""
    if x.ndim != 4 or any(isinstance(d, Sym) for d in x.shape):
        raise b.error("MaxPool's Indices output is supported for 2-D pools of static shape "
                      "only")
    n, c, h, w = x.shape
    if attrs.get("storage_order"):
        where = b.op("add", b.op("floor_divide", where, w),
                     b.op("mul", b.op("remainder", where, w), h))
    b.check_size(n * c, "MaxPool's index offsets (one per plane)")
    starts = (np.arange(n * c, dtype=np.int64) * (h * w)).reshape(n, c, 1, 1)
    return b.op("add", where, starts)


def _global_pool(name):
    def convert(b, xs, attrs):
        x = xs[0]
        return b.op(name, x, dims=tuple(range(2, x.ndim)), keepdim=True)
    return convert


# -- sequences ----------------------------------------------------------------------------------
class Sequence(tuple):
    """An ONNX sequence inside a model: known when loading as a tuple of its tensors (graph
    Values or arrays), so that its ops (SequenceAt, ConcatFromSequence, ...) become the
    tensor ops they pick. A model's sequence output is a list of its tensors; a sequence
    input is read per call as a tensor input per element (``onnx_structured``)."""

    dtype = np.dtype(object)
    ndim = shape = None


class Optional:
    """An ONNX optional inside a model: known when loading to hold ``value`` (a tensor or a
    Sequence) or nothing (``value`` None), so that OptionalHasElement is a known bool and
    OptionalGetElement the value itself."""

    dtype = np.dtype(object)
    ndim = shape = None

    def __init__(self, value=None):
        self.value = value


STRUCTURED = (Sequence, Optional)   # (what a model's values are besides tensors)


class SequenceOutput(OnnxError):
    """A subgraph whose output is a sequence or an optional (control flow carries tensors
    only)."""


def _position(b, n: int, x, default: int, inclusive: bool = False) -> int:
    """A sequence position (negative from the end): -n to n - 1, or to n (``inclusive``)."""
    k = default if x is None else int(b.ints(x, "position")[0])
    if not -n <= k <= (n if inclusive else n - 1):
        raise b.error(f"position {k} is out of range for a sequence of {n} tensors")
    return k + n if k < 0 else k


def _sequence_insert(b, xs, attrs):
    seq, x, where = (list(xs) + [None])[:3]
    k = _position(b, len(seq), where, len(seq), inclusive=True)
    return Sequence(seq[:k] + (x,) + seq[k:])


def _sequence_erase(b, xs, attrs):
    seq, where = (list(xs) + [None])[:2]
    k = _position(b, len(seq), where, -1)
    return Sequence(seq[:k] + seq[k + 1:])


def _split_to_sequence(b, xs, attrs):
    x, split = (list(xs) + [None])[:2]
    dim = b.dim(attrs.get("axis", 0), x.ndim)
    n = x.shape[dim]
    if split is None:
        parts = [1] * n
    else:
        sizes = b.ints(split, "split")
        parts = sizes if len(sizes) > 1 or np.ndim(split) else \
            [sizes[0]] * (n // sizes[0]) + ([n % sizes[0]] if n % sizes[0] else [])
    outs, start = [], 0
    for size in parts:
        index = [None] * x.ndim
        index[dim] = (start, start + size, 1)
        piece = b.slice_dims(x, index)
        if split is None and not attrs.get("keepdims", 1):
            piece = b.reshape(piece, tuple(d for k, d in enumerate(x.shape) if k != dim))
        outs.append(piece)
        start += size
    return Sequence(outs)


def _concat_from_sequence(b, xs, attrs):
    seq = xs[0]
    first = seq[0]
    if attrs.get("new_axis", 0):
        dim = b.dim(attrs["axis"], first.ndim + 1)
        seq = [b.reshape(t, tuple(t.shape[:dim]) + (1,) + tuple(t.shape[dim:])) for t in seq]
    else:
        dim = b.dim(attrs["axis"], first.ndim)
    return seq[0] if len(seq) == 1 else b.op("cat", *seq, dim=dim)


def _sequence_map(b, xs, attrs):
    """SequenceMap: the body inlined once per position of the sequences (their lengths are
    known when loading), given their tensors there and the tensor inputs whole; each output
    collects its tensors into a sequence."""
    n = len(xs[0])
    if any(isinstance(x, Sequence) and len(x) != n for x in xs):
        raise b.error(f"its sequences have {[len(x) for x in xs if isinstance(x, Sequence)]} "
                      "tensors; they must have as many")
    steps = [b.inline(attrs["body"], [x[i] if isinstance(x, Sequence) else x for x in xs])
             for i in range(n)]
    return tuple(Sequence(step[j] for step in steps) for j in range(len(b.node.output)))


def _optional_get_element(b, xs, attrs):
    x = xs[0]
    if isinstance(x, Optional) and x.value is None:
        raise b.error("it reads the value of an empty optional")
    return x.value if isinstance(x, Optional) else x


def _optional_has_element(b, xs, attrs):
    x = xs[0] if xs else None   # (an omitted input: an empty optional)
    return np.asarray(x is not None and not (isinstance(x, Optional) and x.value is None))


SEQUENCE_CONVERTERS = {
    "SequenceConstruct": lambda b, xs, attrs: Sequence(xs),
    "SequenceEmpty": lambda b, xs, attrs: Sequence(),
    "SequenceLength": lambda b, xs, attrs: np.array(len(xs[0]), np.int64),
    "SequenceAt": lambda b, xs, attrs: xs[0][_position(b, len(xs[0]), xs[1], 0)],
    "SequenceInsert": _sequence_insert, "SequenceErase": _sequence_erase,
    "SplitToSequence": _split_to_sequence, "ConcatFromSequence": _concat_from_sequence,
    "SequenceMap": _sequence_map,
    "Optional": lambda b, xs, attrs: Optional(xs[0] if xs else None),
    "OptionalHasElement": _optional_has_element,
    "OptionalGetElement": _optional_get_element,
}


# -- control flow -------------------------------------------------------------------------------
# If -> cond, Loop -> scan (a fixed trip count) or while_loop, Scan -> scan. Each subgraph is
# imported by ``b.body`` into a closed graph; the outer Values it reads are extra operands.
BOOL, INT64 = ShapedType((), np.dtype(np.bool_)), ShapedType((), np.dtype(np.int64))


def _many(outs) -> tuple:
    return outs if isinstance(outs, tuple) else (outs,)


def _type(b, x) -> ShapedType:
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            raise b.error(f"the shape value {list(x)} holds symbolic dims; it can't be a "
                          "loop's carried value")
        b._check_dtype(x)
    return ShapedType(tuple(x.shape), np.dtype(x.dtype))


def _align(bodies: list) -> list:
    """Give the graphs of ``bodies`` the same inputs: their formal ones, then every outer
    Value any of them captured. Returns those Values (the node's extra operands)."""
    captured = list(dict.fromkeys(v for sub in bodies for v in sub.captured))
    for sub in bodies:
        g = sub.graph
        formal = g.inputs[:len(g.inputs) - len(sub.captured)]
        own = dict(zip(sub.captured, g.inputs[len(formal):]))
        extra = [own[v] if v in own else g.add_input(v.shape, v.dtype, name=v.name)
                 for v in captured]
        g.inputs = formal + extra   # (a fresh graph: reordering its inputs is safe)
    return captured


def _check_types(b, what: str, names, want: list, got: list,
                 where=("before", "after the body")) -> None:
    """The values ``got`` have the types ``want`` (dualgraph's shapes are static: a loop
    keeps its carried values' shapes, both branches of a cond give the same)."""
    for name, w, g in zip(names, want, got):
        if tuple(w.shape) != tuple(g.shape) or np.dtype(w.dtype) != np.dtype(g.dtype):
            raise b.error(f"{what} {name!r} is {type_str(w.shape, w.dtype)} {where[0]} but "
                          f"{type_str(g.shape, g.dtype)} {where[1]}; dualgraph's shapes are "
                          "static, so control flow must keep them")


def _if(b, xs, attrs):
    """If -> cond. The branches take no inputs; the outer names they read become the node's
    operands, which both branch graphs take."""
    pred = xs[0]
    if _numel(pred.shape) != 1:
        raise b.error(f"the condition has shape {tuple(pred.shape)}; it must have one element")
    if isinstance(pred, np.ndarray) and pred.dtype != object:   # (known: the branch taken)
        return b.inline(attrs["then_branch" if pred.reshape(-1)[0] else "else_branch"])
    pred = b.reshape(pred, ())
    try:
        then, other = (b.body(attrs[k], [], k) for k in ("then_branch", "else_branch"))
    except SequenceOutput:   # (branches of sequences aren't a cond: specialised on the
        b.static(pred, "condition")   # condition's value when the inputs give it)
        raise
    _check_types(b, "output", b.node.output, [v.type for v in then.graph.outputs],
                 [v.type for v in other.graph.outputs], ("in then_branch", "in else_branch"))
    captured = _align([then, other])
    return b.op("cond", pred, *captured, true_graph=then.graph, false_graph=other.graph)


def _numel(shape):
    return numel(shape) if not any(isinstance(d, Sym) for d in shape) else None


def _loop(b, xs, attrs):
    """Loop -> scan when it runs a fixed number of times (a known trip count M and a
    condition that stays true), the ys being its scan outputs; else -> while_loop, carrying
    the iteration number and the condition too, which then can't have scan outputs (their
    length would be known only at run time). A trip count M computed at run time is the
    while_loop's operand (one import serves every M); with scan outputs, or a body that
    must be unrolled, M must be known (the model is then imported per value of M). Inside
    the body the incoming condition is always true (the body runs only then)."""
    m, first, *init = xs
    proto = attrs["body"]
    n = len(init)
    late = None   # (M computed at run time: why it is not known)
    try:
        bound = None if m is None else b.ints(m, "trip count M")[0]
    except RunTimeValue as e:
        bound, late = b.reshape(m, ()), e
    try:
        if any(isinstance(x, STRUCTURED) for x in init):
            raise b.error("it carries sequences or optionals; dualgraph's loops carry tensors")
        types = [_type(b, x) for x in init]
        step = b.body(proto, [INT64, np.asarray(True), *types], "body")
    except OnnxError:   # (one that needs the iteration number as a known value, or carries
        # sequences: unrolled)
        if late is not None:
            raise late from None
        if bound is None or bound > _UNROLL:
            raise
        if first is not None and not _known_true(b.static(first, "Loop's first condition")):
            raise
        return _loop_unrolled(b, proto, init, bound)
    again = step.results[0]
    fixed = _known_true(again) and (first is None or _known_true(first))
    num_ys = len(proto.output) - 1 - n
    _check_types(b, "loop-carried value", [i.name for i in proto.input[2:]], types,
                 [v.type for v in step.graph.outputs[1:1 + n]])
    if num_ys and late is not None:
        raise late
    if fixed and late is None:
        return _loop_as_scan(b, step, init, bound, n)
    if num_ys:
        raise b.error(f"its {num_ys} scan outputs have a length known only at run time (the "
                      "loop's condition is computed at run time); dualgraph's shapes are "
                      "static, so only a Loop with a known trip count M and a condition that "
                      "stays true may have scan outputs")
    return _loop_as_while(b, step, init, bound, first)


# The most steps a Loop is unrolled to when its body needs its iteration number as a known
# value (a Slice at it, say): each step's nodes are imported again.
_UNROLL = 64


def _loop_unrolled(b, proto, init: list, bound: int):
    """A Loop unrolled: its body inlined once per step with the iteration number known, the
    condition to stay known true; the scan outputs stacked."""
    n, ys = len(init), []
    carried = list(init)
    for i in range(bound):
        outs = b.inline(proto, [np.asarray(i, np.int64), np.asarray(True), *carried])
        if not _known_true(outs[0]):
            raise b.error("the Loop's body needs its iteration number as a known value, so "
                          "it is unrolled, and then its condition must be known to stay true")
        carried, ys = list(outs[1:1 + n]), ys + [outs[1 + n:]]
    if len(proto.output) > 1 + n and not ys:
        raise b.error("a Loop of 0 steps with scan outputs (their shape is unknown)")
    stacked = [b.op("cat", *[b.reshape(y[j], (1, *y[j].shape)) for y in ys], dim=0)
               for j in range(len(proto.output) - 1 - n)]
    return (*carried, *stacked)


def _known_true(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype != object and bool(x.all())


def _loop_as_scan(b, step, init: list, bound, n: int):
    """scan over the iteration numbers 0..M-1: carry = the loop-carried values, ys = the
    scan outputs."""
    if bound is None:
        raise b.error("it never stops: there is no trip count M and the condition stays true")
    g = step.graph
    i, carried = g.inputs[0], g.inputs[1:1 + n]
    captured = _align([step])
    g.inputs = [*carried, i, *g.inputs[1 + n:]]    # carry, xs (i), captured
    g.outputs = g.outputs[1:]                        # (the condition, always true)
    b.check_size(bound, "trip count M (the scan's xs)")
    steps = np.arange(bound, dtype=np.int64)
    return _many(b.op("scan", *init, steps, *captured, body_graph=g, num_carry=n, num_xs=1,
                      length=bound, reverse=False))


def _loop_as_while(b, step, init: list, bound, first):
    """while_loop carrying (the iteration number, the condition, the loop-carried values):
    the condition graph is ``condition and i < M``. An M known only at run time (an int,
    else a 0-d tensor) is the last operand, which the body takes and leaves unread."""
    g = step.graph
    i = g.inputs[0]
    captured = _align([step])
    cond_in = g.add_input((), np.bool_, name="cond")
    g.inputs = [i, cond_in, *g.inputs[1:-1]]
    g.outputs = [g.add_node("add", [i, 1], location=b.where())[0], *g.outputs]
    late = [] if bound is None or isinstance(bound, int) else [bound]
    for _ in late:
        g.add_input((), np.int64, name="M")
    test = Graph()
    ins = [test.add_input(v.shape, v.dtype, name=v.name) for v in g.inputs]
    going = ins[1]
    if bound is not None:
        below = test.add_node("lt", [ins[0], ins[-1] if late else bound],
                              location=b.where())[0]
        going = test.add_node("bitwise_and", [going, below], location=b.where())[0]
    test.set_outputs([going])
    start = [np.zeros((), np.int64), np.asarray(True) if first is None else b.reshape(first, ())]
    outs = b.op("while_loop", *start, *init, *captured, *late, cond_graph=test,
                body_graph=g, max_iters=None)
    return tuple(outs[2:-1])


def _scan(b, xs, attrs):
    """Scan (opset 9 form) -> scan: state variables = carry, scan inputs = xs (their
    ``scan_input_axes`` moved first), scan outputs = ys (stacked on axis 0, then moved to
    ``scan_output_axes``). dualgraph's ``reverse`` runs every xs backwards and keeps the ys
    in the order of xs: so the inputs must share one direction; an output of the other
    direction is flipped."""
    if b.opset < 9:
        return _scan8(b, xs, attrs)
    k = attrs["num_scan_inputs"]
    num_ys = len(b.node.output) - (len(xs) - k)
    if not 1 <= k <= len(xs) or num_ys < 0:
        raise b.error(f"num_scan_inputs={k} does not fit a Scan of {len(xs)} inputs and "
                      f"{len(b.node.output)} outputs")
    for key, count in (("scan_input_directions", k), ("scan_input_axes", k),
                       ("scan_output_directions", num_ys), ("scan_output_axes", num_ys)):
        if len(attrs.get(key, (0,) * count)) != count:
            raise b.error(f"{key} {list(attrs[key])} must hold {count} numbers, one per scan "
                          f"{key.split('_')[1]}")
    init, seqs = xs[:len(xs) - k], xs[len(xs) - k:]
    directions = set(attrs.get("scan_input_directions", (0,) * k))
    if len(directions) > 1:
        raise b.error("scan inputs in both directions are not supported (dualgraph's scan "
                      "runs all its xs one way)")
    reverse = bool(directions.pop()) if directions else False
    axes = attrs.get("scan_input_axes", (0,) * k)
    seqs = [_move_axis(b, x, b.dim(a, x.ndim), 0) for x, a in zip(seqs, axes)]
    lengths = {x.shape[0] for x in seqs}
    if len(lengths) != 1 or any(isinstance(d, Sym) for d in lengths):
        raise b.error(f"the scan inputs have {sorted(map(str, lengths))} rows; dualgraph's "
                      "scan needs one static length")
    types = [_type(b, x) for x in init]
    slices = [ShapedType(tuple(x.shape[1:]), np.dtype(x.dtype)) for x in seqs]
    step = b.body(attrs["body"], [*types, *slices], "body")
    n = len(init)
    _check_types(b, "state variable", [i.name for i in attrs["body"].input[:n]], types,
                 [v.type for v in step.graph.outputs[:n]])
    captured = _align([step])
    outs = _many(b.op("scan", *init, *seqs, *captured, body_graph=step.graph, num_carry=n,
                      num_xs=k, length=lengths.pop(), reverse=reverse))
    ys = outs[n:]
    out_dirs = attrs.get("scan_output_directions", (0,) * len(ys))
    out_axes = attrs.get("scan_output_axes", (0,) * len(ys))
    ys = [b.op("flip", y, dims=(0,)) if bool(d) != reverse else y for y, d in zip(ys, out_dirs)]
    return (*outs[:n], *(_move_axis(b, y, 0, b.dim(a, y.ndim)) for y, a in zip(ys, out_axes)))


def _scan8(b, xs, attrs):
    """Scan (opset 8 form): every input and output has a leading batch axis, the scan axis
    is axis 1, and the outputs are stacked in iteration order. Each batch row runs as one
    opset 9 Scan (the body sees single rows) and the rows are stacked again."""
    lens, xs = xs[0], xs[1:]
    if not xs or any(isinstance(x.shape[0], Sym) for x in xs) or len(
            {x.shape[0] for x in xs}) != 1:
        raise b.error("an opset 8 Scan needs one static batch size on all its inputs, "
                      f"not {[tuple(map(str, x.shape)) for x in xs]}")
    batch = xs[0].shape[0]
    k = attrs["num_scan_inputs"]
    if lens is not None and not isinstance(lens, np.ndarray):
        raise b.error("an opset 8 Scan's sequence_lens must be a constant")
    if lens is not None and np.any(np.asarray(lens) != xs[-1].shape[1]):
        raise b.error(f"sequence_lens {np.asarray(lens).tolist()} shorter than the scan "
                      f"inputs' {xs[-1].shape[1]} steps are not supported")
    dirs = tuple(attrs.get("directions", (0,) * k))
    row_attrs = {"num_scan_inputs": k, "body": attrs["body"], "scan_input_directions": dirs}
    rows = [_scan(_Opset9(b), [b.reshape(b.slice_dims(x, ((i, i + 1, 1),) + (None,) * (
        x.ndim - 1)), x.shape[1:]) for x in xs], row_attrs) for i in range(batch)]
    return tuple(b.op("cat", *[b.reshape(r[j], (1, *r[j].shape)) for r in rows], dim=0)
                 for j in range(len(rows[0])))


class _Opset9:
    """The importer as an opset 9 one (for _scan8's rows): the rest is the importer's."""

    opset = 9

    def __init__(self, b):
        self._b = b

    def __getattr__(self, name):
        return getattr(self._b, name)


def _move_axis(b, x, source: int, target: int):
    if source == target:
        return x
    perm = [d for d in range(x.ndim) if d != source]
    perm.insert(target, source)
    return b.op("permute", x, perm=tuple(perm))


# The ONNX op types that no registry op is the natural target of: each converter
# ``(importer, inputs, attrs) -> output or tuple of outputs`` decomposes its node into several
# registry ops (or picks one by an attribute: Mod, Gelu). Inputs are graph Values, known NumPy
# arrays, or None for an omitted optional input. The other op types import by the rules in
# the registry's OpDefs (``OpDef.onnx_import``).
CONVERTERS = {
    # elementwise
    "Div": _div, "Pow": _pow, "Mod": _mod, "Reciprocal": _reciprocal,
    "Max": _variadic("maximum"), "Min": _variadic("minimum"), "Sum": _variadic("add"),
    "Mean": _mean, "Clip": _clip, "IsInf": _is_inf, "Dropout": _dropout,
    # activations
    "LeakyRelu": _leaky_relu, "PRelu": _prelu, "Selu": _selu, "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish, "Softsign": _softsign, "Gelu": _gelu,
    "Sinh": _unary(_sinh), "Cosh": _unary(_cosh), "Celu": _unary(_celu),
    "Swish": _unary(_swish), "ThresholdedRelu": _unary(_thresholded_relu),
    "Shrink": _unary(_shrink), "Mish": _unary(_mish), "BitShift": _bit_shift,
    "Hardmax": _hardmax, "LpNormalization": _lp_normalization, "EyeLike": _eye_like,
    "ReduceLogSum": _reduce_log_sum, "Det": _det,
    # matrix products
    "Gemm": _gemm, "Attention": _attention, "LinearAttention": _linear_attention,
    # training
    "Adagrad": _optimizer("Adagrad"), "Momentum": _optimizer("Momentum"),
    "Adam": _optimizer("Adam"),
    # quantisation
    "QuantizeLinear": _quantize_linear, "DequantizeLinear": _dequantize_linear,
    "DynamicQuantizeLinear": _dynamic_quantize_linear, "MatMulInteger": _matmul_integer,
    "QLinearMatMul": _qlinear_matmul, "ConvInteger": _conv_integer,
    "QLinearConv": _qlinear_conv,
    # recurrent layers
    "RNN": _recurrent, "GRU": _recurrent, "LSTM": _recurrent,
    # losses
    "NegativeLogLikelihoodLoss": _nll_loss, "SoftmaxCrossEntropyLoss": _softmax_cross_entropy,
    # shapes and indexing
    "Shape": _shape, "Size": _size, "Split": _split, "Slice": _slice,
    "GatherElements": _gather_elements, "GatherND": _gather_nd, "ScatterND": _scatter_nd,
    "Tile": _tile, "Pad": _pad, "Resize": _resize, "Upsample": _resize,
    "Compress": _compress, "MelWeightMatrix": _mel_weight_matrix, "NonZero": _nonzero,
    "Unique": _unique, "NonMaxSuppression": _non_max_suppression,
    "GridSample": _grid_sample, "AffineGrid": _affine_grid, "DFT": _dft, "STFT": _stft,
    "DepthToSpace": _depth_to_space, "SpaceToDepth": _space_to_depth,
    "ReverseSequence": _reverse_sequence, "OneHot": _one_hot,
    "TensorScatter": _tensor_scatter,
    "ScatterElements": _scatter_elements, "Scatter": _scatter_elements,
    "Constant": _constant, "ConstantOfShape": _constant_of_shape, "Range": _range,
    # reductions
    "ReduceSumSquare": _reduce_sum_square, "TopK": _topk,
    # normalisation, convolution, pooling
    "RotaryEmbedding": _rotary_embedding, "CenterCropPad": _center_crop_pad,
    "CausalConvWithState": _causal_conv_with_state, "SwiGLU": _swiglu,
    "HannWindow": _window("hann"), "HammingWindow": _window("hamming"),
    "BlackmanWindow": _window("blackman"),
    "BatchNormalization": _batch_norm, "InstanceNormalization": _instance_norm,
    "GroupNormalization": _group_norm, "MeanVarianceNormalization": _mean_variance_norm,
    "RMSNormalization": _rms_norm, "LRN": _lrn,
    "Conv": _conv, "ConvTranspose": _conv_transpose, "Col2Im": _col2im,
    "RoiAlign": _roi_align, "DeformConv": _deform_conv,
    "Binarizer": _binarizer, "ArrayFeatureExtractor": _array_feature_extractor,
    "MaxPool": _max_pool, "AveragePool": _average_pool, "LpPool": _lp_pool,
    "MaxUnpool": _max_unpool,
    "GlobalAveragePool": _global_pool("mean"), "GlobalMaxPool": _global_pool("amax"),
    # control flow
    "If": _if, "Loop": _loop, "Scan": _scan,
    **SEQUENCE_CONVERTERS,
}


@functools.cache
def import_rules() -> dict:
    """Every ONNX op type the import reads -> its converter: the ``onnx_import`` rules of
    the registry's OpDefs (an op type of a one-to-one op becomes that op of the node's
    inputs), and ``CONVERTERS``. An op type claimed twice is an error, found here."""
    rules, owner = dict(CONVERTERS), dict.fromkeys(CONVERTERS, "CONVERTERS")
    for op in REGISTRY.values():
        for op_type, rule in op_import_rules(op).items():
            if op_type in rules:
                raise TypeError(f"ONNX op type {op_type} imports by two rules: {op.name}'s "
                                f"and {owner[op_type]}'s")
            rules[op_type] = rule if rule is not None else _one_to_one(op)
            owner[op_type] = op.name
    return rules


def op_import_rules(op) -> dict:
    """The ONNX op types ``op`` is the natural target of, with their rules (None: one to
    one), as its OpDef says."""
    if op.onnx_import is not None:
        return dict(op.onnx_import)
    return {op.onnx: None} if isinstance(op.onnx, str) else {}


def _one_to_one(op):
    return lambda b, xs, attrs: b.op(op, *xs)
