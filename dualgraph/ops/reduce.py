"""Reductions: sum, mean, prod, max/min, var/std, logsumexp, norm, arg-reductions, cumsum,
and softmax / log_softmax (primitives for numerical stability).

Conventions shared by the family: public functions normalise ``dim`` (an int, a tuple, or
None for every dim) into sorted non-negative ``dims`` before calling ``apply``; float16 and
bfloat16 kernels accumulate in float32 and round once at the end, as torch's CPU kernels
do; a VJP broadcasts the reduced gradient back with :func:`_expand_back`. Gradient rules
follow torch: ``max(x, dim)`` routes the gradient to the returned index, while full
``max(x)``, ``amax`` and the infinity norms split it evenly among ties.
"""
from __future__ import annotations

import math
import warnings
from collections import namedtuple

import numpy as np

from .. import dtypes, kernels
from ..dispatch import apply
from ..kernels.threads import fitted_rows, run_rows, threads_for
from ..shapes import (ShapedType, is_static, normalize_dim, normalize_dims, numel,
                      reduced_shape)
from ..tensor import Tensor
from . import creation
from . import elementwise as ew
from . import shape as shape_ops
from ._util import BF16, empty_into, is_float
from .opdef import Reduction, defop, get

__all__ = ["sum", "mean", "prod", "max", "min", "amax", "amin", "aminmax", "argmax", "argmin", "median",
           "var", "std", "var_mean", "std_mean", "logsumexp", "norm", "cumsum", "cumprod", "all",
           "any", "nansum", "nanmean", "logcumsumexp", "count_nonzero", "softmax", "log_softmax", "allclose", "equal"]

_max = max   # the builtin, before this module shadows it


# -- shared helpers ----------------------------------------------------------------------------
def _acc_dtype(dt: np.dtype) -> np.dtype:
    """torch's accumulating reductions (sum, prod, cumsum): integers and bools give int64."""
    return np.dtype(np.int64) if dt.kind in "biu" else dt


def _sum_dtype(dt: np.dtype, dtype=None) -> np.dtype:
    """torch.sum: integers and bools accumulate in int64; an explicit dtype wins."""
    return _acc_dtype(dt) if dtype is None else np.dtype(dtype)


def _widen(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 -> float32 for accumulation (NumPy would accumulate in half)."""
    return x.astype(np.float32) if x.dtype == np.float16 or x.dtype == BF16 else x


def _widen_running(x: np.ndarray) -> np.ndarray:
    """A running op's (cumsum, cumprod, logcumsumexp) operand widened as torch's CPU
    kernels accumulate: halves in float32, float32 in float64 (a float32 running sum of
    100,000 values otherwise drifts ~1e-3 from torch's), each output rounded once."""
    return x.astype(np.float64) if x.dtype == np.float32 else _widen(x)


def _infer_reduce(x, dims, keepdim, **attrs) -> ShapedType:
    """Type of a dtype-preserving reduction over ``dims``."""
    return ShapedType(reduced_shape(tuple(x.shape), dims, keepdim), x.dtype)


def _expand_back(g, shape: tuple, dims: tuple, keepdim: bool):
    """A gradient of a reduction over ``dims`` broadcast back to the input ``shape``."""
    if not keepdim:
        g = shape_ops.reshape(g, reduced_shape(shape, dims, True))
    return shape_ops.expand(g, shape)


def _split_among(g, mask, dims):
    """``g`` shared evenly among the ``True`` entries of ``mask`` in each reduced slice (torch
    splits a max's gradient among ties this way)."""
    count = sum(mask, dims, keepdim=True)
    return ew.where(mask, g / count, 0.0)


def _nonzero_or_one(t):
    """``t`` with zeros replaced by one: a safe divisor where the quotient is masked anyway."""
    return ew.where(ew.eq(t, 0), 1.0, t)


def _require_float(x, fn: str):
    if not x.is_floating_point():
        raise TypeError(f"{fn}() needs a floating point tensor, got {x.dtype!r}; convert it "
                        "first with .float()")


def _cast_arg(x, dtype):
    """torch's ``dtype=`` argument of reductions: the input is cast before reducing."""
    return x if dtype is None else x.to(dtype)


def _all_dims(dim, ndim: int) -> tuple:
    """``dim`` of amax/amin/logsumexp-style reductions: None or () mean every dim."""
    return normalize_dims(None if dim == () else dim, ndim)


def _count_kernel(x, dims):
    n = 1
    for d in dims:
        n *= x.shape[d]
    return np.asarray(n, dtype=x.dtype if is_float(x.dtype) else dtypes.default_float())


def _onnx_count(e, node):
    """How many elements a reduction over ``dims`` of x combines (traced where a dim is
    symbolic): the product of those dims of x's shape, as the node's float dtype."""
    sizes = e.op("Gather", [e.op("Shape", [e.input(0)]), e.ints(node.attrs["dims"])])
    return [e.cast(e.reduce("ReduceProd", sizes, [0], False), node.outputs[0].dtype)]


def _onnx_reduce(op_type: str):
    """One Reduce* node over ``dims``, computed in the output dtype (sum and prod of ints:
    int64)."""
    def export(e, node):
        x = e.input(0, node.outputs[0].dtype)
        return [e.reduce(op_type, x, e.axes(), node.attrs["keepdim"])]
    return export


def _from_onnx_reduce(reduce, since: int = 18):
    """An ONNX Reduce* node -> ``reduce(b, x, dims, keepdim)``; its axes are an attribute
    before opset ``since`` and an input from it on (ReduceSum: 13)."""
    def convert(b, xs, attrs):
        dims, keep = b.reduce_dims(xs, attrs, since)
        return xs[0] if dims is None else reduce(b, xs[0], dims, keep)
    return convert


def _reduction(name: str, empty=None, **fixed):
    """``name`` over dims; where a reduced dim is 0 long and ``empty`` is given, ONNX's
    result of an empty reduction: ``empty(dtype)`` everywhere (-inf for ReduceMax)."""
    def reduce(b, x, dims, keep):
        if empty is not None and 0 in [x.shape[d] for d in dims]:   # (any is this module's)
            shape = [1 if d in dims else n for d, n in enumerate(x.shape) if keep or d not in dims]
            return b.op("expand", np.asarray(empty(x.dtype), x.dtype), shape=tuple(shape))
        return b.op(name, x, dims=dims, keepdim=keep, **fixed)
    return reduce


def _lowest(dtype):
    return False if dtype == np.bool_ else -np.inf if is_float(dtype) else np.iinfo(dtype).min


def _highest(dtype):
    return True if dtype == np.bool_ else np.inf if is_float(dtype) else np.iinfo(dtype).max


# ONNX's ReduceSum and ReduceProd keep x's dtype; dualgraph's sum and prod of ints give int64
def _sum_from_onnx(b, x, dims, keep):
    return b.op("sum", x, dims=dims, keepdim=keep, dtype=x.dtype)


def _prod_from_onnx(b, x, dims, keep):
    return b.cast(b.op("prod", x, dims=dims, keepdim=keep), x.dtype)


COUNT = defop("count", _count_kernel,
              lambda x, dims: ShapedType((), x.dtype if is_float(x.dtype)
                                         else dtypes.default_float()),
              attrs=("dims",), saves="",
              onnx=_onnx_count,
              doc="The number of elements in ``dims`` of x, as a 0-d float tensor.")


def _reduced_size(x, dims: tuple):
    """How many elements a reduction over ``dims`` combines: a Python int, or, when a dim
    is symbolic (a traced dynamic batch), a 0-d tensor computed at run time."""
    n = numel(x._data.shape[d] for d in dims)
    return n if isinstance(n, int) else apply(COUNT, x, dims=dims)


# -- sum, mean, prod ---------------------------------------------------------------------------
# A sum of at most this many elements per result, over big arrays, adds strided slices in
# turn (a pass each): NumPy's reduce is a call per result element when the last dim is
# reduced and short (2 elements: 40x slower; the gradient of a broadcast over 2x2
# blocks), and copies its rows when a middle dim is.
_FEW = 8


def _row_major(x: np.ndarray) -> np.ndarray:
    """``x`` C-contiguous, if it holds floats: NumPy sums in memory order (pairwise along
    the axis contiguous in memory), so a transposed view would sum in another order, with
    other roundings, than the same values laid out by rows, as a compiled kernel, which
    reads them by rows, sums them."""
    return x if x.flags.c_contiguous or x.dtype.kind != "f" else np.ascontiguousarray(x)


# float32 and float64: the dtypes a sum keeps as they are (no widening, no int64)
_PLAIN_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _sum_kernel(x, dims, keepdim, dtype=None, out=None):
    # the commonest call (a loss, a small tensor's total) skips the checks below: it is
    # their last line's call, the same bits, at half the kernel's cost
    if dtype is None and x.size < kernels.MIN_ELEMENTS and x.dtype in _PLAIN_FLOATS \
            and x.flags.c_contiguous:
        return np.asarray(np.add.reduce(x, axis=dims, dtype=x.dtype, keepdims=keepdim, out=out))
    x = _row_major(x)
    out_dt = _sum_dtype(x.dtype, dtype)
    if out_dt.kind in "iu" and x.dtype.kind not in "iub":   # (torch casts floats first)
        x = x.astype(out_dt)
    if x.dtype == dtypes.bfloat16_np or x.dtype == np.float16:
        return np.sum(x, axis=dims, keepdims=keepdim, dtype=np.float32).astype(out_dt)
    if out_dt == x.dtype and x.dtype.kind == "f" and x.size >= kernels.MIN_ELEMENTS and dims \
            and 1 < math.prod(x.shape[d] for d in dims) <= _FEW:
        return _sum_slices(x, dims, keepdim, out)
    # (np.add.reduce is what np.sum runs, without its Python wrapper's ~1 us a call; a
    # new array even over no dims)
    return np.asarray(np.add.reduce(x, axis=dims, dtype=out_dt, keepdims=keepdim, out=out))


def _sum_slices(x, dims, keepdim, out):
    """``x`` summed over ``dims`` (a few elements per result) as slices at each of their
    positions added, in ``np.add.reduce``'s order over a C-contiguous array, so that its
    bits are NumPy's (and a compiled sum's): the "run" (the reduced dims after the last
    kept dim longer than 1, contiguous in memory) summed pairwise at each position of the
    other reduced dims (``_add_run``), those sums added in row-major order, and the total
    added to 0.0 (NumPy's initial value: a -0.0 sum is 0.0)."""
    shape = reduced_shape(x.shape, dims, False)
    acc = np.empty(shape, x.dtype) if out is None else out.reshape(shape)
    last = _max((d for d in range(x.ndim) if d not in dims and x.shape[d] > 1), default=-1)
    run = [d for d in dims if d > last]
    lead = [d for d in dims if d <= last]

    def slices(at: dict) -> list:
        return [x[tuple({**at, **pos}.get(d, slice(None)) for d in range(x.ndim))]
                for pos in _positions_of(x, run)]
    leads = _positions_of(x, lead)
    _add_run(slices(leads[0]), acc)
    part = np.empty_like(acc) if len(leads) > 1 else None
    for at in leads[1:]:
        _add_run(slices(at), part)
        np.add(acc, part, out=acc)
    np.add(acc, 0.0, out=acc)
    return acc.reshape(reduced_shape(x.shape, dims, keepdim)) if out is None else out


def _positions_of(x, dims: list) -> list[dict]:
    """Every position over ``dims`` of ``x`` ({dim: index}), in row-major order."""
    return [dict(zip(dims, at)) for at in np.ndindex(*(x.shape[d] for d in dims))]


def _add_run(parts: list, out) -> None:
    """``out = `` the sum of ``parts`` (at most 8) in NumPy's pairwise order for so few:
    left to right under 8, eight as the tree ``((0+1)+(2+3))+((4+5)+(6+7))``."""
    if len(parts) == 1:
        np.copyto(out, parts[0])
    elif len(parts) < 8:
        np.add(parts[0], parts[1], out=out)
        for p in parts[2:]:
            np.add(out, p, out=out)
    else:
        np.add(parts[0], parts[1], out=out)
        np.add(out, parts[2] + parts[3], out=out)
        right = parts[4] + parts[5]
        np.add(right, parts[6] + parts[7], out=right)
        np.add(out, right, out=out)


def _infer_sum(x, dims, keepdim, dtype=None):
    return ShapedType(reduced_shape(tuple(x.shape), dims, keepdim), _sum_dtype(x.dtype, dtype))


def _sum_vjp(g, out, x, dims, keepdim, dtype=None):
    return _expand_back(g, tuple(x.shape), dims, keepdim).to(x.dtype)


SUM = defop("sum", _sum_kernel, _infer_sum, vjp=_sum_vjp, attrs=("dims", "keepdim", "dtype"),
            saves="", fills_out=True,
            onnx=_onnx_reduce("ReduceSum"),
            onnx_import={"ReduceSum": _from_onnx_reduce(_sum_from_onnx, since=13)},
            reduction=Reduction.SUM,
            autocast="float32")


def sum(x, dim=None, keepdim=False, *, dtype=None):
    """Sum over ``dim`` (an int, a tuple, or None for all dims), as ``torch.sum``.

    >>> dg.sum(dg.tensor([[1, 2], [3, 4]]), dim=0)
    tensor([4, 6])
    """
    dims = normalize_dims(dim, x.ndim)
    return apply(SUM, x, dims=dims, keepdim=bool(keepdim),
                 dtype=None if dtype is None else dtypes.to_np(dtype))


def _mean_kernel(x, dims, keepdim):
    # What np.mean computes (a sum in the array's float dtype, divided by the count as an
    # intp, in place), without its Python wrapper's ~5 us a call: the same bits.
    w = _row_major(_widen(x))
    total = np.asarray(np.add.reduce(w, axis=dims, keepdims=keepdim))
    count = w.size if dims is None else math.prod(w.shape[d] for d in dims)
    np.true_divide(total, np.intp(count), out=total, casting="unsafe")
    return total.astype(x.dtype, copy=False)


def _specialise_mean(x, dims, keepdim):
    """``specialise`` (codegen) of a float32 mean over an input's trailing dims, of static
    shape (global average pooling, ``mean(x, (2, 3))``): the input as rows, one compiled
    row loop (``kernels.normalization.row_means``) called through its entry, fitted to the
    shape once. NumPy's ``mean`` over two small trailing axes costs tens of microseconds a
    call in its iterator; the loop costs a few. None otherwise (the kernel)."""
    shape = tuple(x.shape)
    tail = sorted(d % len(shape) for d in dims) if shape else []
    if not (kernels.numba_available() and x.dtype == np.float32 and tail and is_static(shape)
            and tail == list(range(tail[0], tail[0] + len(tail)))):
        return None
    if tail[-1] != len(shape) - 1:
        return _middle_means(shape, tail, dims, keepdim)
    rows = math.prod(shape[:len(shape) - len(tail)])
    width = math.prod(shape[len(shape) - len(tail):])
    out_shape = reduced_shape(shape, dims, keepdim)
    if not rows or not width:
        return None
    means = fitted_rows(kernels.normalization.row_means)

    def run(x):
        out = np.empty(out_shape, np.float32)
        means(rows, np.ascontiguousarray(x).reshape(rows, width), out.reshape(rows))
        return out
    return "row_means", run


def _middle_means(shape, middle, dims, keepdim):
    """``_specialise_mean`` of a mean over dims in the middle of an array's (``(N, C/8, H,
    W, 8)`` over ``(2, 3)``: a channel-blocked value's global average pooling): the input
    as ``(A, P, B)``, a compiled loop summing each ``(P, B)`` block's rows in order (NumPy's
    iterator over a short last axis ran a float at a time)."""
    lead = math.prod(shape[:middle[0]])
    width = math.prod(shape[middle[0]:middle[-1] + 1])
    inner = math.prod(shape[middle[-1] + 1:])
    out_shape = reduced_shape(shape, dims, keepdim)
    if not (lead and width and inner):
        return None
    means = fitted_rows(kernels.normalization.middle_means)

    def run(x):
        out = np.empty(out_shape, np.float32)
        means(lead, np.ascontiguousarray(x).reshape(lead, width, inner),
              out.reshape(lead, inner))
        return out
    return "middle_means", run


MEAN = defop("mean", _mean_kernel, _infer_reduce, attrs=("dims", "keepdim"), saves="",
             specialise=_specialise_mean,
             vjp=lambda g, out, x, dims, keepdim: _expand_back(
                 g / _reduced_size(x, dims), tuple(x.shape), dims, keepdim),
             onnx=_onnx_reduce("ReduceMean"),
             onnx_import={"ReduceMean": _from_onnx_reduce(_reduction("mean"))},
             reduction=Reduction.MEAN,
             autocast="float32")


def mean(input, dim=None, keepdim=False, *, dtype=None):
    """Mean over ``dim`` (int, tuple or None), as ``torch.mean``; integer tensors need
    ``dtype=`` (torch refuses to guess the result type).

    >>> dg.tensor([[1.0, 2.0], [3.0, 5.0]]).mean(1)
    tensor([1.5000, 4.0000])
    """
    x = _cast_arg(input, dtype)
    if not x.is_floating_point():
        raise TypeError(f"mean() of a {x.dtype!r} tensor: the result dtype can't be inferred; "
                        "pass dtype=dg.float32 or convert the input with .float()")
    return apply(MEAN, x, dims=normalize_dims(dim, x.ndim), keepdim=bool(keepdim))


def _without_nans(x):
    """``x`` with its NaNs read as 0 (their gradient 0, as torch's nansum)."""
    return ew.where(ew.isnan(x), 0.0, x) if x.is_floating_point() else x


def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """:func:`sum` with NaNs counted as 0, as ``torch.nansum``."""
    return sum(_without_nans(input), dim, keepdim, dtype=dtype)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """:func:`mean` over the entries that are not NaN (NaN where all are), as
    ``torch.nanmean``."""
    x = _cast_arg(input, dtype)
    if not x.is_floating_point():
        raise TypeError(f"nanmean() of a {x.dtype!r} tensor: it needs a float tensor; "
                        "pass dtype=dg.float32 or convert the input with .float()")
    counted = sum(ew.logical_not(ew.isnan(x)), dim, keepdim)
    return sum(_without_nans(x), dim, keepdim) / counted.to(x.dtype)


def _prod_kernel(x, dims, keepdim):
    out_dt = _acc_dtype(x.dtype)
    acc = None if is_float(x.dtype) else out_dt
    return np.asarray(np.prod(_widen(x), axis=dims, keepdims=keepdim, dtype=acc)).astype(out_dt)


def _infer_prod(x, dims, keepdim):
    return ShapedType(reduced_shape(tuple(x.shape), dims, keepdim), _acc_dtype(x.dtype))


def _prod_vjp(g, out, x, dims, keepdim):
    """d prod / d x_i is the product of the other entries. Computed from the product of
    the nonzero entries and the zero count, so it stays exact when the slice has zeros:
    with one zero only that entry gets a gradient, with two or more none does."""
    shape = tuple(x.shape)
    zero = ew.eq(x, 0)
    nonzero = ew.where(zero, 1.0, x)
    rest = apply(PROD, nonzero, dims=dims, keepdim=True)
    zeros = sum(zero, dims, keepdim=True)
    others = ew.where(zero, ew.where(ew.eq(zeros, 1), rest, 0.0),
                      ew.where(ew.eq(zeros, 0), rest / nonzero, 0.0))
    return _expand_back(g, shape, dims, keepdim) * others


PROD = defop("prod", _prod_kernel, _infer_prod, vjp=_prod_vjp, attrs=("dims", "keepdim"),
             saves="i",
             onnx=_onnx_reduce("ReduceProd"),
             onnx_import={"ReduceProd": _from_onnx_reduce(_prod_from_onnx)},
             reduction=Reduction.PROD,
             autocast="float32")


def prod(input, dim=None, keepdim=False, *, dtype=None):
    """Product over one ``dim`` or all of them, as ``torch.prod`` (integers give int64).

    >>> dg.tensor([[1, 2], [3, 4]]).prod(1)
    tensor([ 2, 12])
    """
    x = _cast_arg(input, dtype)
    dims = normalize_dims(None if dim is None else normalize_dim(dim, x.ndim), x.ndim)
    return apply(PROD, x, dims=dims, keepdim=bool(keepdim) and dim is not None)


# -- max / min ---------------------------------------------------------------------------------
# onnxruntime's ReduceMax / ReduceMin and ArgMax / ArgMin skip NaNs, where torch (and these
# kernels) give NaN and the first NaN's index: the exported graphs look for NaNs themselves.
def _nan_found(e, x: str, axes: list, keepdim: bool) -> tuple[str, str]:
    """``(found, nans)``: whether each reduced slice of float ``x`` holds a NaN (bool), and
    the NaN mask as float32 0/1 (whose ArgMax is the first NaN's index)."""
    nans = e.cast(e.op("IsNaN", [x]), np.float32)
    return e.cast(e.reduce("ReduceMax", nans, axes, keepdim), np.bool_), nans


def _nan_where(e, found: str, value: str, dtype) -> str:
    """``value`` with NaN where ``found``."""
    return e.op("Where", [found, e.scalar(np.nan, dtype), value])


def _onnx_extremum(op_type: str):
    """ReduceMax / ReduceMin over ``dims``, NaN where a reduced slice holds one."""
    def export(e, node):
        x = e.input(0)
        axes, keep = e.axes(), node.attrs["keepdim"]
        value = e.reduce(op_type, x, axes, keep)
        if node.inputs[0].dtype.kind != "f":
            return [value]
        return [_nan_where(e, _nan_found(e, x, axes, keep)[0], value, node.outputs[0].dtype)]
    return export


def _extremum_vjp(g, out, x, dims, keepdim):
    shape = tuple(x.shape)
    mask = ew.eq(x, _expand_back(out, shape, dims, keepdim))
    return _split_among(_expand_back(g, shape, dims, keepdim), mask, dims)


AMAX = defop("amax", lambda x, dims, keepdim: np.amax(x, axis=dims, keepdims=keepdim),
             _infer_reduce, vjp=_extremum_vjp, attrs=("dims", "keepdim"), saves="io",
             onnx=_onnx_extremum("ReduceMax"),
             onnx_import={"ReduceMax": _from_onnx_reduce(_reduction("amax", _lowest))},
             reduction=Reduction.MAX)
AMIN = defop("amin", lambda x, dims, keepdim: np.amin(x, axis=dims, keepdims=keepdim),
             _infer_reduce, vjp=_extremum_vjp, attrs=("dims", "keepdim"), saves="io",
             onnx=_onnx_extremum("ReduceMin"),
             onnx_import={"ReduceMin": _from_onnx_reduce(_reduction("amin", _highest))},
             reduction=Reduction.MIN)


def amax(input, dim=(), keepdim=False):
    """Largest value over ``dim`` (an int or tuple; () means all dims), as ``torch.amax``.
    Its gradient is split evenly among tied maxima."""
    return apply(AMAX, input, dims=_all_dims(dim, input.ndim), keepdim=bool(keepdim))


def amin(input, dim=(), keepdim=False):
    """Smallest value over ``dim`` (an int or tuple; () means all dims), as ``torch.amin``."""
    return apply(AMIN, input, dims=_all_dims(dim, input.ndim), keepdim=bool(keepdim))


# torch.return_types.max / .min: a namedtuple, so `values, indices = x.max(1)` unpacks.
MaxResult = namedtuple("max", ["values", "indices"])
MinResult = namedtuple("min", ["values", "indices"])
AminmaxResult = namedtuple("aminmax", ["min", "max"])


def aminmax(input, *, dim=None, keepdim=False):
    """``(amin, amax)`` over ``dim`` (None: all dims), as ``torch.aminmax``."""
    dims = () if dim is None else dim
    return AminmaxResult(amin(input, dims, keepdim), amax(input, dims, keepdim))


_LOOP_KINDS = frozenset("iuf")   # (dtypes Numba's loops take: not float16 / bfloat16)


def _with_index_kernel(arg, largest=None):
    """Kernel of max/min along a dim: values and the int64 index of the first extremum
    (``largest`` True / False: max / min, whose non-last dims go through
    ``kernels.along.extreme``, one pass in memory order where ``arg`` copies the array
    into the dim's order first; None: ``arg`` always)."""
    def kernel(x, dim, keepdim):
        if largest is not None and x.ndim > dim + 1 and x.size and x.dtype.kind in _LOOP_KINDS \
                and x.dtype.itemsize >= 4 and kernels.numba_available():
            return _extreme_along(x, dim, keepdim, largest)
        idx = arg(x, axis=dim, keepdims=True)
        values = np.take_along_axis(x, idx, axis=dim)
        if not keepdim:
            idx, values = np.squeeze(idx, dim), np.squeeze(values, dim)
        return values, idx.astype(np.int64)
    return kernel


def _extreme_along(x, dim, keepdim, largest):
    """max / min of ``x`` over ``dim`` (not its last) and the index, by one loop over
    ``x`` as ``(outer, n, inner)``."""
    shape = x.shape
    outer, inner = math.prod(shape[:dim]), math.prod(shape[dim + 1:])
    values = np.empty((outer, inner), x.dtype)
    index = np.empty((outer, inner), np.int64)
    kernels.along.extreme(np.ascontiguousarray(x).reshape(outer, shape[dim], inner),
                          values, index, largest)
    out = reduced_shape(shape, (dim,), keepdim)
    return values.reshape(out), index.reshape(out)


def _infer_with_index(x, dim, keepdim):
    shape = reduced_shape(tuple(x.shape), (dim,), keepdim)
    return ShapedType(shape, x.dtype), ShapedType(shape, np.dtype(np.int64))


def _positions(x, dim: int):
    """The index of every element along ``dim`` (an int64 iota shaped like ``x``); built
    from ``x`` itself so that it also works for symbolic shapes."""
    return cumsum(creation.full_like(x, 1, dtype=dtypes.int64), dim) - 1


def _with_index_vjp(g, out, x, dim, keepdim):
    """The gradient goes to the returned index only (torch's rule for max/min with dim)."""
    return apply(ALONG_BACKWARD, g[0], out[1], x, dim=dim, keepdim=keepdim)


def _along_backward_kernel(g, index, x, dim, keepdim):
    out = np.zeros(x.shape, g.dtype)
    if not keepdim:
        g, index = np.expand_dims(g, dim), np.expand_dims(index, dim)
    np.put_along_axis(out, index, g, axis=dim)
    return out


def _along_backward_decomposition(g, index, x, dim, keepdim):
    shape = tuple(x.shape)
    picked = ew.eq(_positions(x, dim), _expand_back(index, shape, (dim,), keepdim))
    return ew.where(picked, _expand_back(g, shape, (dim,), keepdim), 0.0).to(g.dtype)


def _along_backward_vjp(gg, out, g, index, x, dim, keepdim):
    """Linear in ``g``: its gradient is ``gg`` read back at ``index`` (the ``gather`` op,
    by its registry name: ops/index.py imports this module)."""
    kept = index if keepdim else shape_ops.unsqueeze(index, dim)
    picked = apply(get("gather"), gg, kept, dim=dim)
    return (picked if keepdim else shape_ops.squeeze(picked, dim)), None, None


# The gradient of max / min / median along a dim as one op: ``g`` written at ``index``
# into zeros (one pass), where the rule's ops were five passes (the positions' cumsum, a
# compare, two broadcasts, a select).
ALONG_BACKWARD = defop(
    "along_backward", _along_backward_kernel,
    lambda g, index, x, dim, keepdim: ShapedType(tuple(x.shape), g.dtype),
    vjp=_along_backward_vjp, attrs=("dim", "keepdim"), saves="1", compiler_only=True,
    decomposition=_along_backward_decomposition, onnx=None,
    doc="zeros shaped like x with g at index along dim: max/min(x, dim)'s gradient.")


# One ONNX node per output: ReduceMax (or ReduceMin) for values, ArgMax (ArgMin) for indices.
def _onnx_with_index(reduce_type: str, arg_type: str):
    def export(e, node):
        x, dim, keep = e.input(0), node.attrs["dim"], node.attrs["keepdim"]
        value = e.reduce(reduce_type, x, [dim], keep)
        index = e.op(arg_type, [x], axis=dim, keepdims=int(bool(keep)))
        if node.inputs[0].dtype.kind != "f":
            return [value, index]
        found, nans = _nan_found(e, x, [dim], keep)
        first = e.op("ArgMax", [nans], axis=dim, keepdims=int(bool(keep)))   # the first NaN
        return [_nan_where(e, found, value, node.outputs[0].dtype),
                e.op("Where", [found, first, index])]
    return export


MAX = defop("max", _with_index_kernel(np.argmax, True), _infer_with_index, vjp=_with_index_vjp,
            attrs=("dim", "keepdim"), num_outputs=2, differentiable_outputs=(0,), saves="o",
            saved_outputs=(1,),
            onnx=_onnx_with_index("ReduceMax", "ArgMax"))
MIN = defop("min", _with_index_kernel(np.argmin, False), _infer_with_index, vjp=_with_index_vjp,
            attrs=("dim", "keepdim"), num_outputs=2, differentiable_outputs=(0,), saves="o",
            saved_outputs=(1,),
            onnx=_onnx_with_index("ReduceMin", "ArgMin"))


def _max_or_min(op, full, result, elementwise_name, input, dim, keepdim):
    if isinstance(dim, Tensor):   # torch.max(a, b): the elementwise maximum
        return getattr(ew, elementwise_name)(input, dim)
    if dim is None:
        return full(input)
    return _along(op, result, input, dim, keepdim)


def _along(op, result, input, dim, keepdim):
    """``(values, indices)`` of ``op`` (max, min, median, mode, ...) along ``dim``."""
    if input.ndim == 0:   # (a 0-d tensor is its own max, mode and median, at index 0)
        normalize_dim(dim, 1)   # (0 and -1 only, as torch)
        values, indices = apply(op, shape_ops.reshape(input, 1), dim=0, keepdim=False)
        return result(values.reshape(()), indices.reshape(()))
    return result(*apply(op, input, dim=normalize_dim(dim, input.ndim),
                         keepdim=bool(keepdim)))


def max(input, dim=None, keepdim=False):
    """``max(x)``: the largest value (0-d); ``max(x, dim)``: ``(values, indices)`` along
    ``dim``; ``max(a, b)`` with a tensor ``b``: the elementwise maximum. As ``torch.max``.

    >>> values, indices = dg.tensor([[1.0, 5.0], [7.0, 2.0]]).max(dim=1)
    >>> indices
    tensor([1, 0])
    """
    return _max_or_min(MAX, amax, MaxResult, "maximum", input, dim, keepdim)


def min(input, dim=None, keepdim=False):
    """The mirror of :func:`max`: ``min(x)``, ``min(x, dim)`` -> (values, indices),
    ``min(a, b)`` elementwise."""
    return _max_or_min(MIN, amin, MinResult, "minimum", input, dim, keepdim)


def _argmedian(x, axis, keepdims):
    """Index of the lower median along ``axis`` (kept as a size-1 dim), as torch picks it;
    where the slice holds a NaN, the first NaN's (the median is NaN, as torch's)."""
    order = np.argsort(x, axis=axis, kind="stable")
    picked = np.take(order, [(x.shape[axis] - 1) // 2], axis=axis)
    if not is_float(x.dtype):
        return picked
    nans = np.isnan(x.astype(np.float32) if x.dtype.itemsize < 4 else x)
    return np.where(nans.any(axis=axis, keepdims=True),
                    np.argmax(nans, axis=axis, keepdims=True), picked)


def _onnx_median(e, node):
    """median -> the last of the (n - 1) // 2 + 1 smallest, by TopK (lower index first
    among equal values, the index dualgraph's lower median takes); NaN, at the first NaN's
    index, where the slice holds one."""
    x, dim, keep = node.inputs[0], node.attrs["dim"], node.attrs["keepdim"]
    size = x.shape[dim]
    if not isinstance(size, int):
        raise e.fail(f"the median's dim has a symbolic size ({size})",
                     "export with that dim static")
    k = (size - 1) // 2 + 1
    picked = e.outputs("TopK", [e.input(0), e.ints([k])], 2, axis=dim, largest=0, sorted=1)
    outs = []
    for t in picked:
        last = e.op("Slice", [t, e.ints([k - 1]), e.ints([k]), e.ints([dim])])
        outs.append(last if keep else e.op("Squeeze", [last, e.ints([dim])]))
    if x.dtype.kind != "f":
        return outs
    found, nans = _nan_found(e, e.input(0), [dim], keep)   # (a NaN is the median, at its index)
    first = e.op("ArgMax", [nans], axis=dim, keepdims=int(bool(keep)))
    return [_nan_where(e, found, outs[0], node.outputs[0].dtype),
            e.op("Where", [found, first, outs[1]])]


MedianResult = namedtuple("median", ["values", "indices"])
MEDIAN = defop("median", _with_index_kernel(_argmedian), _infer_with_index,
               vjp=_with_index_vjp, attrs=("dim", "keepdim"), num_outputs=2,
               differentiable_outputs=(0,), saves="o",
               onnx=_onnx_median)


def median(input, dim=None, keepdim=False):
    """``median(x)``: the lower median of all elements (0-d); ``median(x, dim)``:
    ``(values, indices)`` along ``dim``. As ``torch.median``; the gradient goes to the
    median's index (with ties, torch's ``median(x)`` would split it instead)."""
    if dim is None:
        if input.numel() == 0 and input.dtype.is_floating_point:   # (torch's: NaN)
            return creation.full((), math.nan, dtype=input.dtype)
        return apply(MEDIAN, shape_ops.reshape(input, -1), dim=0, keepdim=False)[0]
    return _along(MEDIAN, MedianResult, input, dim, keepdim)


def _arg_kernel(arg):
    def kernel(x, dim, keepdim):
        if dim is None:
            idx = arg(x.reshape(-1))
            return np.full((1,) * x.ndim if keepdim else (), idx, dtype=np.int64)
        return arg(x, axis=dim, keepdims=keepdim).astype(np.int64)
    return kernel


def _infer_arg(x, dim, keepdim):
    dims = tuple(range(x.ndim)) if dim is None else (dim,)
    return ShapedType(reduced_shape(tuple(x.shape), dims, keepdim), np.dtype(np.int64))


def _onnx_arg(op_type: str):
    def export(e, node):
        x, dim, keep = e.input(0), node.attrs["dim"], node.attrs["keepdim"]
        if dim is not None:
            return [e.op(op_type, [x], axis=dim, keepdims=int(bool(keep)))]
        flat = e.op(op_type, [e.op("Reshape", [x, e.ints([-1])])], axis=0, keepdims=0)
        if keep:   # a 1 per dim of x
            return [e.op("Reshape", [flat, e.ints([1] * node.inputs[0].ndim)])]
        return [flat]
    return export


def _from_onnx_arg(name: str):
    def convert(b, xs, attrs):
        """ArgMax and ArgMin; ``select_last_index`` is the first index of the flipped dim,
        counted from the end."""
        x = xs[0]
        dim = b.dim(attrs.get("axis", 0), x.ndim)
        keep = bool(attrs.get("keepdims", 1))
        if not attrs.get("select_last_index", 0):
            return b.op(name, x, dim=dim, keepdim=keep)
        first = b.op(name, b.op("flip", x, dims=(dim,)), dim=dim, keepdim=keep)
        return b.op("sub", x.shape[dim] - 1, first)
    return convert


ARGMAX = defop("argmax", _arg_kernel(np.argmax), _infer_arg, attrs=("dim", "keepdim"),
               onnx=_onnx_arg("ArgMax"),
               onnx_import={"ArgMax": _from_onnx_arg("argmax")})
ARGMIN = defop("argmin", _arg_kernel(np.argmin), _infer_arg, attrs=("dim", "keepdim"),
               onnx=_onnx_arg("ArgMin"),
               onnx_import={"ArgMin": _from_onnx_arg("argmin")})


def argmax(input, dim=None, keepdim=False):
    """Index of the (first) largest value along ``dim``; over the flattened tensor when
    ``dim`` is None. As ``torch.argmax``."""
    d = None if dim is None else normalize_dim(dim, input.ndim)
    return apply(ARGMAX, input, dim=d, keepdim=bool(keepdim))


def argmin(input, dim=None, keepdim=False):
    """Index of the (first) smallest value along ``dim``, as ``torch.argmin``."""
    d = None if dim is None else normalize_dim(dim, input.ndim)
    return apply(ARGMIN, input, dim=d, keepdim=bool(keepdim))


# -- variance and standard deviation (composites) ------------------------------------------------
def _correction(dim, unbiased, correction):
    """torch's spellings: ``correction=`` (default 1), legacy ``unbiased=`` (bool), and the
    legacy positional ``var(x, False)`` where the bool takes ``dim``'s place."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError("var/std: pass either unbiased= or correction=, not both")
    if correction is None:
        correction = 1 if unbiased is None else int(bool(unbiased))
    return dim, correction


def _var_kernel(x, dims, keepdim, correction):
    """The steps of :func:`_var_composite` on arrays (the same bits), in one op."""
    w = _widen(x)
    centred = w - _mean_kernel(w, dims, True)
    n = math.prod(w.shape[d] for d in dims)
    dof = _max(n - correction, 0)
    with np.errstate(divide="ignore", invalid="ignore"):   # (dof 0: inf or nan, as torch)
        drift = np.add.reduce(centred, axis=dims, keepdims=keepdim)
        total = np.add.reduce(centred * centred, axis=dims, keepdims=keepdim) - drift * (
            drift / n)
        return np.asarray(np.maximum(total, 0) / dof).astype(x.dtype, copy=False)


def _var_composite(x, dims, keepdim, correction):
    """The variance from sum, mean and elementwise ops (the op's decomposition): the
    corrected two-pass sum ``sum(d * d) - sum(d) * sum(d) / n`` of ``d = x - mean``, whose
    second term takes out the rounding error of the mean, so that equal values have
    exactly variance 0, as torch's Welford sums give (and ``std``'s gradient there 0)."""
    w = x.float() if x.element_size() < 4 else x
    centred = w - mean(w, dims, keepdim=True)
    n = _reduced_size(w, dims)
    dof = _max(n - correction, 0) if isinstance(n, int) else n - correction
    drift = sum(centred, dims, keepdim)
    total = sum(centred * centred, dims, keepdim) - drift * (drift / n)
    return (ew.maximum(total, 0.0) / dof).to(x.dtype)


def _var_vjp(g, out, x, dims, keepdim, correction):
    """torch's ``var_backward``: ``2 / dof * g * (x - mean(x))``."""
    n = _reduced_size(x, dims)
    dof = _max(n - correction, 0) if isinstance(n, int) else n - correction
    scale = (2 / dof if dof else math.inf) if isinstance(dof, int) else 2 / dof
    centred = x - mean(x, dims, keepdim=True)
    return _expand_back(g, tuple(x.shape), dims, keepdim) * (centred * scale)


def _onnx_var(e, node):
    """The kernel's formula: the corrected two-pass sum ``sum(d * d) - sum(d) * sum(d) / n``
    of ``d = x - mean(x)``, clamped at 0, over ``max(n - correction, 0)``, half precision
    computed in float32. The plain ``sum(d * d)`` (torch's export) leaves the mean's
    rounding error in: ``n * err**2``, 1e-6 relative at float32 values near 1e4, and a
    std above 0 for equal values. The count is read from the input's shape, so a
    dynamic batch exports too."""
    dims, keep = node.attrs["dims"], node.attrs["keepdim"]
    dtype = node.outputs[0].dtype
    wide = np.float32 if np.dtype(dtype).itemsize < 4 else dtype
    x = e.input(0) if wide == dtype else e.cast(e.input(0), wide)
    centred = e.op("Sub", [x, e.reduce("ReduceMean", x, dims, True)])
    sizes = e.op("Gather", [e.op("Shape", [x]), e.ints(dims)])
    count = e.cast(e.reduce("ReduceProd", sizes, [0], False), wide)
    drift = e.reduce("ReduceSum", centred, dims, keep)
    total = e.op("Sub", [e.reduce("ReduceSum", e.op("Mul", [centred, centred]), dims, keep),
                         e.op("Mul", [drift, e.op("Div", [drift, count])])])
    dof = e.op("Max", [e.op("Sub", [count, e.scalar(node.attrs["correction"], wide)]),
                       e.scalar(0, wide)])
    out = e.op("Div", [e.op("Max", [total, e.scalar(0, wide)]), dof])
    return [out if wide == dtype else e.cast(out, dtype)]


# One op, not the composite's five forward and some ten backward dispatches: a BatchNorm or
# LayerNorm written by hand calls it at every step
VAR = defop("var", _var_kernel, _infer_reduce, vjp=_var_vjp,
            attrs=("dims", "keepdim", "correction"), decomposition=_var_composite,
            onnx=_onnx_var, autocast="float32",
            doc="The variance over ``dims`` (the centred squares' sum over the count less "
                "``correction``).")


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Variance over ``dim`` with ``correction`` (1: unbiased, Bessel's; 0: population),
    as ``torch.var``. Half-precision inputs are computed in float32.

    >>> dg.tensor([1.0, 2.0, 3.0, 4.0]).var()
    tensor(1.6667)
    """
    _require_float(input, "var")
    dim, correction = _correction(dim, unbiased, correction)
    return apply(VAR, input, dims=normalize_dims(dim, input.ndim), keepdim=bool(keepdim),
                 correction=correction)


def _sqrt_of_variance(v):
    """``sqrt(v)`` whose gradient is 0 where ``v`` is 0 (torch's ``std_backward``), not the
    NaN that ``sqrt``'s infinite slope times ``var``'s zero slope would give."""
    return ew.where(ew.eq(v, 0), 0.0, ew.sqrt(_nonzero_or_one(v)))


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """Standard deviation: the square root of :func:`var` (same arguments); its gradient
    where all the values are equal is 0, as torch's."""
    return _sqrt_of_variance(var(input, dim, unbiased, keepdim, correction=correction))


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` over ``dim``, as ``torch.var_mean``."""
    dim, correction = _correction(dim, unbiased, correction)
    return var(input, dim, keepdim=keepdim, correction=correction), mean(input, dim, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` over ``dim``, as ``torch.std_mean``."""
    v, m = var_mean(input, dim, unbiased, keepdim, correction=correction)
    return _sqrt_of_variance(v), m


# -- logsumexp and norms -----------------------------------------------------------------------
def _logsumexp_kernel(x, dims, keepdim):
    w = _widen(x)
    peak = np.amax(w, axis=dims, keepdims=True, initial=-np.inf)   # (empty: -inf, as torch)
    peak = np.where(np.isfinite(peak), peak, 0)  # all -inf stays -inf, +inf stays +inf
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(w - peak), axis=dims, keepdims=True)) + peak
    if not keepdim:
        out = np.squeeze(out, dims)
    return np.asarray(out).astype(x.dtype)


def _logsumexp_vjp(g, out, x, dims, keepdim):
    shape = tuple(x.shape)
    weights = ew.exp(x - _expand_back(out, shape, dims, keepdim))
    return _expand_back(g, shape, dims, keepdim) * weights


LOGSUMEXP = defop("logsumexp", _logsumexp_kernel, _infer_reduce, vjp=_logsumexp_vjp,
                  attrs=("dims", "keepdim"), saves="io",
                  onnx=_onnx_reduce("ReduceLogSumExp"),
                  onnx_import={"ReduceLogSumExp": _from_onnx_reduce(
                      _reduction("logsumexp", lambda dtype: -np.inf))},
                  autocast="float32")


def logsumexp(input, dim, keepdim=False):
    """``log(sum(exp(x)))`` over ``dim``, computed without overflow (the max is factored
    out), as ``torch.logsumexp``; integer inputs give the default float dtype."""
    x = input if input.is_floating_point() else input.to(dtypes.get_default_dtype())
    return apply(LOGSUMEXP, x, dims=_all_dims(dim, x.ndim), keepdim=bool(keepdim))


def _norm_kernel(x, ord, dims, keepdim):
    if ord == 2:   # (x * x: the same squares as |x| * |x|, without the pass of abs)
        w = _widen(x)
        return np.asarray(np.sqrt(np.add.reduce(w * w, axis=dims, keepdims=keepdim))
                          ).astype(x.dtype)
    a = np.abs(_widen(x))
    if ord == math.inf:
        r = np.amax(a, axis=dims, keepdims=keepdim)
    elif ord == -math.inf:
        r = np.amin(a, axis=dims, keepdims=keepdim)
    elif ord == 0:
        r = np.sum(a != 0, axis=dims, keepdims=keepdim)
    elif ord == 1:
        r = np.sum(a, axis=dims, keepdims=keepdim)
    else:
        r = np.sum(a ** ord, axis=dims, keepdims=keepdim) ** (1.0 / ord)
    return np.asarray(r).astype(x.dtype)


def _norm_vjp(g, out, x, ord, dims, keepdim):
    """torch's norm_backward: where the norm is 0 the gradient is 0 (not NaN); the
    infinity norms split the gradient among the tied largest (smallest) entries."""
    shape = tuple(x.shape)
    if ord == 0:
        return creation.zeros_like(x)
    ge = _expand_back(g, shape, dims, keepdim)
    if ord == 1:
        return ge * ew.sign(x)
    norm = _expand_back(out, shape, dims, keepdim)
    if math.isinf(ord):
        return _split_among(ge * ew.sign(x), ew.eq(ew.abs(x), norm), dims)
    if ord == 2:
        return ge * x / _nonzero_or_one(norm)
    scale = ew.sign(x) * ew.abs(x) ** (ord - 1) / _nonzero_or_one(norm) ** (ord - 1)
    return ge * scale


def _onnx_norm(e, node):
    """ReduceL1 / ReduceL2; other orders from their definitions (max |x|, min |x|, the
    count of nonzeros, (sum |x|^p)^(1/p))."""
    x, p, axes, keep = e.input(0), node.attrs["ord"], e.axes(), node.attrs["keepdim"]
    dtype = node.outputs[0].dtype
    if p in (1, 2):
        return [e.reduce({1: "ReduceL1", 2: "ReduceL2"}[p], x, axes, keep)]
    size = e.op("Abs", [x])
    if p in (np.inf, -np.inf):
        return [e.reduce("ReduceMax" if p > 0 else "ReduceMin", size, axes, keep)]
    if p == 0:
        nonzero = e.cast(e.op("Not", [e.op("Equal", [x, e.scalar(0, dtype)])]), dtype)
        return [e.reduce("ReduceSum", nonzero, axes, keep)]
    powered = e.op("Pow", [size, e.scalar(p, dtype, "p")])
    total = e.reduce("ReduceSum", powered, axes, keep)
    return [e.op("Pow", [total, e.scalar(1 / p, dtype, "inv_p")])]


# ONNX has ReduceL1 / ReduceL2 for ord 1 and 2; the other orders are exported decomposed.
NORM = defop("norm", _norm_kernel, lambda x, ord, dims, keepdim: _infer_reduce(x, dims, keepdim),
             vjp=_norm_vjp, attrs=("ord", "dims", "keepdim"), saves="io",
             onnx=_onnx_norm,
             onnx_import={"ReduceL1": _from_onnx_reduce(_reduction("norm", ord=1.0)),
                          "ReduceL2": _from_onnx_reduce(_reduction("norm", ord=2.0))},
             autocast="float32")


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    """The vector ``p``-norm over ``dim`` (all dims when None), as ``torch.norm``: ``p`` is
    a number, ``inf``/``-inf``, or ``"fro"`` (the 2-norm). Its gradient at 0 is 0.

    >>> dg.tensor([3.0, 4.0]).norm()
    tensor(5.)
    """
    x = _cast_arg(input, dtype)
    _require_float(x, "norm")
    if p is None or p == "fro":
        p = 2
    elif isinstance(p, str):
        raise ValueError(f"norm: p={p!r} is not supported; use a number, inf or 'fro'")
    return apply(NORM, x, ord=float(p), dims=normalize_dims(dim, x.ndim),
                 keepdim=bool(keepdim))



def norms(tensors, p=2.0) -> Tensor:
    """The ``p``-norm of each tensor of ``tensors`` (all entries), stacked into a 1-d
    tensor: ``stack([norm(t, p) for t in tensors])``, as torch's ``_foreach_norm`` (what
    ``clip_grad_norm_`` asks of every gradient). Where nothing records (eager arrays of one
    float dtype, no tracer, no profiler, no gradient history asked for) it runs ``norm``'s
    kernel on each array, the same bits without a dispatch per tensor, which on a model of
    many small parameters costs more than the arithmetic."""
    from .. import dispatch   # (the module: its profiler is set while one records)
    from ..autograd.tape import grad_mode
    ord = 2.0 if p is None or p == "fro" else float(p)
    dtype = tensors[0]._data.dtype if tensors else None
    plain = (bool(tensors) and dispatch.modes.tracer is None and dispatch.profiler is None
             and is_float(dtype))
    recording = grad_mode.enabled
    for t in tensors if plain else ():   # (this module's all/any are the ops)
        if (type(t._data) is not np.ndarray or t._data.dtype != dtype
                or recording and t.requires_grad):
            plain = False
            break
    if plain:
        try:
            return Tensor._make(np.stack([_norm_kernel(t._data, ord, tuple(range(t._data.ndim)),
                                                       False) for t in tensors]))
        except ValueError:   # (an infinity norm of an empty tensor: the op's error below)
            pass
    return shape_ops.stack([norm(t, p=ord) for t in tensors])

# -- cumulative sums and products --------------------------------------------------------------
def _cumsum_kernel(x, dim, reverse):
    w = _widen_running(x) if is_float(x.dtype) else x.astype(np.int64)
    if reverse and x.ndim:
        out = np.flip(np.cumsum(np.flip(w, dim), axis=dim), dim)
    else:
        out = np.cumsum(w, axis=dim).reshape(x.shape)   # (0-d: 0-d)
    if is_float(x.dtype):   # (torch's sums start from +0: theirs of -0.0 is +0.0)
        out += 0.0
    return out.astype(_acc_dtype(x.dtype))


def _infer_cumulative(x, dim, **attrs):
    return ShapedType(tuple(x.shape), _acc_dtype(x.dtype))


def _onnx_cumsum(e, node):
    x = e.input(0, node.outputs[0].dtype)
    axis = e.scalar(node.attrs["dim"], np.int64, "axis")
    return [e.op("CumSum", [x, axis], reverse=int(bool(node.attrs["reverse"])))]


def _from_onnx_cumsum(b, xs, attrs):
    x = xs[0]
    y = b.op(CUMSUM, x, dim=b.dim(b.ints(xs[1], "axis")[0], x.ndim),
             reverse=bool(attrs.get("reverse", 0)))
    if attrs.get("exclusive", 0):
        y = b.op("sub", y, x)
    return b.cast(y, x.dtype)


# The VJP of a running sum is the running sum from the other end; `reverse` (an attribute of
# ONNX CumSum too) gives it exactly, without flipping twice.
CUMSUM = defop("cumsum", _cumsum_kernel, _infer_cumulative, attrs=("dim", "reverse"), saves="",
               vjp=lambda g, out, x, dim, reverse: apply(CUMSUM, g, dim=dim,
                                                         reverse=not reverse),
               onnx=_onnx_cumsum,
               onnx_import={"CumSum": _from_onnx_cumsum},
               autocast="float32")


def cumsum(input, dim, *, dtype=None):
    """Running sum along ``dim``, as ``torch.cumsum`` (integers and bools give int64).

    >>> dg.tensor([1, 2, 3]).cumsum(0)
    tensor([1, 3, 6])
    """
    x = _cast_arg(input, dtype)
    out = apply(CUMSUM, x, dim=normalize_dim(dim, x.ndim), reverse=False)
    # (``dtype=torch.int16`` is the result's dtype too, where integers would give int64)
    return out if dtype is None or out.dtype == dtype else out.to(dtype)


def _cumprod_kernel(x, dim):
    w = _widen_running(x) if is_float(x.dtype) else x.astype(np.int64)
    return np.cumprod(w, axis=dim).reshape(x.shape).astype(_acc_dtype(x.dtype))


def _cumprod_vjp(g, out, x, dim):
    """grad_i = sum_{j >= i} g_j prod_{k <= j, k != i} x_k, as torch's, also where ``x``
    has zeros. Before the first zero of a row it is sum_{j >= i} g_j out_j / x_i; at the
    first zero it is sum_{j >= i} g_j out'_j, out' the running product with that zero read
    as 1; after it every product holds that zero, so 0."""
    zeros = ew.eq(x, 0)
    seen = apply(CUMSUM, zeros, dim=dim, reverse=False)
    before, first = ew.eq(seen, 0), ew.logical_and(zeros, ew.eq(seen, 1))
    divided = apply(CUMSUM, g * out, dim=dim, reverse=True) / ew.where(before, x, 1.0)
    skipped = apply(CUMSUM, g * apply(CUMPROD, ew.where(first, 1.0, x), dim=dim), dim=dim,
                    reverse=True)
    return ew.where(before, divided, ew.where(first, skipped, 0.0))


def _onnx_running(combine, start):
    """An export of a running combination along the node's dim as an ONNX Scan carrying
    the running value (ONNX has no CumProd, no LogCumSumExp): ``combine(sub, carry, x,
    dtype)`` builds the next carry in the body from a carry of ``start`` (the
    combination's neutral value), so the combinations come in the same order as the
    kernel's, in float32 for half-precision inputs as the kernel computes them."""
    def export(e, node):
        x, dim, out = node.inputs[0], node.attrs["dim"], node.outputs[0].dtype
        if [d for d in x.shape if not isinstance(d, int)]:   # (any is this module's any)
            raise e.fail(f"{node.op.name} of symbolic shape {tuple(x.shape)}",
                         "export it static")
        wide = np.dtype(np.float32) if out.kind in "fV" and out.itemsize < 4 else out
        row = ShapedType(tuple(d for k, d in enumerate(x.shape) if k != dim), wide)

        def body(sub, formal):
            combined = combine(sub, *formal, wide)
            return [(combined, row), (combined, row)]
        proto = e.subgraph(e.body_name("body"), [("carry", row), ("x", row)], body)
        carry = e.const(np.full(row.shape, start, wide), "start")
        _, running = e.outputs("Scan", [carry, e.input(0, wide)], 2, body=proto,
                               num_scan_inputs=1, scan_input_axes=[dim],
                               scan_output_axes=[dim])
        return [running if wide == out else e.cast(running, out)]
    return export


def _from_onnx_cumprod(b, xs, attrs):
    """CumProd: ``reverse`` runs it on the flipped dim; ``exclusive`` shifts the products one
    place, a 1 first."""
    x = xs[0]
    dim = b.dim(b.ints(xs[1], "axis")[0], x.ndim)
    if attrs.get("reverse", 0):
        x = b.op("flip", x, dims=(dim,))
    if attrs.get("exclusive", 0) and x.shape[dim] != 0:
        index = [None] * x.ndim
        index[dim] = (0, x.shape[dim] - 1, 1)
        ones = b.op("full_like", b.slice_dims(x, [(0, 1, 1) if k == dim else None
                                                  for k in range(x.ndim)]),
                    fill_value=1, dtype=x.dtype)
        x = b.op("cat", ones, b.slice_dims(x, index), dim=dim)
    y = b.cast(b.op(CUMPROD, x, dim=dim), x.dtype)
    return b.op("flip", y, dims=(dim,)) if attrs.get("reverse", 0) else y


CUMPROD = defop("cumprod", _cumprod_kernel, _infer_cumulative, vjp=_cumprod_vjp,
                attrs=("dim",), saves="io",
                onnx=_onnx_running(lambda sub, carry, x, dtype: sub.op("Mul", [carry, x]),
                                   1),
                onnx_import={"CumProd": _from_onnx_cumprod},
                autocast="float32")


def cumprod(input, dim, *, dtype=None):
    """Running product along ``dim``, as ``torch.cumprod``."""
    x = _cast_arg(input, dtype)
    return apply(CUMPROD, x, dim=normalize_dim(dim, x.ndim))


def _logcumsumexp_kernel(x, dim):
    return np.logaddexp.accumulate(_widen_running(x), axis=dim).astype(x.dtype)


def _logcumsumexp_vjp(g, out, x, dim):
    """torch's: the gradient's positive and negative parts, each through a reverse
    logcumsumexp of ``log|g| - out``, so no exponential overflows."""
    def reverse(t):
        return shape_ops.flip(apply(LOGCUMSUMEXP, shape_ops.flip(t, (dim,)), dim=dim), (dim,))
    lowest = float(np.finfo(dtypes.to_np(g.dtype)).min)
    log_abs = ew.log(_nonzero_or_one(ew.abs(g)))   # (a zero's part is `lowest` below)
    parts = [ew.exp(reverse(ew.where(sign, log_abs, lowest) - out) + x)
             for sign in (ew.gt(g, 0), ew.lt(g, 0))]
    return parts[0] - parts[1]


LOGCUMSUMEXP = defop("logcumsumexp", _logcumsumexp_kernel,
                     lambda x, dim: ShapedType(tuple(x.shape), x.dtype),
                     vjp=_logcumsumexp_vjp, attrs=("dim",), saves="io",
                     onnx=_onnx_running(ew.onnx_logaddexp, -np.inf),
                     autocast="float32")


def logcumsumexp(input, dim):
    """``log(cumsum(exp(x)))`` along ``dim`` without overflow or underflow (a running
    ``logaddexp``), as ``torch.logcumsumexp``.

    >>> dg.tensor([0.0, 0.0]).logcumsumexp(0)
    tensor([0.0000, 0.6931])
    """
    _require_float(input, "logcumsumexp")
    if input.ndim == 0:
        return apply(LOGCUMSUMEXP, shape_ops.reshape(input, (1,)), dim=0).reshape(())
    return apply(LOGCUMSUMEXP, input, dim=normalize_dim(dim, input.ndim))


# -- logical reductions ------------------------------------------------------------------------
def _infer_bool_reduce(x, dims, keepdim):
    return ShapedType(reduced_shape(tuple(x.shape), dims, keepdim), np.dtype(np.bool_))


def _onnx_logical_reduce(op_type: str):
    """any / all: ReduceMax / ReduceMin of the truth values as int32 (bool reductions
    arrive in opset 20)."""
    def export(e, node):
        zero = e.scalar(0, node.inputs[0].dtype, "zero")
        truth = e.cast(e.op("Not", [e.op("Equal", [e.input(0), zero])]), np.int32)
        return [e.cast(e.reduce(op_type, truth, e.axes(), node.attrs["keepdim"]), np.bool_)]
    return export


# No ONNX op reduces booleans directly; export casts and uses ReduceMin / ReduceMax.
ALL = defop("all", lambda x, dims, keepdim: np.all(x, axis=dims, keepdims=keepdim),
            _infer_bool_reduce, attrs=("dims", "keepdim"),
            onnx=_onnx_logical_reduce("ReduceMin"),
            reduction=Reduction.ALL)
ANY = defop("any", lambda x, dims, keepdim: np.any(x, axis=dims, keepdims=keepdim),
            _infer_bool_reduce, attrs=("dims", "keepdim"),
            onnx=_onnx_logical_reduce("ReduceMax"),
            reduction=Reduction.ANY)


def all(input, dim=None, keepdim=False):
    """True where every element over ``dim`` is nonzero, as ``torch.all``."""
    return _logical(ALL, input, dim, keepdim)


def any(input, dim=None, keepdim=False):
    """True where some element over ``dim`` is nonzero, as ``torch.any``."""
    return _logical(ANY, input, dim, keepdim)


def _logical(op, input, dim, keepdim):
    """all/any: bool, but uint8 for a uint8 input (torch keeps its old byte masks so)."""
    out = apply(op, input, dims=normalize_dims(dim, input.ndim), keepdim=bool(keepdim))
    return out.to(dtypes.uint8) if input.dtype == dtypes.uint8 else out


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    """Whether ``isclose`` holds everywhere (a Python bool), as ``torch.allclose``.

    >>> dg.allclose(dg.tensor([1.0, 2.0]), dg.tensor([1.0, 2.0 + 1e-7]))
    True
    """
    return bool(all(ew.isclose(input, other, rtol, atol, equal_nan)))


def equal(input, other) -> bool:
    """Whether the two tensors have the same shape and the same values (a Python bool), as
    ``torch.equal``."""
    return tuple(input.shape) == tuple(other.shape) and bool(all(ew.eq(input, other)))


def count_nonzero(input, dim=None):
    """The number of nonzero elements over ``dim`` (int64), as ``torch.count_nonzero``."""
    return sum(ew.ne(input, 0), dim)


# -- softmax -----------------------------------------------------------------------------------
# The row loops run at every float32 size (from one element): NumPy's form is five to eight
# calls and temporaries, which cost more than the loop's one call below a few thousand
# elements too (the log-softmax of a small classifier's batch, a small attention matrix).
def _softmax_kernel(log):
    def kernel(x, dim, out=None):
        if x.ndim and dim in (-1, x.ndim - 1) and kernels.enabled(x, min_elements=1):
            y = empty_into(out, x.shape, x.dtype)
            loop = kernels.normalization.log_softmax if log else kernels.normalization.softmax
            rows = kernels.rows(x, x.shape[-1])
            run_rows(loop, len(rows), rows, y.reshape(rows.shape), threads=threads_for(x.size))
            return y
        # One fresh buffer, updated in place: these run on every attention score matrix.
        w = _widen(x)
        y = np.asarray(w - np.amax(w, axis=dim, keepdims=True, initial=-np.inf))   # (0-d:
        #                                        still an array; empty: empty, as torch's)
        if log:
            y -= np.log(np.sum(np.exp(y), axis=dim, keepdims=True))
        else:
            np.exp(y, out=y)
            y /= np.sum(y, axis=dim, keepdims=True)
        return y.astype(x.dtype, copy=False)
    return kernel


# The backwards are ops of their own (one pass per row instead of four full-array ops on
# every attention score matrix and every loss); written with ops, they are the composites.
def _softmax_backward_composite(g, out, dim):
    return out * (g - sum(g * out, dim, keepdim=True))


def _log_softmax_backward_composite(g, out, dim):
    return g - ew.exp(out) * sum(g, dim, keepdim=True)


def _softmax_backward_kernel(log):
    def kernel(g, y, dim, out=None):   # (y: the softmax's output)
        if y.ndim == 0:   # (a 0-d softmax: NumPy's ops on 0-d arrays give scalars)
            return kernel(g.reshape(1), y.reshape(1), 0).reshape(())
        if y.ndim and dim == y.ndim - 1 and kernels.enabled(y, g, min_elements=1):
            width = y.shape[-1]
            dx = empty_into(out, y.shape, y.dtype)
            loop = (kernels.normalization.log_softmax_backward if log else
                    kernels.normalization.softmax_backward)
            rows = kernels.rows(y, width)
            if g.shape != y.shape:   # (np.broadcast_to costs more than the loop here)
                g = np.broadcast_to(g, y.shape)
            run_rows(loop, len(rows), kernels.rows(g, width), rows,
                     dx.reshape(rows.shape), threads=threads_for(y.size))
            return dx
        gw, ow = _widen(g), _widen(y)
        if log:
            dx = np.exp(ow)
            dx *= np.sum(gw, axis=dim, keepdims=True)
            np.subtract(gw, dx, out=dx)
        else:
            dx = gw * ow
            np.subtract(gw, np.sum(dx, axis=dim, keepdims=True), out=dx)
            dx *= ow
        return dx.astype(y.dtype, copy=False)
    return kernel


def _backward_vjp(composite):
    """Second derivatives: autodiff of the composite form of a backward op."""
    def vjp(gg, dx, g, out, dim):
        from ..autograd.engine import grad
        from ..autograd.tape import enable_grad
        with enable_grad():
            leaves = [t.detach().requires_grad_() for t in (g, out)]
            return grad(composite(*leaves, dim), leaves, gg, create_graph=True,
                        allow_unused=True)
    return vjp


def _infer_softmax_backward(g, out, dim):
    return ShapedType(tuple(out.shape), out.dtype)


SOFTMAX_BACKWARD = defop("softmax_backward", _softmax_backward_kernel(False),
                         _infer_softmax_backward,
                         compiler_only=True,
                         decomposition=_softmax_backward_composite,
                         vjp=_backward_vjp(_softmax_backward_composite), attrs=("dim",),
                         saves="i", onnx=None, fills_out=True)
LOG_SOFTMAX_BACKWARD = defop("log_softmax_backward", _softmax_backward_kernel(True),
                             _infer_softmax_backward,
                             compiler_only=True,
                             decomposition=_log_softmax_backward_composite,
                             vjp=_backward_vjp(_log_softmax_backward_composite),
                             attrs=("dim",), saves="i", onnx=None, fills_out=True)
def _onnx_softmax(op_type: str):
    def export(e, node):
        return [e.op(op_type, [e.input(0)], axis=node.attrs["dim"])]
    return export


def _from_onnx_softmax(name: str):
    def convert(b, xs, attrs):
        x = xs[0]
        dim = b.dim(attrs.get("axis", -1 if b.opset >= 13 else 1), x.ndim)
        if b.opset >= 13 or dim == x.ndim - 1:
            if name == "softmax" and x.dtype.kind == "f" and x.dtype.itemsize < 4:
                # ONNX's Softmax is its function body, each step rounded to float16 (the
                # reference's values); dualgraph's softmax rounds once from float32.
                e = b.op("exp", b.op("sub", x, b.op("amax", x, dims=(dim,), keepdim=True)))
                return b.op("div", e, b.op("sum", e, dims=(dim,), keepdim=True, dtype=x.dtype))
            return b.op(name, x, dim=dim)
        # before opset 13 the input is taken as a matrix [prod(dims < axis), prod(rest)]
        flat = b.reshape(x, (numel(x.shape[:dim]), numel(x.shape[dim:])))
        return b.reshape(b.op(name, flat, dim=1), x.shape)
    return convert


SOFTMAX = defop("softmax", _softmax_kernel(False), lambda x, dim: ShapedType(tuple(x.shape),
                                                                             x.dtype),
                vjp=lambda g, out, x, dim: apply(SOFTMAX_BACKWARD, g, out, dim=dim),
                attrs=("dim",), saves="o", fills_out=True,
                onnx=_onnx_softmax("Softmax"),
                onnx_import={"Softmax": _from_onnx_softmax("softmax")},
                autocast="float32")
LOG_SOFTMAX = defop("log_softmax", _softmax_kernel(True),
                    lambda x, dim: ShapedType(tuple(x.shape), x.dtype),
                    vjp=lambda g, out, x, dim: apply(LOG_SOFTMAX_BACKWARD, g, out, dim=dim),
                    attrs=("dim",), saves="o", fills_out=True,
                    onnx=_onnx_softmax("LogSoftmax"),
                    onnx_import={"LogSoftmax": _from_onnx_softmax("log_softmax")},
                    autocast="float32")


def _softmax_like(op, name, input, dim, dtype):
    x = _cast_arg(input, dtype)
    if dim is None:
        # torch's deprecated implicit choice, which old programs still rely on
        dim = 0 if x.ndim in (0, 1, 3) else 1
        warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the "
                      f"call to include dim=X as an argument.", stacklevel=4)
    _require_float(x, name)
    return apply(op, x, dim=normalize_dim(dim, x.ndim))


def softmax(input, dim=None, dtype=None, _stacklevel=3):
    """``exp(x) / sum(exp(x))`` along ``dim``, computed stably (max subtracted), as
    ``torch.softmax``; ``dtype=`` casts the input first.

    >>> dg.tensor([0.0, 0.0]).softmax(-1)
    tensor([0.5000, 0.5000])
    """
    return _softmax_like(SOFTMAX, "softmax", input, dim, dtype)


def log_softmax(input, dim=None, dtype=None, _stacklevel=3):
    """``x - logsumexp(x, dim)`` along ``dim``, as ``torch.log_softmax``."""
    return _softmax_like(LOG_SOFTMAX, "log_softmax", input, dim, dtype)


METHODS = {
    "sum": sum, "mean": mean, "prod": prod, "max": max, "min": min, "amax": amax,
    "aminmax": aminmax,
    "amin": amin, "argmax": argmax, "argmin": argmin, "median": median, "var": var,
    "std": std, "logsumexp": logsumexp, "norm": norm, "cumsum": cumsum, "cumprod": cumprod,
    "all": all, "any": any, "count_nonzero": count_nonzero, "softmax": softmax,
    "log_softmax": log_softmax, "allclose": allclose, "equal": equal, "nansum": nansum,
    "nanmean": nanmean, "logcumsumexp": logcumsumexp,
}
