"""Shape ops: reshape/view, permute/transpose, expand, squeeze/unsqueeze, flatten, cat,
stack, split/chunk/narrow/unbind, repeat/tile, flip, roll, movedim.

Seven primitives carry everything: ``reshape``, ``expand``, ``permute``, ``slice`` and
``select`` (one position of a dim, the dim dropped: ``x[i]``, unbind) are views (they share
storage with their input in eager mode, ``view=True``); ``slice_update`` (write a block into
a copy, the VJP partner of ``slice``), ``cat`` and ``flip`` copy. The rest are composites:
transpose is a permute, squeeze/flatten are reshapes, split/chunk/narrow are slices, unbind
is selects, roll is slices + cat; ``stack`` is one op (a cat of unsqueezes to the passes). (``pad`` lives in ops/index.py:
it needs both families.)
"""
from __future__ import annotations

import functools

import numpy as np

from .. import dtypes
from ..dispatch import OpError, apply, user_location
from ..shapes import (ShapedType, ShapeError, Sym, broadcast_shapes, infer_reshape,
                      is_static, normalize_dim, normalize_dims, numel)
from . import creation, views
from ._util import broadcast_view, cast, needs_grad, size_cases, sum_to
from .opdef import defop

__all__ = ["reshape", "expand", "broadcast_to", "permute", "transpose", "swapaxes",
           "swapdims", "t", "squeeze", "unsqueeze", "flatten", "unflatten", "cat", "concat",
           "concatenate", "stack", "split", "chunk", "unbind", "narrow", "select",
           "tile", "flip", "roll", "movedim", "moveaxis"]


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    if is_static(shape):   # (the common case: nothing to convert)
        return tuple(shape)
    return tuple(int(d) if not hasattr(d, "name") else d for d in shape)


# -- reshape, expand, permute (views) -------------------------------------------------------
def _reshape_kernel(x, shape):
    return x.reshape(shape)


def _onnx_reshape(e, node):
    """A traced reshape's target shape may hold symbolic dims: a dim equal to the input's
    at the same position becomes ONNX's 0 ("copy"), one other becomes -1."""
    x = node.inputs[0]
    target = []
    for k, d in enumerate(node.attrs["shape"]):
        if isinstance(d, Sym) or not isinstance(d, (int, np.integer)):
            d = 0 if k < x.ndim and x.shape[k] == d else -1
        target.append(int(d))
    if target.count(-1) > 1:
        raise e.fail(f"the target shape {node.attrs['shape']} has several dims that depend "
                     f"on the input shape {x.shape}",
                     "keep those dims static (no dynamic_axes on them)")
    return [e.op("Reshape", [e.input(0), e.ints(target)])]


# ONNX's Reshape, Flatten, Squeeze and Unsqueeze are each one reshape (``b.reshape``: none
# where the shape stays)
def _from_onnx_reshape(b, xs, attrs):
    x = xs[0]
    if b.opset < 5 and "shape" not in attrs:
        raise b.error("Reshape before opset 5 needs its shape attr")
    shape = list(attrs["shape"]) if b.opset < 5 else b.ints(xs[1], "target shape", shape=True)
    if not attrs.get("allowzero", 0):
        if any(type(d) is int and d == 0 for d in shape[x.ndim:]):
            raise b.error(f"the target shape {shape} copies (with a 0) a dim past the input's "
                          f"{x.ndim} dims (shape {tuple(x.shape)})")
        shape = [x.shape[i] if type(d) is int and d == 0 else d for i, d in enumerate(shape)]
    return b.reshape(x, shape)


def _from_onnx_flatten(b, xs, attrs):
    x = xs[0]
    axis = attrs.get("axis", 1)
    if not -x.ndim <= axis <= x.ndim:
        raise b.error(f"axis {axis} is out of range for a tensor with {x.ndim} dims")
    axis = axis + x.ndim if axis < 0 else axis
    return b.reshape(x, (numel(x.shape[:axis]), numel(x.shape[axis:])))


def _from_onnx_squeeze(b, xs, attrs):
    x = xs[0]
    axes = b.attr_or_input(attrs, "axes", xs, 1, since=13)
    dims = b.dims(axes, x.ndim) if axes else [i for i, d in enumerate(x.shape) if d == 1]
    return b.reshape(x, [d for i, d in enumerate(x.shape) if i not in dims])


def _from_onnx_unsqueeze(b, xs, attrs):
    x = xs[0]
    axes = b.attr_or_input(attrs, "axes", xs, 1, since=13)
    if not axes:
        raise b.error("Unsqueeze needs axes")
    dims = b.dims(axes, x.ndim + len(axes))
    if len(dims) != len(axes):
        raise b.error(f"Unsqueeze's axes {axes} name a dim twice")
    rest = iter(x.shape)
    return b.reshape(x, [1 if i in dims else next(rest) for i in range(x.ndim + len(dims))])


RESHAPE = defop("reshape", _reshape_kernel,
                lambda x, shape: ShapedType(infer_reshape(tuple(x.shape), shape), x.dtype),
                vjp=lambda g, out, x, shape: reshape(g, tuple(x.shape)),
                attrs=("shape",), saves="", view=True, elementwise=None,
                view_layout=lambda x, shape: np.reshape(x, shape, copy=False),
                onnx=_onnx_reshape,
                onnx_import={"Reshape": _from_onnx_reshape, "Flatten": _from_onnx_flatten,
                             "Squeeze": _from_onnx_squeeze, "Unsqueeze": _from_onnx_unsqueeze},
                shape_fold=_reshape_kernel)


def reshape(x, *shape):
    """``x`` with a new shape of the same number of elements; one dim may be -1."""
    data = x._data
    current = tuple(data.shape)
    if type(data) is np.ndarray:
        try:   # (eager shapes are ints: the target is a pure function of them, cached)
            shape = _eager_target(current, shape)
        except TypeError:   # (an unhashable argument: a list)
            shape = infer_reshape(current, _shape_arg(shape))
    else:
        shape = infer_reshape(current, _shape_arg(shape))
    if shape == current:
        return x
    out = apply(RESHAPE, x, shape=shape)
    if type(data) is np.ndarray and data.flags.c_contiguous and data.size:
        return out   # (a row-major array reshapes without a copy: nothing to check)
    return views.own_if_copied(out)


@functools.lru_cache(maxsize=1024)
def _eager_target(current: tuple, args: tuple) -> tuple:
    """The shape ``reshape(x, *args)`` gives an array of shape ``current`` (the -1
    resolved, the element count checked; asked at every reshape, view and unsqueeze)."""
    return infer_reshape(current, _shape_arg(args))


def _infer_expand(x, shape):
    xs = tuple(x.shape)
    if len(shape) < len(xs):
        raise ShapeError(f"expand: the new shape {shape} has fewer dims than the tensor "
                         f"{xs}")
    lead = len(shape) - len(xs)
    for i, d in enumerate(xs):
        if d != 1 and shape[lead + i] != d:
            raise ShapeError(f"expand: can't expand shape {xs} to {shape}: dim {lead + i} "
                             f"is {d}, which is not 1")
    return ShapedType(tuple(shape), x.dtype)


def _onnx_expand(e, node):
    """ONNX's Expand broadcasts: a target dim equal to the input's (or -1) becomes 1, and
    a symbolic one where the input has 1 (``arange(t).expand(x.shape[0], t)`` for a
    dynamic batch) is read from the model input that has it (``e.shape``)."""
    x, shape = node.inputs[0], node.attrs["shape"]
    lead = len(shape) - x.ndim
    target = []
    for k, d in enumerate(shape):
        if not isinstance(d, (int, np.integer)) or d == -1:
            if d == -1 or k >= lead and x.shape[k - lead] == d:
                d = 1
            elif k >= lead and x.shape[k - lead] != 1:
                raise e.fail(f"the symbolic target dim {d} is not the input's dim "
                             f"{x.shape[k - lead]}", "keep that dim static")
        target.append(d if isinstance(d, Sym) else int(d))
    return [e.op("Expand", [e.input(0), e.shape(target)])]


def _from_onnx_expand(b, xs, attrs):
    x = xs[0]
    shape = broadcast_shapes(tuple(x.shape), tuple(b.ints(xs[1], "shape", shape=True)))
    return x if shape == tuple(x.shape) else b.op(EXPAND, x, shape=shape)


EXPAND = defop("expand", broadcast_view, _infer_expand,
               vjp=lambda g, out, x, shape: sum_to(g, tuple(x.shape)),
               attrs=("shape",), saves="", view=True,
               onnx=_onnx_expand,
               onnx_import={"Expand": _from_onnx_expand},
               shape_fold=lambda x, shape: np.broadcast_to(x, shape))


def expand(x, *shape):
    """Broadcast ``x`` to ``shape`` without copying; -1 keeps a dim."""
    shape = _shape_arg(shape)
    lead = len(shape) - x.ndim
    shape = tuple(x.shape[i - lead] if d == -1 else d for i, d in enumerate(shape))
    if shape == tuple(x.shape):
        return x
    return apply(EXPAND, x, shape=shape)


def broadcast_to(x, shape):
    return expand(x, tuple(shape))


@functools.lru_cache(maxsize=256)
def _inverse_perm(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _from_onnx_transpose(b, xs, attrs):
    x = xs[0]
    perm = tuple(attrs.get("perm", range(x.ndim - 1, -1, -1)))
    if sorted(perm) != list(range(x.ndim)):
        raise b.error(f"perm {list(perm)} is not an order of the {x.ndim} dims of the input "
                      f"(shape {tuple(x.shape)})")
    return x if perm == tuple(range(x.ndim)) else b.op(PERMUTE, x, perm=perm)


PERMUTE = defop("permute", lambda x, perm: x.transpose(perm),   # (np.transpose: a wrapper's ~1 us)
                lambda x, perm: ShapedType(tuple(x.shape[p] for p in perm), x.dtype),
                vjp=lambda g, out, x, perm: apply(PERMUTE, g, perm=_inverse_perm(perm)),
                attrs=("perm",), saves="", view=True,
                onnx=lambda e, node: [e.op("Transpose", [e.input(0)],
                                           perm=list(node.attrs["perm"]))],
                onnx_import={"Transpose": _from_onnx_transpose})


def permute(x, *dims):
    """``x`` with its dims reordered: output dim i is input dim ``dims[i]`` (a view)."""
    ndim = x._data.ndim
    try:
        try:   # (the dims as given, cached; a list is unhashable)
            perm = _permutation(dims, ndim)
        except TypeError:
            perm = _permutation(_shape_arg(dims), ndim)
    except ShapeError as e:
        raise ShapeError(f"{e} (shape {tuple(x.shape)})") from None
    if perm is None:
        return x
    return apply(PERMUTE, x, perm=perm)


@functools.lru_cache(maxsize=1024)
def _permutation(dims: tuple, ndim: int):
    """``dims`` (``permute``'s arguments: ints, or one tuple of them) of a tensor with
    ``ndim`` dims, checked and made non-negative; None for the identity. (Cached: a pure
    function of its arguments, asked at every permute.)"""
    dims = _shape_arg(dims)
    if len(dims) != ndim:
        raise ShapeError(f"permute: got {len(dims)} dims {dims} for a tensor with {ndim} "
                         f"dims")
    perm = tuple(normalize_dim(d, ndim) for d in dims)
    if sorted(perm) != list(range(ndim)):
        raise ShapeError(f"permute: {dims} is not a permutation of the dims of a tensor "
                         f"with {ndim} dims")
    return None if perm == tuple(range(ndim)) else perm


# -- permute composites ---------------------------------------------------------------------
def transpose(x, dim0, dim1):
    """``x`` with dims ``dim0`` and ``dim1`` swapped (a view)."""
    perm = _swapped(x._data.ndim, dim0, dim1)
    return x if perm is None else apply(PERMUTE, x, perm=perm)


@functools.lru_cache(maxsize=256)
def _swapped(ndim: int, dim0, dim1):
    """The permutation that swaps two dims, None where they are one dim (cached as
    ``_permutation``)."""
    d0, d1 = normalize_dim(dim0, ndim), normalize_dim(dim1, ndim)
    if d0 == d1:
        return None
    perm = list(range(ndim))
    perm[d0], perm[d1] = d1, d0
    return tuple(perm)


swapaxes = swapdims = transpose


def t(x):
    """The transpose of a matrix; 0-d and 1-d tensors are returned as they are."""
    ndim = x._data.ndim
    if ndim > 2:
        raise ShapeError(f"t() expects a tensor with <= 2 dims, got shape {tuple(x.shape)}; "
                         "use transpose(dim0, dim1) or .mT")
    return apply(PERMUTE, x, perm=(1, 0)) if ndim == 2 else x


def _matrix_transpose(x):
    if x.ndim < 2:
        raise ShapeError(f".mT needs a tensor with at least 2 dims, got shape "
                         f"{tuple(x.shape)}")
    return transpose(x, -2, -1)


def movedim(x, source, destination):
    """Move dims ``source`` to positions ``destination`` (ints or sequences), keeping the
    order of the other dims."""
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise ValueError(f"movedim: source {src} and destination {dst} must have the same "
                         "number of dims")
    src = [normalize_dim(d, x.ndim) for d in src]
    dst = [normalize_dim(d, x.ndim) for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"movedim: repeated dim in source {src} or destination {dst}")
    rest = iter(d for d in range(x.ndim) if d not in src)
    placed = dict(zip(dst, src))
    return permute(x, [placed[i] if i in placed else next(rest) for i in range(x.ndim)])


moveaxis = movedim


# -- reshape composites ---------------------------------------------------------------------
def squeeze(x, dim=None):
    """Drop size-1 dims: all of them, or those among ``dim`` (an int or a tuple)."""
    dims = normalize_dims(dim, x.ndim)
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if not (i in dims and d == 1)))


def unsqueeze(x, dim):
    """Insert a size-1 dim at ``dim`` (in ``[-x.ndim - 1, x.ndim]``)."""
    shape = tuple(x._data.shape)
    d = normalize_dim(dim, len(shape) + 1)
    return reshape(x, shape[:d] + (1,) + shape[d:])


def flatten(x, start_dim=0, end_dim=-1):
    """Merge dims ``start_dim..end_dim`` into one; a 0-d tensor becomes shape (1,)."""
    if x.ndim == 0:
        return reshape(x, (1,))
    s, e = normalize_dim(start_dim, x.ndim), normalize_dim(end_dim, x.ndim)
    if s > e:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = tuple(x.shape)
    merged = 1
    for d in shape[s:e + 1]:
        merged = merged * d
    return reshape(x, shape[:s] + (merged,) + shape[e + 1:])


def unflatten(x, dim, sizes):
    """Split dim ``dim`` into ``sizes`` (one of them may be -1)."""
    d = normalize_dim(dim, x.ndim)
    shape = tuple(x.shape)
    sizes = infer_reshape((shape[d],), tuple(sizes))
    return reshape(x, shape[:d] + sizes + shape[d + 1:])


def _bitcast_shape(shape: tuple, src: np.dtype, dst: np.dtype) -> tuple:
    """The shape of ``shape`` in ``src`` seen as ``dst``: the same, or the last dim scaled
    by the element sizes (torch's rule, and its errors)."""
    if src.itemsize == dst.itemsize:
        return shape
    names = f"{src.name} as {dst.name} (different element sizes)"
    if not shape:
        raise ValueError(f"view(dtype): a 0-d tensor can't view {names}")
    last = shape[-1] * src.itemsize
    if last % dst.itemsize:
        raise ValueError(f"view(dtype): the last dim, of size {shape[-1]}, must be divisible "
                         f"by {dst.itemsize // src.itemsize} to view {names}")
    return shape[:-1] + (last // dst.itemsize,)


def _bitcast_kernel(x, dtype):
    dt = np.dtype(dtype)
    _bitcast_shape(tuple(x.shape), x.dtype, dt)   # (its errors)
    try:
        return x.view(dt)   # (x's memory, as torch's: a write through either is seen by both)
    except ValueError:      # (elements of another size along a strided last dim: a copy)
        return np.array(x, order="C").view(dt)


# (no VJP: torch's view(dtype) is not differentiable, whatever the dtypes; a view of its
# input's memory, as torch's, but not an autograd view: ops/inplace.py)
BITCAST = defop("bitcast", _bitcast_kernel,
                lambda x, dtype: ShapedType(
                    _bitcast_shape(tuple(x.shape), np.dtype(x.dtype), np.dtype(dtype)),
                    np.dtype(dtype)),
                attrs=("dtype",), saves="", view=True)


def view(x, *shape):
    """``x`` with a new shape, sharing its storage, as torch's ``Tensor.view``. Where the
    elements are not laid out for the new shape (a transpose flattened), it raises as torch
    does, pointing at ``reshape`` (which copies): a silent copy would let writes through
    the result miss ``x``. Traced values have no layout: a traced view is a reshape.

    ``x.view(dtype)`` reinterprets the bytes as ``dtype``, as torch: the shape is kept for a
    dtype of the same element size, else the last dim is scaled by the sizes (it must be
    contiguous, and divisible when the element grows). It shares ``x``'s memory, as torch's:
    a write through either changes both (but not ``x``'s gradient history: it never requires
    grad, as torch's). Under ``dg.compile`` it reads the current bits of ``x``; a write
    through it there is a graph break.

    >>> x = dg.arange(6.0).reshape(2, 3)
    >>> x.view(3, 2).shape, x.t().reshape(-1).shape
    (dg.Size([3, 2]), dg.Size([6]))
    >>> dg.tensor([1.0, -2.0]).view(dg.int32)
    tensor([ 1065353216, -1073741824], dtype=dg.int32)
    >>> dg.ones(2, 4).view(dg.float16).shape
    dg.Size([2, 8])
    >>> x = dg.ones(2)
    >>> _ = x.view(dg.int32).add_(1)   # the next float up, 1 + 2**-23
    >>> (x - 1).tolist()
    [1.1920928955078125e-07, 1.1920928955078125e-07]
    """
    if len(shape) == 1 and isinstance(shape[0], (dtypes.DType, np.dtype, type, str)):
        dt = dtypes.to_np(shape[0])
        data = x._data
        if (type(data) is np.ndarray and dt.itemsize != data.dtype.itemsize and data.ndim
                and data.size and data.shape[-1] > 1 and data.strides[-1] != data.itemsize):
            raise ValueError(
                f"view(dtype): the last dim must be contiguous (stride 1) to view "
                f"{data.dtype.name} as {dt.name} (different element sizes), but its "
                f"stride is {data.strides[-1] // data.itemsize}; call .contiguous() first")
        return apply(BITCAST, x, dtype=dt)
    data = views.layout_of(x)   # (traced: the strides it has eagerly, so compiled refuses too)
    if data is not None and not data.flags.c_contiguous:
        target = infer_reshape(tuple(x.shape), _shape_arg(shape))
        try:
            np.reshape(data, target, copy=False)
        except ValueError:
            raise OpError(f"view size is not compatible with input tensor's size and stride "
                          f"(at least one dimension spans across two contiguous subspaces): "
                          f"viewing shape {tuple(x.shape)} with strides "
                          f"{tuple(s // data.itemsize for s in data.strides)} as {target} at "
                          f"{user_location()}. Use .reshape(...) instead (it copies "
                          f"where it must).") from None
    return reshape(x, *shape)


def view_as(x, other):
    return view(x, tuple(other.shape))


def reshape_as(x, other):
    return reshape(x, tuple(other.shape))


def expand_as(x, other):
    return expand(x, tuple(other.shape))


# -- slice / slice_update: strided blocks (views) and their functional write ------------------
def slice_key(index):
    """The NumPy key of a ``slice`` op's ``index`` (one ``(start, stop, step)`` or None per
    dim). Cached: a loop over ``x[:, t]`` slices with a few keys over and over."""
    try:
        return _slice_key(tuple(index))
    except TypeError:   # (an unhashable bound)
        return _slice_key.__wrapped__(index)


@functools.lru_cache(maxsize=1024)
def _slice_key(index):
    return tuple(slice(None) if s is None else slice(*s) for s in index)


def _infer_slice(x, index):
    shape = tuple(d if s is None else slice_length(s) for d, s in zip(x.shape, index))
    return ShapedType(shape, x.dtype)


def slice_length(s) -> int | Sym:
    """The length of a normalised ``(start, stop, step)``; with symbolic bounds
    (``shapes.sym_slice``) their difference, divided by a step other than 1 only where it
    is a constant."""
    if type(s[0]) is int and type(s[1]) is int:
        return len(range(*s))
    if s[2] != 1:
        if not isinstance(s[1] - s[0], int):
            raise ShapeError(f"a slice {s} with symbolic bounds and a step other than 1")
        return len(range(0, s[1] - s[0], s[2]))
    return s[1] - s[0]


def _slice_vjp(g, out, x, index):
    return apply(SLICE_BACKWARD, g, x, index=index)


def _slice_backward_kernel(g, x, index, out=None):
    """(``out``, ``fills_out``: zeroed, then ``g`` written into its block)"""
    if out is None or out.dtype != g.dtype:
        out = np.zeros(x.shape, g.dtype)
    else:
        out = out.reshape(x.shape)
        out.fill(0)
    out[slice_key(index)] = g
    return out


def _slice_backward_decomposition(g, x, index):
    return apply(SLICE_UPDATE, creation.zeros_like(x, dtype=g.dtype), g, index=index)


# One op for the gradient of a slice (not zeros + slice_update: two ops and a copy), as it
# runs for every step of a Python loop over x[:, t] and every part of a split.
SLICE_BACKWARD = defop("slice_backward", _slice_backward_kernel,
                       lambda g, x, index: ShapedType(tuple(x.shape), g.dtype),
                       compiler_only=True,
                       decomposition=_slice_backward_decomposition,
                       vjp=lambda gg, out, g, x, index: (apply(SLICE, gg, index=index), None),
                       attrs=("index",), saves="", onnx=None, fills_out=True,
                       doc="Zeros shaped like x with g in the block ``index``: the gradient "
                           "of slice (x only gives the shape).")


def _onnx_slice(e, node):
    bounds = []   # (start, stop, axis, step) per sliced dim
    for axis, s in enumerate(node.attrs["index"]):
        if s is None:
            continue
        start, stop, step = (tuple(s) + (None, None, None))[:3]
        if any(b is not None and not isinstance(b, (int, np.integer)) for b in s):
            raise e.fail(f"the slice {start}:{stop}:{step} of dim {axis} depends on a "
                         "dynamic dim", "keep that dim static (no dynamic_axes on it)")
        step = 1 if step is None else step
        if start is None:
            start = 0 if step > 0 else _INT64.max
        if stop is None:
            stop = _INT64.max if step > 0 else _INT64.min
        bounds.append((start, stop, axis, step))
    if not bounds:
        return [e.same(e.input(0))]
    return [e.op("Slice", [e.input(0)] + [e.ints(column) for column in zip(*bounds)])]


_INT64 = np.iinfo(np.int64)   # (ONNX's Slice bounds for "to the end" either way)
SLICE = defop("slice", lambda x, index: x[slice_key(index)], _infer_slice, vjp=_slice_vjp,
              attrs=("index",), saves="", view=True, grad_block=slice_key,
              onnx=_onnx_slice,
              shape_fold=lambda x, index: x[slice_key(index)],
              doc="x[start:stop:step, ...]; ``index`` holds (start, stop, step) per dim, "
                  "normalised and positive, or None for a whole dim.")


def _slice_update_kernel(x, v, index):
    out = x.copy()
    out[slice_key(index)] = v
    return out


def _infer_slice_update(x, v, index):
    want = _infer_slice(x, index).shape
    if tuple(v.shape) != want:
        raise ShapeError(f"slice_update: the value has shape {tuple(v.shape)} but the block "
                         f"{index} of a tensor of shape {tuple(x.shape)} has shape {want}")
    return ShapedType(tuple(x.shape), x.dtype)


def _slice_update_vjp(g, out, x, v, index):
    gx = slice_update(g, creation.zeros_like(v, dtype=g.dtype), index) if needs_grad(x) else None
    gv = apply(SLICE, g, index=index) if needs_grad(v) else None
    return gx, gv


def _onnx_slice_update(e, node):
    """A copy of x with the block x[index] replaced by v: ScatterND on the positions of the
    block's elements, listed here as a constant (the slice is static), in v's order."""
    x, index = node.inputs[0], node.attrs["index"]
    if any(not isinstance(d, int) for d in x.shape):
        raise e.fail(f"a slice update of a tensor of symbolic shape {tuple(x.shape)}",
                     "keep its dims static (no dynamic_axes on it)")
    block = np.indices(x.shape, np.int64)[(slice(None),) + slice_key(index)]   # ndim, block
    positions = e.const(np.moveaxis(block, 0, -1), "block")
    return [e.op("ScatterND", [e.input(0), positions, e.input(1, x.dtype)])]


SLICE_UPDATE = defop("slice_update", _slice_update_kernel, _infer_slice_update,
                     vjp=_slice_update_vjp, attrs=("index",), saves="",
                     onnx=_onnx_slice_update,
                     doc="A copy of x with the block ``index`` replaced by v (as slice).")


def slice_dims(x, index):
    """``x[index]`` for ``index``: one ``(start, stop, step)`` or None per dim (a view)."""
    if index.count(None) == len(index):   # (all None: C's loop, not a generator's)
        return x
    return apply(SLICE, x, index=tuple(index))


def slice_update(x, v, index):
    """A copy of ``x`` whose block ``index`` (as :func:`slice_dims`) holds ``v``."""
    v = cast_like(v, x)
    if index.count(None) == len(index):
        return v
    return apply(SLICE_UPDATE, x, v, index=tuple(index))


def cast_like(v, x):
    """``v`` in ``x``'s dtype (a no-op when it already is)."""
    return v if v._data.dtype == x._data.dtype else v.to(x.dtype)


def _dim_slice(x, dim, start, stop):
    index = [None] * x.ndim
    index[dim] = (start, stop, 1)
    return slice_dims(x, index)


def narrow(x, dim, start, length):
    """The part ``start:start+length`` of dim ``dim`` (a view); ``start`` may be negative."""
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d]
    if any(isinstance(v, Sym) for v in (n, start, length)):
        return _sym_narrow(x, d, start, length)
    start = int(start)
    if start < 0:
        start += n
    if not (0 <= start <= n and 0 <= length and start + length <= n):
        raise IndexError(f"narrow: start {start} and length {length} are out of range for "
                         f"dim {d} of size {n} (shape {tuple(x.shape)})")
    if start == 0 and length == n:
        return x
    return _dim_slice(x, d, start, start + length)


def _sym_narrow(x, d, start, length):
    """``narrow`` where the size, the start or the length is symbolic (a trace's sizes):
    in range by the case the traced sizes take (``SizeCases``: a graph runs only for sizes
    in the same case), else the IndexError eager raises."""
    n = x.shape[d]
    cases = size_cases()
    if not cases.at_least(start, 0):
        start = start + n
    if not (cases.at_least(start, 0) and cases.at_least(length, 0)
            and cases.at_least(n, start + length)):
        raise IndexError(f"narrow: start {start} and length {length} are out of range for "
                         f"dim {d} of size {n} (shape {tuple(x.shape)})")
    return x if (start, start + length) == (0, n) else _dim_slice(x, d, start, start + length)


# -- select: one position of a dim, the dim dropped (a view) ---------------------------------
@functools.lru_cache(maxsize=256)
def _select_key(dim, index):
    """The NumPy key of ``select``: ``...`` after the int keeps a 0-d result an array (a
    view), where ``a[i]`` of a 1-d array would give a scalar copy."""
    return (slice(None),) * dim + (index, Ellipsis)


def _infer_select(x, dim, index):
    shape = tuple(x.shape)
    if not 0 <= dim < len(shape) or not 0 <= index < shape[dim]:
        raise IndexError(f"select: index {index} of dim {dim} is out of range for shape "
                         f"{shape}")
    return ShapedType(shape[:dim] + shape[dim + 1:], x.dtype)


def _select_vjp(g, out, x, dim, index):
    """The slice's gradient of the kept dim (the two nodes a slice and a reshape give, which
    the passes read: batched steps, joined slice gradients)."""
    block = tuple(x.shape[:dim]) + (1,) + tuple(x.shape[dim + 1:])
    return apply(SLICE_BACKWARD, reshape(g, block), x,
                 index=tuple((index, index + 1, 1) if k == dim else None
                             for k in range(x.ndim)))


def _onnx_select(e, node):
    return [e.op("Gather", [e.input(0), e.scalar(node.attrs["index"], np.int64, "index")],
                 axis=node.attrs["dim"])]


# x[i] and unbind's parts as one view op (a slice and a reshape before: two dispatches, two
# tape nodes and a second shape check per row of a Python loop over a tensor)
SELECT = defop("select", lambda x, dim, index: x[_select_key(dim, index)], _infer_select,
               vjp=_select_vjp, attrs=("dim", "index"), saves="", view=True,
               grad_block=_select_key,
               onnx=_onnx_select,
               shape_fold=lambda x, dim, index: x[_select_key(dim, index)],
               doc="x at position ``index`` (normalised, non-negative) of dim ``dim``, "
                   "with that dim removed.")


def select(x, dim, index):
    """``x`` at position ``index`` of dim ``dim``, with that dim removed (a view)."""
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d]
    i = int(index)
    if not -n <= i < n:
        raise IndexError(f"select: index {i} is out of range for dim {d} with size {n} "
                         f"(shape {tuple(x.shape)})")
    return apply(SELECT, x, dim=d, index=i % n)


def _split_sizes(x, d, split_size_or_sections):
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size <= 0 and n:
            raise ValueError(f"split: split_size must be positive, got {size}")
        return [min(size, n - s) for s in range(0, n, size)] if n else [0]
    sizes = [int(s) for s in split_size_or_sections]
    if sum(sizes) != n or any(s < 0 for s in sizes):
        raise ValueError(f"split: sizes {sizes} must be non-negative and sum to {n}, the "
                         f"size of dim {d} (shape {tuple(x.shape)})")
    return sizes


def split(tensor, split_size_or_sections=None, dim=0, *, split_size=None):
    """Views of consecutive parts of dim ``dim``: parts of size ``split_size`` (the last may
    be smaller) or of the given list of sizes. ``split_size=`` is the keyword of the method
    (``x.split(split_size=[4, 4], dim=-1)``, as ``Tensor.split`` names it)."""
    if split_size is not None:
        split_size_or_sections = split_size
    d = normalize_dim(dim, tensor.ndim)
    out, start = [], 0
    for size in _split_sizes(tensor, d, split_size_or_sections):
        out.append(narrow(tensor, d, start, size))
        start += size
    return tuple(out)


def chunk(input, chunks, dim=0):
    """Split into ``chunks`` parts of size ceil(n / chunks) (there may be fewer parts)."""
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    d = normalize_dim(dim, input.ndim)
    size = max(-(-input.shape[d] // chunks), 1)
    return split(input, size, d)


def unbind(input, dim=0):
    """The slices of dim ``dim``, each with that dim removed."""
    d = normalize_dim(dim, input.ndim)
    return tuple(select(input, d, i) for i in range(input.shape[d]))


# -- cat and stack --------------------------------------------------------------------------
def _infer_cat(*xs, dim):
    first = tuple(xs[0].shape)
    total = 0
    for k, x in enumerate(xs):
        s = tuple(x.shape)
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first))
                                       if i != dim):
            raise ShapeError(f"cat: tensor {k} has shape {s} but tensor 0 has shape {first}; "
                             f"sizes must match except in dim {dim}")
        total = total + s[dim]
    return ShapedType(first[:dim] + (total,) + first[dim + 1:], dtypes.result_type(*xs))


def _cat_kernel(*xs, dim, out=None):
    dt = dtypes.result_type(*xs)
    return np.concatenate([cast(x, dt) for x in xs], axis=dim, out=out)


def _cat_vjp(g, out, *xs, dim):
    grads, start = [], 0
    for x in xs:
        size = x.shape[dim]
        grads.append(_dim_slice(g, dim, start, start + size) if needs_grad(x) else None)
        start += size
    return tuple(grads)


def _from_onnx_concat(b, xs, attrs):
    xs = [x for x in xs if x is not None]
    b.need_rank(xs[0], 1, "first input")
    dim = b.dim(attrs.get("axis", 1), xs[0].ndim)   # (required from opset 4; 1 before)
    return xs[0] if len(xs) == 1 else b.op(CAT, *xs, dim=dim)


CAT = defop("cat", _cat_kernel, _infer_cat, vjp=_cat_vjp, attrs=("dim",), saves="",
            fills_out=True,
            onnx=lambda e, node: [e.op("Concat", e.inputs(node.outputs[0].dtype),
                                       axis=node.attrs["dim"])],
            onnx_import={"Concat": _from_onnx_concat},
            shape_fold=lambda *xs, dim: np.concatenate(xs, axis=dim))


# A concatenation grown in place (the lowering rule ``cat_in_place``): ``cat_grown`` makes
# the whole buffer, its first blocks and zeros after them; each later block is written into
# it by ``slice_update_in_place``, and each concatenation of a chain is a slice of it.
def _block(dim: int, start: int, stop) -> tuple:
    return (slice(None),) * dim + (slice(start, stop),)


def _cat_grown_kernel(*xs, dim, size, out=None):
    """(``out``, ``fills_out``: the blocks, then zeros to ``size``)"""
    shape = list(xs[0].shape)
    shape[dim] = size
    dt = dtypes.result_type(*xs)
    out = np.empty(shape, dt) if out is None or out.dtype != dt else out.reshape(shape)
    at = 0
    for x in xs:
        out[_block(dim, at, at + x.shape[dim])] = x
        at += x.shape[dim]
    out[_block(dim, at, None)] = 0
    return out


def _infer_cat_grown(*xs, dim, size):
    joined = _infer_cat(*xs, dim=dim)
    if size < joined.shape[dim]:
        raise ShapeError(f"cat_grown: size {size} along dim {dim} is less than the "
                         f"{joined.shape[dim]} of the blocks")
    return joined._replace(shape=joined.shape[:dim] + (size,) + joined.shape[dim + 1:])


def _cat_grown_decomposition(*xs, dim, size):
    joined = cat(list(xs), dim)
    rest = list(joined.shape)
    rest[dim] = size - rest[dim]
    return cat([joined, creation.zeros(*rest, dtype=joined.dtype)], dim)


CAT_GROWN = defop("cat_grown", _cat_grown_kernel, _infer_cat_grown, attrs=("dim", "size"),
                  saves="", onnx=None, fills_out=True, compiler_only=True,
                  decomposition=_cat_grown_decomposition,
                  doc="cat(xs, dim) followed by zeros up to ``size`` along dim: the buffer "
                      "of a concatenation grown in place")


def _slice_update_in_place_kernel(x, v, index):
    x[slice_key(index)] = v
    return x


# Its output is ``x`` itself, so it is a view of ``x`` to the memory plan.
SLICE_UPDATE_IN_PLACE = defop(
    "slice_update_in_place", _slice_update_in_place_kernel,
    lambda x, v, index: _infer_slice_update(x, v, index), attrs=("index",), saves="",
    onnx=None, view=True, compiler_only=True,
    decomposition=lambda x, v, index: apply(SLICE_UPDATE, x, v, index=index),
    doc="slice_update(x, v, index) written into x itself, where nothing reads x's block "
        "``index`` but through the result")


def _legacy_empty_as_blocks(tensors, dim):
    """torch.cat skips tensors of shape ``(0,)`` whatever the others' shapes (its legacy
    rule, which code starting from ``torch.empty(0)`` or ``torch.tensor([])`` and
    concatenating onto it relies on): each is replaced by an empty block of the others'
    shape (zero long along ``dim``), so that its dtype still takes part in the promotion."""
    def legacy(x):
        return x.ndim == 1 and isinstance(x.shape[0], int) and x.shape[0] == 0
    others = [x for x in tensors if not legacy(x)]
    if all(x.ndim == 1 for x in others):   # (nothing to skip: they join as they are)
        return tensors
    shape = list(others[0].shape)
    shape[normalize_dim(dim, len(shape))] = 0
    return tuple(creation.zeros(*shape, dtype=x.dtype) if legacy(x) else x for x in tensors)


def cat(tensors, dim=0):
    """Join tensors along an existing dim; dtypes promote as in ``torch.cat``."""
    tensors = tuple(tensors)
    if not tensors:
        raise ValueError("cat expects a non-empty sequence of tensors")
    if any(x.ndim == 0 for x in tensors):
        raise ShapeError("cat: zero-dimensional tensors cannot be concatenated; use stack")
    tensors = _legacy_empty_as_blocks(tensors, dim)
    d = normalize_dim(dim, tensors[0].ndim)
    if len(tensors) == 1:
        return tensors[0]
    return apply(CAT, *tensors, dim=d)


concat = concatenate = cat


def _infer_stack(*xs, dim):
    first = tuple(xs[0].shape)
    for k, x in enumerate(xs):
        if tuple(x.shape) != first:
            raise ShapeError(f"stack expects tensors of equal shape, but tensor 0 has shape "
                             f"{first} and tensor {k} has shape {tuple(x.shape)}")
    return ShapedType(first[:dim] + (len(xs),) + first[dim:], dtypes.result_type(*xs))


def _stack_kernel(*xs, dim):
    dt = dtypes.result_type(*xs)
    return np.stack([cast(x, dt) for x in xs], axis=dim)


def _onnx_stack(e, node):
    dim = node.attrs["dim"]
    return [e.op("Concat", [e.op("Unsqueeze", [x, e.ints([dim])])
                            for x in e.inputs(node.outputs[0].dtype)], axis=dim)]


# One op (an unsqueeze per part and a cat before: a dispatch and a tape node per part, and
# as many VJPs); ``simplify`` gives compiled graphs back that cat of reshapes, which the
# passes read (per-step blocks of one batched result joined again).
STACK = defop("stack", _stack_kernel, _infer_stack,
              vjp=lambda g, out, *xs, dim: tuple(
                  apply(SELECT, g, dim=dim, index=k) if needs_grad(x) else None
                  for k, x in enumerate(xs)),
              attrs=("dim",), saves="", onnx=_onnx_stack,
              shape_fold=lambda *xs, dim: np.stack(xs, axis=dim),
              doc="The inputs (one shape) joined along a new dim ``dim``; dtypes promote "
                  "as in cat.")


def stack(tensors, dim=0):
    """Join same-shaped tensors along a new dim ``dim``."""
    tensors = tuple(tensors)
    if not tensors:
        raise ValueError("stack expects a non-empty sequence of tensors")
    ndim = len(tensors[0].shape)
    d = normalize_dim(dim, ndim + 1)
    if len(tensors) == 1:
        _infer_stack(*tensors, dim=d)
        return unsqueeze(tensors[0], d)
    return apply(STACK, *tensors, dim=d)


# -- flip, roll, repeat, tile ---------------------------------------------------------------
def _onnx_flip(e, node):
    """Reversed dims: a Slice with step -1 over each."""
    dims = e.axes()
    if not dims:
        return [e.same(e.input(0))]
    n = len(dims)
    return [e.op("Slice", [e.input(0), e.ints([-1] * n), e.ints([_INT64.min] * n),
                           e.ints(dims), e.ints([-1] * n)])]


FLIP = defop("flip", lambda x, dims: np.flip(x, dims).copy(),
             lambda x, dims: ShapedType(tuple(x.shape), x.dtype),
             vjp=lambda g, out, x, dims: apply(FLIP, g, dims=dims),
             attrs=("dims",), saves="",
             onnx=_onnx_flip)


def flip(input, dims, *more):
    """Reverse the order of elements along ``dims`` (a copy, as in torch); as a method the
    dims may also come one by one, ``x.flip(0, 1)``."""
    dims = normalize_dims((dims, *more) if more else dims, input.ndim)
    if not dims:
        return input
    return apply(FLIP, input, dims=dims)


def roll(input, shifts, dims=None):
    """Shift elements cyclically by ``shifts`` along ``dims`` (the flattened tensor when
    ``dims`` is None)."""
    if dims is None:
        shape = tuple(input.shape)
        return reshape(roll(flatten(input), shifts, 0), shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
    x = input
    for s, dim in zip(shifts, dims):
        d = normalize_dim(dim, x.ndim)
        n = x.shape[d]
        s = s % n if n else 0
        if s:
            x = apply(CAT, _dim_slice(x, d, n - s, n), _dim_slice(x, d, 0, n - s), dim=d)
    return x


def repeat(x, *sizes):
    """Tile ``x`` ``sizes[i]`` times along dim i (``Tensor.repeat``); extra leading sizes add
    new dims. A new tensor, as torch's: never a view of ``x`` (the reshapes below give one
    where the repeated dims have size 1, which would show later writes to ``x``)."""
    sizes = _shape_arg(sizes)
    if len(sizes) < x.ndim:
        raise ValueError(f"repeat: got {len(sizes)} sizes {sizes} for a tensor with "
                         f"{x.ndim} dims; give at least one per dim")
    shape = (1,) * (len(sizes) - x.ndim) + tuple(x.shape)
    # Interleave a broadcast dim before every dim: (1, s0, 1, s1) -> (r0, s0, r1, s1).
    x = reshape(x, tuple(d for s in shape for d in (1, s)))
    x = expand(x, tuple(d for r, s in zip(sizes, shape) for d in (r, s)))
    out = reshape(x, tuple(r * s for r, s in zip(sizes, shape)))
    return creation.clone(out) if out._view is not None else out


def tile(input, dims):
    """Like ``repeat``, but fewer ``dims`` than tensor dims repeat the trailing dims."""
    dims = _shape_arg((dims,))
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


def contiguous(self, memory_format=None):
    """This tensor when its elements lie in row-major order (``is_contiguous()``), else a
    row-major copy, as torch's; traced, where eager would copy (ops/views.py). Any
    ``memory_format`` gives the row-major layout (dtypes.MemoryFormat)."""
    dtypes.check_memory_format(memory_format, "contiguous")
    return self if views.is_contiguous(self) else creation.clone(self)


def is_contiguous(self, memory_format=None) -> bool:
    """Whether the elements lie in storage in row-major order without gaps (traced: as
    they would eagerly, ops/views.py)."""
    return views.is_contiguous(self)


METHODS = {
    "reshape": reshape, "view": view, "expand": expand, "permute": permute,
    "transpose": transpose, "swapaxes": transpose, "swapdims": transpose, "t": t,
    "T": property(lambda self: permute(self, tuple(range(self.ndim))[::-1])),
    "mT": property(_matrix_transpose),
    "squeeze": squeeze, "unsqueeze": unsqueeze, "flatten": flatten, "unflatten": unflatten,
    "split": split, "chunk": chunk, "unbind": unbind, "narrow": narrow, "select": select,
    "repeat": repeat, "tile": tile, "flip": flip, "roll": roll, "movedim": movedim,
    "moveaxis": movedim, "contiguous": contiguous, "is_contiguous": is_contiguous,
    "view_as": view_as, "reshape_as": reshape_as, "expand_as": expand_as,
}
