"""Indexing ops: ``x[key]``, ``x[key] = v``, gather/scatter, index_select/index_add,
masked_fill/masked_select, tril/triu, take_along_dim, sort/argsort/topk, nonzero, one_hot,
pad.

Four primitives: ``index`` (advanced indexing by integer tensors on some dims, NumPy/torch
rules), ``index_put`` (its functional write, with ``accumulate`` for scatter-add; it is
``index``'s VJP, so duplicate indices add up their gradients), ``argsort`` and ``trilu``
(the triangular part of a matrix, ONNX's ``Trilu``). Basic indexing
(ints, slices, None, ...) is ``shape.slice`` + ``reshape`` and so gives views. Gather,
scatter, index_select, index_add, take_along_dim, sort and topk are composites of these.
``pad`` is here rather than in ops/shape.py because it uses both: it writes ``x`` into a
filled tensor (constant) or gathers edge rows (replicate/reflect/circular).
"""
from __future__ import annotations

import math
import operator
from collections import namedtuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import dtypes, kernels
from ..autograd.tape import grad_mode
from .._helpers import user_location
from ..dispatch import apply, modes, op_error
from ..shapes import ShapedType, ShapeError, Sym, broadcast_shapes, normalize_dim, sym_slice
from ..tensor import Tensor, as_array, bump
from . import creation, elementwise, reduce as red, shape as shape_ops, views
from ._util import needs_grad, row_major, shape_of, size_cases
from .inplace import commit_inplace, inplace, source_of, writeable
from .opdef import defop

__all__ = ["gather", "scatter", "scatter_add", "index_select", "index_add", "index_put",
           "masked_fill", "masked_select", "tril", "triu", "take_along_dim", "topk", "sort",
           "quantile", "nanquantile", "argsort", "nonzero", "one_hot", "pad",
           "repeat_interleave", "unique", "unique_consecutive", "diag",
           "diagonal", "bincount", "searchsorted", "bucketize", "diag_embed", "index_fill",
           "index_copy", "scatter_reduce", "masked_scatter", "kthvalue", "cummax", "cummin"]

_INT64 = np.dtype(np.int64)


# -- index / index_put: advanced indexing on the dims `dims` ---------------------------------
def _np_key(ndim, indices, dims):
    key = [slice(None)] * ndim
    for d, i in zip(dims, indices):
        key[d] = i
    return tuple(key)


def _check_bounds(shape, indices, dims, nonnegative=False):
    for d, i in zip(dims, indices):
        n = shape[d]
        bad = ((i < 0) if nonnegative else (i < -n)) | (i >= n)
        if bad.any():
            if nonnegative:   # (an embedding's or one_hot's lookup of rows)
                raise IndexError(f"index {i[bad].flat[0]} is out of range for {n} rows (of "
                                 f"a table of shape {tuple(shape)}); indices must be in "
                                 f"[0, {n})")
            raise IndexError(f"index {i[bad].flat[0]} is out of range for dim {d} with size "
                             f"{n} (tensor shape {tuple(shape)})")


def _infer_index(x, *indices, dims, nonnegative=False):
    for i in indices:
        if dtypes.to_np(i.dtype).kind not in "iu":
            raise TypeError(f"tensors used as indices must be integer tensors, got {i.dtype}")
    b = broadcast_shapes(*(shape_of(i) for i in indices))
    xs = tuple(x.shape)
    if list(dims) == list(range(dims[0], dims[0] + len(dims))):   # adjacent: stay in place
        shape = xs[:dims[0]] + b + xs[dims[-1] + 1:]
    else:                                                        # separated: go first
        shape = b + tuple(d for i, d in enumerate(xs) if i not in dims)
    return ShapedType(shape, x.dtype)


def _index_kernel(x, *indices, dims, nonnegative=False):
    # NumPy's indexing rejects an index out of range itself: the bounds are checked (three
    # passes and an ``any``, most of a small lookup's cost) only to word its error, and
    # for a negative index where one is an error (NumPy counts it from the end).
    if nonnegative and any(i.size and np.minimum.reduce(i, axis=None) < 0 for i in indices):
        _check_bounds(x.shape, indices, dims, nonnegative)
    try:
        picked = x[_np_key(x.ndim, indices, dims)]
    except IndexError:
        _check_bounds(x.shape, indices, dims, nonnegative)
        raise
    # (NumPy lays out ``x[:, i]`` with the indexed dim outermost)
    return row_major(picked)


def _index_vjp(g, out, x, *indices, dims, nonnegative=False):
    return (apply(INDEX_BACKWARD, g, x, *indices, dims=dims),) + (None,) * len(indices)


def _index_backward_kernel(g, x, *indices, dims):
    out = np.zeros(x.shape, g.dtype)
    _accumulate(out, _np_key(x.ndim, indices, dims), g, indices, dims)
    return out


def _index_backward_decomposition(g, x, *indices, dims):
    zeros = creation.zeros_like(x, dtype=g.dtype)
    return apply(INDEX_PUT, zeros, g, *indices, dims=dims, accumulate=True)


def _index_backward_vjp(gg, out, g, x, *indices, dims):
    return (apply(INDEX, gg, *indices, dims=dims), None) + (None,) * len(indices)


def _onnx_indexed_first(e, node, first_index: int):
    """For x[..., i0, ..., i1, ...] (x is input 0, the index tensors the inputs from
    ``first_index`` on): x with its indexed dims moved first, the index as one tensor (the
    index tensors broadcast and stacked on a last axis, as GatherND and ScatterND take it),
    the broadcast index shape, and x's permutation."""
    x, dims = node.inputs[0], tuple(node.attrs["dims"])
    perm = list(dims) + [d for d in range(x.ndim) if d not in dims]
    moved = e.input(0)
    if perm != list(range(x.ndim)):
        moved = e.op("Transpose", [moved], perm=perm)
    shape = np.broadcast_shapes(*(i.shape for i in node.inputs[first_index:]))
    target = e.ints(shape)
    columns = [e.op("Unsqueeze", [e.op("Expand", [e.input(k, np.int64), target]),
                                  e.ints([-1])]) for k in range(first_index, len(node.inputs))]
    return moved, e.op("Concat", columns, axis=-1), shape, perm


def _numpy_places_index_dims(dims: tuple) -> int:
    """Where NumPy puts the index dims in x[..., i0, ..., i1, ...]: in place of the
    indexed dims when these are adjacent (after the dims before them), else first."""
    adjacent = dims == tuple(range(dims[0], dims[0] + len(dims)))
    return dims[0] if adjacent else 0


def _onnx_index(e, node):
    """x[..., i0, ..., i1, ...]: one index tensor is a Gather; several are one GatherND on
    x with the indexed dims moved first, the result's index dims then put where NumPy puts
    them."""
    x, dims = node.inputs[0], tuple(node.attrs["dims"])
    if len(dims) == 1:
        return [e.op("Gather", [e.input(0), e.input(1)], axis=dims[0])]
    moved, index, shape, _ = _onnx_indexed_first(e, node, 1)
    picked = e.op("GatherND", [moved, index])
    lead, b, rest = _numpy_places_index_dims(dims), len(shape), x.ndim - len(dims)
    if not lead:
        return [picked]
    return [e.op("Transpose", [picked], perm=list(range(b, b + lead)) + list(range(b)) +
                 list(range(b + lead, b + rest)))]


def _from_onnx_gather(b, xs, attrs):
    x, i = xs
    b.need_rank(x, 1, "input")
    if i.dtype.kind not in "biuO":
        raise b.error(f"Gather's indices have dtype {i.dtype}; they must be integers")
    return b.op(INDEX, x, i, dims=(b.dim(attrs.get("axis", 0), x.ndim),))


INDEX = defop("index", _index_kernel, _infer_index, vjp=_index_vjp,
              attrs=("dims", "nonnegative"),
              saves="", checks_values=True,
              onnx=_onnx_index,
              onnx_import={"Gather": _from_onnx_gather},
              shape_fold=lambda x, i, dims, nonnegative=False: np.take(x, i, axis=dims[0]),
              doc="x[..., i0, ..., i1, ...]: integer tensors index the dims ``dims`` (sorted); "
                  "adjacent index dims stay in place, separated ones go first, as in NumPy; "
                  "``nonnegative=True`` (an embedding's lookup) rejects negative indices, "
                  "as torch's embedding does, instead of counting from the end.")


def _accumulate(out, key, v, indices, dims):
    """``np.add.at(out, key, v)``, which is slow: float32 blocks picked along the leading
    dims (an embedding's or a class-index loss's gradient) go through a Numba loop, and
    other float rows picked along dim 0 are summed per index with a sort and ``reduceat``."""
    if dims == tuple(range(len(dims))) and kernels.enabled(v, out, min_elements=1):
        # (at every size: the loop adds each row in place in one pass, where the sort
        # below also sorts the indices and gathers every added row once more)
        lead = out.shape[:len(dims)]
        if len(indices) == 1:
            rows = np.where(indices[0] < 0, indices[0] + lead[0], indices[0])
        else:
            rows = np.ravel_multi_index([np.where(i < 0, i + n, i) for i, n in
                                         zip(np.broadcast_arrays(*indices), lead)], lead)
        width = out[(0,) * len(dims)].size
        kernels.scatter.add_rows(out.reshape(-1, width), rows.reshape(-1),
                                 kernels.rows(v, width))
        return
    if dims != (0,) or out.dtype.kind not in "fc" or not v.size:
        np.add.at(out, key, v)
        return
    n = out.shape[0]
    flat = indices[0].reshape(-1)
    flat = np.where(flat < 0, flat + n, flat)
    order = np.argsort(flat, kind="stable")   # stable: the same sum order on every run
    rows, starts = np.unique(flat[order], return_index=True)
    values = v.reshape((flat.size,) + out.shape[1:])[order]
    out[rows] += np.add.reduceat(values, starts, axis=0)


def _index_put_kernel(x, v, *indices, dims, accumulate):
    _check_bounds(x.shape, indices, dims)
    out = x.copy()
    key = _np_key(x.ndim, indices, dims)
    v = v.astype(x.dtype, copy=False)
    if accumulate:
        _accumulate(out, key, v, indices, dims)
    else:
        out[key] = v
    return out


def _infer_index_put(x, v, *indices, dims, accumulate):
    want = _infer_index(x, *indices, dims=dims).shape
    if tuple(v.shape) != want:
        raise ShapeError(f"index_put: the values have shape {tuple(v.shape)} but indexing a "
                         f"tensor of shape {tuple(x.shape)} gives shape {want}")
    return ShapedType(tuple(x.shape), x.dtype)


def _index_put_vjp(g, out, x, v, *indices, dims, accumulate):
    gx = gv = None
    if needs_grad(x):   # overwritten positions get no gradient; accumulated ones keep it
        gx = g if accumulate else index_put_dims(
            g, creation.zeros_like(v, dtype=g.dtype), indices, dims)
    if needs_grad(v):
        gv = apply(INDEX, g, *indices, dims=dims)
    return (gx, gv) + (None,) * len(indices)


INDEX_BACKWARD = defop("index_backward", _index_backward_kernel,
                       lambda g, x, *indices, dims: ShapedType(tuple(x.shape), g.dtype),
                       compiler_only=True,
                       decomposition=_index_backward_decomposition,
                       vjp=_index_backward_vjp, attrs=("dims",), saves="", onnx=None,
                       doc="Zeros shaped like x with g added at the indexed positions (repeats "
                           "summed): the gradient of index (x only gives the shape).")
def _onnx_index_put(e, node):
    """A copy of x with x[..., i0, ..., i1, ...] set to v (``accumulate``: increased by it,
    ScatterND's reduction "add"): one ScatterND on x with the indexed dims moved first, v's
    index dims moved first too (from where NumPy puts them), then x's dims put back.
    (Repeated indices without ``accumulate`` are undefined in ONNX; dualgraph keeps the
    last value.)"""
    x, dims = node.inputs[0], tuple(node.attrs["dims"])
    moved, index, shape, perm = _onnx_indexed_first(e, node, 2)
    updates = e.input(1, x.dtype)
    lead, b, rest = _numpy_places_index_dims(dims), len(shape), x.ndim - len(dims)
    if lead:   # v: (lead dims, index dims, trailing dims) -> index dims first
        updates = e.op("Transpose", [updates], perm=list(range(lead, lead + b)) +
                       list(range(lead)) + list(range(lead + b, b + rest)))
    out = e.op("ScatterND", [moved, index, updates],
               reduction="add" if node.attrs["accumulate"] else None)
    if perm != list(range(x.ndim)):
        out = e.op("Transpose", [out], perm=list(np.argsort(perm)))
    return [out]


INDEX_PUT = defop("index_put", _index_put_kernel, _infer_index_put, vjp=_index_put_vjp,
                  attrs=("dims", "accumulate"), saves="", checks_values=True,
                  onnx=_onnx_index_put,
                  doc="A copy of x with x[index] set to (or, accumulating, increased by) v.")


def index_dims(x, indices, dims, nonnegative=False):
    """``x`` indexed by integer tensors ``indices`` on dims ``dims`` (sorted, distinct);
    ``nonnegative``: a negative index is out of range (an embedding's lookup)."""
    if nonnegative:
        return apply(INDEX, x, *indices, dims=tuple(dims), nonnegative=True)
    return apply(INDEX, x, *indices, dims=tuple(dims))


def index_put_dims(x, v, indices, dims, accumulate=False, want=None):
    """A copy of ``x`` with ``index_dims(x, indices, dims)`` replaced by (or with
    ``accumulate``, increased by) ``v``, which broadcasts to that shape (``want``, where
    the caller has worked it out)."""
    if want is None:
        want = _infer_index(x, *indices, dims=tuple(dims)).shape
    if not (isinstance(v, Tensor) and v._data.dtype == x._data.dtype
            and tuple(v.shape) == want):   # (a source of the very type: index_add's)
        v = shape_ops.expand(_fit(_as_value(v, x), want), want)
    return apply(INDEX_PUT, x, v, *indices, dims=tuple(dims), accumulate=bool(accumulate))


def _as_value(v, like):
    """A value to write into ``like``: a tensor in ``like``'s dtype."""
    if not isinstance(v, Tensor):
        v = creation.constant(as_array(v, like.dtype))
    return shape_ops.cast_like(v, like)


def _fit(v, shape):
    """``v`` without the leading size-1 dims beyond ``len(shape)`` (torch's copy_ allows
    them), checked to broadcast to ``shape``."""
    return shape_ops.reshape(v, _fit_shape(tuple(v.shape), tuple(shape)))


def _fit_shape(vshape, shape):
    extra = max(len(vshape) - len(shape), 0)
    if all(d == 1 for d in vshape[:extra]) and _broadcasts(vshape[extra:], shape):
        return vshape[extra:]
    raise ShapeError(f"shape mismatch: a value of shape {vshape} cannot be broadcast to the "
                     f"indexing result of shape {shape}")


def _broadcasts(vshape, shape):
    try:
        return broadcast_shapes(vshape, shape) == shape
    except ShapeError:
        return False


# -- x[key] and x[key] = v --------------------------------------------------------------------
class _Key:
    """A torch indexing key resolved against a shape, in the order torch applies it:
    ``basic`` (start, stop, step) or None per dim (ints are length-1 slices), then a reshape
    to ``view_shape`` (drops int dims, inserts None dims), then integer tensors ``arrays``
    on dims ``dims`` of that view (bool masks are turned into their nonzero positions)."""

    def __init__(self, shape, key):
        shape = tuple(shape)
        items = list(key) if isinstance(key, tuple) else [key]
        items = [_index_item(k) for k in items]
        _expand_ellipsis(items, len(shape))
        self.basic, self.view_shape, self.arrays, self.dims = [], [], [], []
        dim = 0
        for k in items:
            if k is None:
                self.view_shape.append(1)
                continue
            if isinstance(k, Tensor) and k.dtype == dtypes.bool_:
                self._add_mask(k, shape, dim)
                dim += k.ndim
                continue
            n = shape[dim]
            if isinstance(k, slice):
                self.basic.append(_slice_triple(k, n))
                self.view_shape.append(n if self.basic[-1] is None else
                                       shape_ops.slice_length(self.basic[-1]))
            elif isinstance(k, Tensor):
                self.basic.append(None)
                self.dims.append(len(self.view_shape))
                self.arrays.append(k)
                self.view_shape.append(n)
            elif isinstance(n, Sym) or isinstance(k, Sym):   # (``logits[:, -1]`` of a
                self.basic.append(_sym_index(k, n, dim, shape))   # symbolic length)
            else:
                if not -n <= k < n:
                    raise IndexError(f"index {k} is out of range for dim {dim} with size {n} "
                                     f"(tensor shape {shape})")
                self.basic.append((k % n, k % n + 1, 1))
            dim += 1
        self.basic += [None] * (len(shape) - dim)
        self.view_shape += list(shape[dim:])
        self.view_shape = tuple(self.view_shape)

    def _add_mask(self, mask, shape, dim):
        _check_mask(mask, shape, dim)
        if mask.ndim == 0:   # x[True] adds a dim of size 1, x[False] one of size 0
            self.view_shape.append(1)
            self.dims.append(len(self.view_shape) - 1)
            self.arrays.append(creation.constant(np.zeros(int(bool(mask)), _INT64)))
            return
        for positions in np.nonzero(mask._concrete("boolean mask indexing")):
            self.basic.append(None)
            self.dims.append(len(self.view_shape))
            self.arrays.append(Tensor._make(positions.astype(_INT64)))
            self.view_shape.append(shape[dim])
            dim += 1

    def get(self, x):
        v = shape_ops.reshape(shape_ops.slice_dims(x, self.basic), self.view_shape)
        return index_dims(v, self.arrays, self.dims) if self.arrays else v

    def result_shape(self):
        if not self.arrays:
            return self.view_shape
        return _infer_index(ShapedType(self.view_shape, None), *self.arrays,
                            dims=tuple(self.dims)).shape

    def put(self, x, value):
        """A copy of ``x`` with this key's positions holding ``value`` (broadcast)."""
        block = shape_ops.slice_dims(x, self.basic)
        view = shape_ops.reshape(block, self.view_shape)
        if self.arrays:
            new = index_put_dims(view, value, self.arrays, self.dims)
        else:
            new = shape_ops.expand(_fit(_as_value(value, x), self.view_shape), self.view_shape)
        return shape_ops.slice_update(x, shape_ops.reshape(new, tuple(block.shape)),
                                      self.basic)

    def write(self, data, value):
        """Eager, no autograd: write ``value`` (an array) into ``data`` in place."""
        view = data[shape_ops.slice_key(self.basic)].reshape(self.view_shape)
        if self.arrays:
            indices = [a._data for a in self.arrays]
            try:
                _check_bounds(view.shape, indices, self.dims)
            except IndexError as e:   # (worded as the index_put node of a graph fails)
                v = np.broadcast_to(value, tuple(self.result_shape()))
                raise op_error(INDEX_PUT, [view, v, *indices],
                               {"dims": tuple(self.dims), "accumulate": False}, e,
                               user_location()) from None
            view[_np_key(view.ndim, indices, self.dims)] = value
        else:
            view[...] = value


def _check_mask(mask, shape, dim):
    want = tuple(shape[dim:dim + mask.ndim])
    if tuple(mask.shape) != want:
        raise IndexError(f"the mask of shape {tuple(mask.shape)} does not match the dims "
                         f"{dim}..{dim + mask.ndim - 1} of shape {want} of the indexed "
                         f"tensor (shape {shape})")


def _index_item(k):
    if k is None or k is Ellipsis or isinstance(k, (slice, Sym)):   # (Sym: ``pos[T]``, T a
        return k                                                      # traced size)
    if isinstance(k, (bool, np.bool_)):
        return creation.constant(np.asarray(bool(k)))
    if isinstance(k, (int, np.integer)):
        return int(k)
    if isinstance(k, Tensor):
        if k.dtype != dtypes.bool_ and k._data.dtype.kind not in "iu":
            raise IndexError(f"tensors used as indices must be integer or bool tensors, got "
                             f"{k.dtype!r}")
        return k
    if isinstance(k, (list, range, np.ndarray)):   # (``x[range(n), labels]``, as torch)
        array = as_array(list(k) if isinstance(k, range) else k) if len(k) else \
            np.zeros(0, _INT64)
        return _index_item(Tensor._make(array))
    raise IndexError(f"unsupported index {k!r} of type {type(k).__name__}; use ints, slices, "
                     "None, ..., integer or bool tensors")


def _check_count(used, ndim):
    if used > ndim:
        raise IndexError(f"too many indices for a tensor with {ndim} dims: {used} were given")


def _expand_ellipsis(items, ndim):
    count = sum(k is Ellipsis for k in items)   # not .count(): tensors overload ==
    if count > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(k.ndim if isinstance(k, Tensor) and k.dtype == dtypes.bool_ else 1
               for k in items if k is not None and k is not Ellipsis)
    _check_count(used, ndim)
    if count:
        at = next(i for i, k in enumerate(items) if k is Ellipsis)
        items[at:at + 1] = [slice(None)] * (ndim - used)


def _sym_index(k, n, dim, shape):
    """The ``(start, stop, 1)`` of an int index ``k`` where it or the dim's size ``n`` is
    symbolic, in range by the case the traced sizes take (out of range raises, as eager)."""
    index = sym_slice(k, None if k == -1 else k + 1, None, n, size_cases())
    if index[1] - index[0] != 1:
        raise IndexError(f"index {k} is out of range for dim {dim} with size {n} (tensor "
                         f"shape {shape})")
    return index


def _slice_triple(s, n):
    """A slice as a normalised (start, stop, step), or None for the whole dim."""
    # (bounds may be 0-d integer tensors, x[i:i + 16]: made ints before slices compare;
    # or a trace's symbolic sizes, x[:n] with n = y.shape[0])
    s = slice(*(v if v is None or isinstance(v, Sym) else operator.index(v)
                for v in (s.start, s.stop, s.step)))
    if s.step is not None and s.step <= 0:
        raise ValueError(f"slice step must be positive, got {s.step}; use flip() to reverse")
    if s == slice(None) or s == slice(None, None, 1):
        return None
    if isinstance(n, Sym) or isinstance(s.start, Sym) or isinstance(s.stop, Sym):
        # (a trace's symbolic sizes: clamped by the case the traced sizes take)
        start, stop, step = sym_slice(s.start, s.stop, s.step, n, size_cases())
        return None if (start, stop, step) == (0, n, 1) else (start, stop, step)
    start, stop, step = s.indices(n)
    stop = max(stop, start)
    return None if (start, stop, step) == (0, n, 1) else (start, stop, step)


def getitem(x, key):
    """``x[key]`` with torch semantics; ints, slices, None and ``...`` give views."""
    shape = x._data.shape
    if type(key) is int and shape and -shape[0] <= key < shape[0]:
        # x[i] (a loop over a tensor's rows): one select, without the general parse
        return apply(shape_ops.SELECT, x, dim=0, index=key % shape[0])
    if type(key) is Tensor and shape and key._data.dtype.kind in "iu":
        # table[ix] (an embedding by hand, a batch of rows): the index op, unparsed
        return apply(INDEX, x, key, dims=(0,))
    arrays = _leading_arrays(shape, key)
    if arrays is not None:
        # x[i, j], x[i, j, None] (a gather by hand): the index op and an unsqueeze per
        # None, not the general parse's slice, reshape and index
        out = apply(INDEX, x, *arrays, dims=tuple(range(len(arrays))))
        lead = out.ndim - (len(shape) - len(arrays))   # (the indices' broadcast dims)
        for _ in range(len(key) - len(arrays)):
            out = shape_ops.unsqueeze(out, lead)
        return out
    basic = _basic_key(shape, key)
    if basic is not None:
        index, view_shape = basic
        if view_shape is not None and len(view_shape) == len(shape) - 1:
            # one int among whole slices (x[:, t], a loop over time steps): one select,
            # not a slice and a reshape (the one entry given is the int's)
            given = [d for d, s in enumerate(index) if s is not None]
            if len(given) == 1:
                return apply(shape_ops.SELECT, x, dim=given[0], index=index[given[0]][0])
        v = shape_ops.slice_dims(x, index)
        return v if view_shape is None else shape_ops.reshape(v, view_shape)
    return _Key(x.shape, key).get(x)


def _leading_arrays(shape, key):
    """The integer tensors of a key that is only integer tensors, one per leading dim,
    then Nones (``x[i, j]``, ``x[i, j, None]``): torch indexes those dims together and
    puts the Nones' new dims after them; None for any other key."""
    if type(key) is not tuple or len(key) < 2:
        return None
    arrays = []
    for k in key:
        if type(k) is not Tensor or k._data.dtype.kind not in "iu":
            break
        arrays.append(k)
    if not arrays or len(arrays) > len(shape) or any(k is not None
                                                     for k in key[len(arrays):]):
        return None
    return arrays


_BOUND_TYPES = (int, type(None))


def _basic_key(shape, key):
    """``x[key]`` for a key of ints and slices with int (or no) bounds and positive steps
    (``x[:6, :]``, ``x[:, -1]``) as ``_Key`` resolves it, without its general parse:
    ``(index, view_shape)``, the view shape None where no int drops a dim; None for any
    other key (or an int out of range: the parse raises the error)."""
    items = key if type(key) is tuple else (key,)
    if len(items) > len(shape):
        return None
    index, view_shape, dropped = [], [], False
    for k, n in zip(items, shape):
        if type(n) is not int:   # (a symbolic dim of a trace)
            return None
        if type(k) is slice:
            if (type(k.start) not in _BOUND_TYPES or type(k.stop) not in _BOUND_TYPES
                    or k.step is not None and (type(k.step) is not int or k.step <= 0)):
                return None
            start, stop, step = k.indices(n)
            stop = max(stop, start)
            if (start, stop, step) == (0, n, 1):
                index.append(None)
                view_shape.append(n)
            else:
                index.append((start, stop, step))
                view_shape.append(len(range(start, stop, step)))
        elif type(k) is int and -n <= k < n:
            k %= n
            index.append((k, k + 1, 1))
            dropped = True
        else:
            return None
    index += [None] * (len(shape) - len(items))
    return index, (tuple(view_shape) + tuple(shape[len(items):]) if dropped else None)


def setitem(x, key, value):
    """``x[key] = value``: the out-of-place write committed into ``x``, so autograd sees it
    (``x``'s gradient is zero at the written positions, ``value`` gets the gathered one)."""
    value_grad = isinstance(value, Tensor) and value.requires_grad
    # (never while a graph is traced: a module's buffer written there, ``self.ptr[0] = p``
    # or ``self.queue[:, p:p + n] = keys``, is state the graph must update at every call)
    eager = type(x._data) is np.ndarray and not modes.building_graph() and not (
        grad_mode.enabled and (x.requires_grad or value_grad))
    vshape = tuple(value.shape) if isinstance(value, Tensor) else np.shape(value)
    if not eager and _is_whole_mask(key) and _broadcasts(vshape, tuple(x.shape[key.ndim:])):
        # x[mask] = v is a where(): no data-dependent shapes, so it also traces.
        _check_count(key.ndim, x.ndim)   # (first, as the eager write checks)
        _check_mask(key, tuple(x.shape), 0)
        mask = shape_ops.reshape(key, tuple(key.shape) + (1,) * (x.ndim - key.ndim))
        commit_inplace(x, elementwise.where(mask, _as_value(value, x), source_of(x, value)))
        return
    k = _Key(x.shape, key)
    if not k.arrays and _overlaps_itself(x):
        # (a part of an expand: torch writes x[key] as a view, refused only where that
        # view overlaps itself, as an in-place op on it: inplace.writeable)
        getitem(x, key).copy_(value)
        return
    if eager:
        _write_eager(x, k, value)
    else:   # source_of: what the recorded ops read, safe from the write into x
        commit_inplace(x, k.put(source_of(x, value), value))


def _overlaps_itself(x) -> bool:
    """Whether ``x``'s elements share memory (an expand's), eagerly or as its layout is
    eagerly while tracing (``views.layout_of``)."""
    layout = x._data if type(x._data) is np.ndarray else views.layout_of(x)
    return layout is not None and views.overlaps_itself(layout)


def _is_whole_mask(key):
    return isinstance(key, Tensor) and key.dtype == dtypes.bool_ and key.ndim > 0


def _write_eager(x, k, value):
    data = x._data
    if not writeable(data):
        raise RuntimeError("x[...] = value on a tensor whose storage is read-only (an "
                           "expanded or broadcast view); call .clone() first")
    v = value._data if isinstance(value, Tensor) else as_array(value, x.dtype)
    v = v.reshape(_fit_shape(tuple(v.shape), tuple(k.result_shape())))
    k.write(data, v.astype(data.dtype, copy=False))
    bump(x)


# -- gather / scatter family (composites of index / index_put) ---------------------------------
def _check_int64(name, index):
    if index._data.dtype != _INT64:
        raise TypeError(f"{name}(): expected an int64 index tensor, got {index.dtype!r}")


def _grid_checks(x, dim, index, name):
    """``index`` fits ``x`` for a gather or scatter along ``dim`` (raises saying how not)."""
    _check_int64(name, index)
    if index.ndim != x.ndim:
        raise ShapeError(f"{name}(): index has shape {tuple(index.shape)} but the input has "
                         f"shape {tuple(x.shape)}; they need the same number of dims")
    for d in range(x.ndim):
        a, b = index.shape[d], x.shape[d]
        if d != dim and (a > b if type(a) is int and type(b) is int else   # (a trace's
                         not size_cases().at_least(b, a)):                  # symbolic dims)
            raise ShapeError(f"{name}(): index of shape {tuple(index.shape)} is larger than "
                             f"the input of shape {tuple(x.shape)} in dim {d}")


def _grid(x, dim, index, name):
    """Index tensors that make ``index_dims(x, grid, all dims)`` equal ``gather(x, dim,
    index)``: ``index`` on ``dim``, broadcast aranges on the other dims."""
    _grid_checks(x, dim, index, name)
    grid = []
    for d in range(x.ndim):
        if d == dim:
            grid.append(index)
        else:
            shape = [1] * x.ndim
            shape[d] = index.shape[d]
            grid.append(creation.constant(np.arange(index.shape[d]).reshape(shape)))
    return grid


def _as_1d(x):
    return shape_ops.reshape(x, (1,)) if x.ndim == 0 else x


def _scalar_dims(fn):
    """Run ``fn`` on 0-d tensors as if they were 1-d (torch allows 0-d gather/scatter)."""
    def wrapped(input, dim, index, *args, **kwargs):
        if input.ndim:
            return fn(input, dim, index, *args, **kwargs)
        args = [_as_1d(a) if isinstance(a, Tensor) else a for a in args]
        out = fn(_as_1d(input), dim, _as_1d(index), *args, **kwargs)
        return shape_ops.reshape(out, ())
    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


def _check_along(name, index, shape, dim):
    n = shape[dim]
    if index.size:
        low, high = index.min(), index.max()
        if low < 0 or high >= n:
            raise IndexError(f"{name}(): index {low if low < 0 else high} is out of range for "
                             f"dim {dim} with size {n} (tensor shape {tuple(shape)})")


def _along(a, dim):
    """``a`` as a contiguous ``(outer, n, inner)`` array, ``n`` its dim ``dim``."""
    s = a.shape
    return np.ascontiguousarray(a).reshape(math.prod(s[:dim]), s[dim], math.prod(s[dim + 1:]))


def _loops_take(x, index, dim) -> bool:
    """Whether ``kernels.along``'s loops take ``x`` (32- or 64-bit numbers) and ``index``
    (as large as ``x`` outside ``dim``)."""
    return x.dtype.kind in "iuf" and x.dtype.itemsize >= 4 and kernels.numba_available() \
        and all(i == n for d, (i, n) in enumerate(zip(index.shape, x.shape)) if d != dim)


def _grid_key(index, dim):
    """NumPy's key for ``x[i][index[i][j][k]][k]`` (dim 1): ``index`` and aranges."""
    return tuple(index if d == dim else
                 np.arange(n).reshape([-1 if e == d else 1 for e in range(index.ndim)])
                 for d, n in enumerate(index.shape))


def _gather_kernel(x, index, dim):
    _check_along("gather", index, x.shape, dim)
    if not _loops_take(x, index, dim):
        return row_major(x[_grid_key(index, dim)])
    out = np.empty(index.shape, x.dtype)
    kernels.along.gather(_along(x, dim), _along(index, dim), _along(out, dim))
    return out


def _scatter_add_kernel(x, index, src, dim):
    _check_along("scatter_add", index, x.shape, dim)
    out = np.array(x, order="C")
    src = src.astype(x.dtype, copy=False)
    if _loops_take(x, index, dim):
        kernels.along.scatter_add(_along(out, dim), _along(index, dim), _along(src, dim))
    else:
        np.add.at(out, _grid_key(index, dim), src)
    return out


# gather and scatter_add along a dim are primitives (ONNX GatherElements, ScatterElements):
# as index / index_put of an arange grid per dim they built the grids and indexed by all of
# them; kernels.along's loops read the index once (each is the other's gradient).
GATHER = defop("gather", _gather_kernel,
               lambda x, index, dim: ShapedType(tuple(index.shape), x.dtype),
               vjp=lambda g, out, x, index, dim: (apply(
                   SCATTER_ADD, creation.zeros_like(x, dtype=g.dtype), index, g, dim=dim),
                   None),
               attrs=("dim",), saves="1", checks_values=True,
               onnx=lambda e, node: [e.op("GatherElements", [e.input(0), e.input(1)],
                                          axis=node.attrs["dim"])],
               doc="out[i][j][k] = x[i][index[i][j][k]][k] (dim 1); index no larger than x "
                   "outside dim, its entries in [0, x.shape[dim]).")
SCATTER_ADD = defop("scatter_add", _scatter_add_kernel,
                    lambda x, index, src, dim: ShapedType(tuple(x.shape), x.dtype),
                    vjp=lambda g, out, x, index, src, dim: (
                        g if needs_grad(x) else None, None,
                        apply(GATHER, g, index, dim=dim) if needs_grad(src) else None),
                    attrs=("dim",), saves="1", checks_values=True,
                    onnx=lambda e, node: [e.op(
                        "ScatterElements",
                        [e.input(0), e.input(1), e.input(2, node.inputs[0].dtype)],
                        axis=node.attrs["dim"], reduction="add")],
                    doc="x with src[i][j][k] added at x[i][index[i][j][k]][k] (dim 1); src "
                        "shaped as index, repeated targets add up.")


@_scalar_dims
def gather(input, dim, index, *, sparse_grad=False):
    """``out[i][j][k] = input[i][index[i][j][k]][k]`` for ``dim == 1``, as ``torch.gather``."""
    d = normalize_dim(dim, input.ndim)
    _grid_checks(input, d, index, "gather")
    return apply(GATHER, input, index, dim=d)


def _scatter_values(src, index, like):
    """The part of ``src`` that scatter reads (``src`` may be larger than ``index``)."""
    src = _as_value(src, like)
    if src.ndim == 0:
        return src
    if src.ndim != index.ndim or any(s < i for s, i in zip(src.shape, index.shape)):
        raise ShapeError(f"scatter: src of shape {tuple(src.shape)} must have the dims of "
                         f"index (shape {tuple(index.shape)}) and be at least as large")
    return shape_ops.slice_dims(src, [None if s == i else (0, i, 1)
                                      for s, i in zip(src.shape, index.shape)])


@_scalar_dims
def scatter(input, dim, index, src=None, *, value=None, reduce=None):
    """A copy of ``input`` with ``input[i][index[i][j][k]][k] = src[i][j][k]`` (dim 1);
    ``src`` may be a tensor or a number (or pass ``value=``). ``reduce='add'`` adds."""
    if reduce not in (None, "add"):
        raise NotImplementedError(f"scatter: reduce={reduce!r} is not supported; use None "
                                  "or 'add' (scatter_add)")
    src = value if src is None else src
    if src is None:
        raise TypeError("scatter() needs src (a tensor) or value (a number)")
    d = normalize_dim(dim, input.ndim)
    if reduce == "add":
        _grid_checks(input, d, index, "scatter_add")
        src = _scatter_values(src, index, input)
        if tuple(src.shape) != tuple(index.shape):
            src = shape_ops.expand(src, tuple(index.shape))
        return apply(SCATTER_ADD, input, index, src, dim=d)
    grid = _grid(input, d, index, "scatter")
    return index_put_dims(input, _scatter_values(src, index, input), grid, range(input.ndim),
                          accumulate=reduce == "add")


def scatter_add(input, dim, index, src):
    """Like scatter, but values with the same target position add up."""
    return scatter(input, dim, index, src, reduce="add")


def _scatter_reduce_kernel(x, index, src, dim, reduce, include_self):
    """One pass of ``ufunc.at`` over the positions ``index`` names (with ``include_self``
    off, those positions first take a value that leaves the reduction alone: 0 for a sum,
    one of their own sources for an extremum)."""
    _check_along("scatter_reduce", index, x.shape, dim)
    key = _grid_key(index, dim)
    src = np.asarray(src).astype(x.dtype, copy=False)
    out = np.array(x, order="C")
    if not include_self:
        out[key] = src if reduce in ("amax", "amin") else 0
    _SCATTER_UFUNCS[reduce].at(out, key, src)
    if reduce == "mean":
        integer = x.dtype.kind in "iub"   # (bfloat16's kind is "V")
        count = np.zeros(x.shape, np.int64 if integer else x.dtype)
        np.add.at(count, key, np.ones(src.shape, count.dtype))   # (a scalar: 5x slower)
        count += include_self
        np.maximum(count, 1, out=count)   # (a position nothing reached keeps its input)
        out = (out // count).astype(x.dtype) if integer else out / count
    return out


_SCATTER_UFUNCS = {"sum": np.add, "mean": np.add, "amax": np.maximum, "amin": np.minimum}


def _hits(g, index, src, dim):
    """How many source entries each position receives (in ``g``'s dtype)."""
    ones = creation.ones_like(src, dtype=g.dtype)
    return apply(SCATTER_ADD, creation.zeros_like(g), index, ones, dim=dim)


def _scatter_reduce_vjp(g, out, x, index, src, dim, reduce, include_self):
    """Torch's rule: a sum passes ``g`` to every source of a position, a mean shares it
    among them (and the input, with ``include_self``), an extremum among the entries equal
    to the result; without ``include_self`` a position that received anything gives its
    input nothing (torch also counts an input equal to the result among the ties there, and
    gives it nothing; this does not count it)."""
    hits = _hits(g, index, src, dim) if reduce != "sum" or not include_self else None
    if reduce in ("sum", "mean"):
        share = g if reduce == "sum" else \
            g / elementwise.maximum(hits + float(include_self), creation.ones_like(g))
        grad_src = apply(GATHER, share, index, dim=dim)
        grad_x = share if include_self else elementwise.where(hits > 0, 0.0, g)
    else:
        src_tie = elementwise.eq(src, apply(GATHER, out, index, dim=dim))
        ties = apply(SCATTER_ADD, creation.zeros_like(g), index, src_tie.to(g.dtype), dim=dim)
        if include_self:
            self_tie = elementwise.eq(x, out)
            ties = ties + self_tie.to(g.dtype)
        share = g / elementwise.maximum(ties, creation.ones_like(g))
        grad_src = elementwise.where(src_tie, apply(GATHER, share, index, dim=dim), 0.0)
        grad_x = elementwise.where(self_tie, share, 0.0) if include_self else \
            elementwise.where(hits > 0, 0.0, g)
    return (grad_x if needs_grad(x) else None, None,
            grad_src if needs_grad(src) else None)


def _onnx_scatter_reduce(e, node):
    """ScatterElements with the reduction (opset 18 for max and min); without
    ``include_self`` a first ScatterElements writes a neutral start (0, or the sources
    themselves for an extremum); a mean divides by a scatter-added count (at least 1: a
    position nothing reached keeps its input)."""
    reduce, include_self = node.attrs["reduce"], node.attrs["include_self"]
    axis, dtype = node.attrs["dim"], node.inputs[0].dtype
    x, index, src = e.input(0), e.input(1), e.input(2, dtype)
    if not include_self:
        start = src if reduce in ("amax", "amin") else \
            e.op("Mul", [src, e.const(np.zeros((), dtype))])
        x = e.op("ScatterElements", [x, index, start], axis=axis)
    kind = {"sum": "add", "mean": "add", "amax": "max", "amin": "min"}[reduce]
    out = e.op("ScatterElements", [x, index, src], axis=axis, reduction=kind)
    if reduce == "mean":
        one = e.const(np.ones((), dtype))
        zeros = e.op("Mul", [e.input(0), e.const(np.zeros((), dtype))])
        start = e.op("Add", [zeros, one]) if include_self else zeros
        ones = e.op("Add", [e.op("Mul", [src, e.const(np.zeros((), dtype))]), one])
        count = e.op("Max", [e.op("ScatterElements", [start, index, ones], axis=axis,
                                  reduction="add"), e.op("Add", [zeros, one])])
        if np.dtype(dtype).kind in "iub":   # (floor division, as eager; ONNX's truncates)
            quotient = e.op("Div", [e.cast(out, np.float64), e.cast(count, np.float64)])
            return [e.cast(e.op("Floor", [quotient]), dtype)]
        out = e.op("Div", [out, count])
    return [out]


# scatter_reduce's sum, mean, amax and amin in one op, one pass over the index (as composites
# of scatters, where and an (entries x positions) comparison they took ten ops and memory
# quadratic in the index's length); "prod" stays a composite
SCATTER_REDUCE = defop(
    "scatter_reduce", _scatter_reduce_kernel,
    lambda x, index, src, dim, reduce, include_self: ShapedType(tuple(x.shape), x.dtype),
    vjp=_scatter_reduce_vjp, attrs=("dim", "reduce", "include_self"), saves="io",
    checks_values=True, onnx=_onnx_scatter_reduce,
    doc="x with each src[i][j][k] combined into x[i][index[i][j][k]][k] (dim 1) by reduce "
        "(sum, mean, amax, amin), x itself taking part where include_self; src shaped as "
        "index.")


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """``input`` with each ``src[i][j][k]`` combined into ``input[i][index[i][j][k]][k]``
    (dim 1) by ``reduce``: "sum", "mean", "amax", "amin" or "prod", the input's own value
    taking part where ``include_self`` (else a position that receives something starts
    from it alone), as ``torch.scatter_reduce``; the gradient of "amax"/"amin" is shared
    among the tied entries, as torch's (see ``_scatter_reduce_vjp``). All but "prod" are one
    op; "prod" compares each target position with every source entry of its slice, so it
    costs (entries along ``dim``) x (positions along ``dim``) per slice."""
    if reduce not in ("sum", "mean", "amax", "amin", "prod"):
        raise ValueError(f"scatter_reduce: reduce must be 'sum', 'mean', 'amax', 'amin' or "
                         f"'prod', got {reduce!r}")
    if input.dtype == dtypes.bool_:   # (torch's: "sum" and "amax" are or, "prod" "and")
        return scatter_reduce(input.long(), dim, index, src.long(), reduce,
                              include_self=include_self).bool()
    d = normalize_dim(dim, input.ndim)
    if input.ndim == 0:   # (one position: the reduction of a 1-element vector)
        flat = scatter_reduce(shape_ops.reshape(input, (1,)), 0, shape_ops.reshape(index, (-1,)),
                              src if not isinstance(src, Tensor) or src.ndim == 0
                              else shape_ops.reshape(src, (-1,)), reduce,
                              include_self=include_self)
        return shape_ops.reshape(flat, ())
    _grid_checks(input, d, index, "scatter_reduce")
    src = _scatter_values(src, index, input)
    if tuple(src.shape) != tuple(index.shape):
        src = shape_ops.expand(src, tuple(index.shape)) if src.ndim == 0 else \
            shape_ops.slice_dims(src, [(0, n, 1) for n in index.shape])
    if reduce != "prod":
        return apply(SCATTER_REDUCE, input, index, src, dim=d, reduce=reduce,
                     include_self=bool(include_self))
    # (where a position receives nothing, the result is the input, include_self or not)
    hit = None if include_self else \
        scatter(creation.zeros_like(input, dtype=dtypes.bool_), d, index, True)
    if any(i != n for k, (i, n) in enumerate(zip(index.shape, input.shape)) if k != d):
        raise NotImplementedError(f"scatter_reduce(reduce={reduce!r}): the index (shape "
                                  f"{tuple(index.shape)}) must cover the input (shape "
                                  f"{tuple(input.shape)}) outside dim {d}; expand it")
    # every source entry j against every target position t of its slice: (..., j, t, ...)
    # (one_hot checks the index's range, as scatter does)
    here = shape_ops.movedim(one_hot(index, input.shape[d]).to(dtypes.bool_), -1, d + 1)
    candidates = elementwise.where(here, shape_ops.unsqueeze(src, d + 1), 1)
    if include_self:
        return red.prod(shape_ops.cat([shape_ops.unsqueeze(input, d), candidates], d), d)
    return elementwise.where(hit, red.prod(candidates, d), input)


def _vector_index(name, index):
    if index.ndim > 1 or index._data.dtype.kind not in "iu":
        raise TypeError(f"{name}(): index must be a 0-d or 1-d integer tensor, got shape "
                        f"{tuple(index.shape)} and dtype {index.dtype!r}")
    return shape_ops.reshape(index, (-1,))


def index_select(input, dim, index):
    """The entries ``index`` (a 1-d integer tensor) of dim ``dim``."""
    d = normalize_dim(dim, input.ndim)
    return index_dims(input, [_vector_index("index_select", index)], (d,))


def index_add(input, dim, index, source, *, alpha=1):
    """``input`` with ``alpha * source[..., i, ...]`` added at ``input[..., index[i], ...]``
    (duplicates in ``index`` add up)."""
    d = normalize_dim(dim, input.ndim)
    index = _vector_index("index_add", index)
    if alpha != 1:
        source = source * alpha
    want = _infer_index(input, index, dims=(d,)).shape
    if tuple(source.shape) != want:
        raise ShapeError(f"index_add(): source has shape {tuple(source.shape)}, but indexing "
                         f"dim {d} of shape {tuple(input.shape)} by {index.shape[0]} entries "
                         f"needs {want}")
    return index_put_dims(input, source, [index], (d,), accumulate=True, want=want)


def index_copy(input, dim, index, source):
    """``input`` with ``input[..., index[i], ...] = source[..., i, ...]`` along ``dim``, as
    ``torch.index_copy`` (with duplicates in ``index``, which of them lands is unspecified,
    as in torch)."""
    d = normalize_dim(dim, input.ndim)
    index = _vector_index("index_copy", index)
    want = _infer_index(input, index, dims=(d,)).shape
    if tuple(source.shape) != want:
        raise ShapeError(f"index_copy(): source has shape {tuple(source.shape)}, but indexing "
                         f"dim {d} of shape {tuple(input.shape)} by {index.shape[0]} entries "
                         f"needs {want}")
    return index_put_dims(input, source, [index], (d,), want=want)


def index_fill(input, dim, index, value):
    """``input`` with ``value`` (a number or 0-d tensor) at the positions ``index`` of
    ``dim``, as ``torch.index_fill``: a ``where`` over a mask of those positions, so a
    tensor ``value`` gets the gradient of each filled entry once, however often ``index``
    names it (torch's rule)."""
    d = normalize_dim(dim, input.ndim)
    index = _vector_index("index_fill", index)
    n = input.shape[d]
    hit = index_put_dims(creation.zeros(n, dtype=dtypes.bool_), True, [index], (0,))
    # (the mask broadcasts over the dims after d; the ones before it broadcast anyway)
    return masked_fill(input, shape_ops.reshape(hit, (n,) + (1,) * (input.ndim - d - 1)),
                       value)


def index_put(input, indices, values, accumulate=False):
    """``input[indices] = values`` out of place (``indices``: a tuple of tensors for the
    leading dims), adding instead of writing when ``accumulate``."""
    indices = tuple(indices)
    if any(i.dtype == dtypes.bool_ for i in indices):
        k = _Key(input.shape, indices)
        indices, dims = k.arrays, k.dims
    else:
        dims = range(len(indices))
    return index_put_dims(input, values, indices, dims, accumulate)


def take_along_dim(input, indices, dim=None):
    """``gather`` with the index broadcast against the input outside ``dim``; with ``dim``
    None both are flattened first."""
    _check_int64("take_along_dim", indices)
    if dim is None:
        return gather(shape_ops.flatten(input), 0, shape_ops.flatten(indices))
    if input.ndim != indices.ndim:
        raise ShapeError(f"take_along_dim(): input of shape {tuple(input.shape)} and indices "
                         f"of shape {tuple(indices.shape)} need the same number of dims")
    d = normalize_dim(dim, input.ndim)
    common = broadcast_shapes(*(tuple(s[:d]) + (1,) + tuple(s[d + 1:])
                                for s in (input.shape, indices.shape)))
    x = shape_ops.expand(input, common[:d] + (input.shape[d],) + common[d + 1:])
    i = shape_ops.expand(indices, common[:d] + (indices.shape[d],) + common[d + 1:])
    return gather(x, d, i)


# -- masks --------------------------------------------------------------------------------------
def masked_fill(input, mask, value):
    """``input`` with ``value`` (a number or 0-d tensor) where ``mask`` is True."""
    if mask.dtype != dtypes.bool_:
        raise TypeError(f"masked_fill expects a bool mask, got {mask.dtype!r}")
    if isinstance(value, Tensor) and value.ndim:
        raise ValueError(f"masked_fill only supports a 0-d value tensor, got shape "
                         f"{tuple(value.shape)}")
    broadcast_shapes(tuple(input.shape), tuple(mask.shape))
    # (out of place, the mask may broadcast the input to a larger shape, as in torch; the
    # in-place method refuses that: inplace.inplace)
    return elementwise.where(mask, _as_value(value, input), input)


def masked_select(input, mask):
    """The 1-d tensor of the entries of ``input`` where ``mask`` (broadcast) is True."""
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape))
    return getitem(shape_ops.expand(input, shape), shape_ops.expand(mask, shape))


def masked_scatter(input, mask, source):
    """``input`` with the entries where ``mask`` (broadcast) is True taken from ``source``'s
    elements in order, as ``torch.masked_scatter``: the k-th True entry (row-major) reads
    ``source.flatten()[k]``, a gather at the mask's running count, so it traces with static
    shapes and ``source`` gets the gradient of the entries it filled (a source with fewer
    elements than True entries is an IndexError of that gather, eager and compiled)."""
    if mask.dtype != dtypes.bool_:
        raise TypeError(f"masked_scatter expects a bool mask, got {mask.dtype!r}")
    shape = tuple(input.shape)
    if broadcast_shapes(shape, tuple(mask.shape)) != shape:
        raise ShapeError(f"masked_scatter: the mask of shape {tuple(mask.shape)} does not "
                         f"broadcast to the input's shape {shape}")
    flat = shape_ops.reshape(shape_ops.expand(mask, shape), (-1,))
    position = elementwise.clamp_min(red.cumsum(flat, 0) - 1, 0)
    taken = index_select(shape_ops.reshape(source, (-1,)), 0, position)
    return elementwise.where(mask, shape_ops.reshape(shape_ops.cast_like(taken, input), shape),
                             input)


def _infer_trilu(x, diagonal, upper):
    if x.ndim < 2:
        raise ShapeError(f"{'triu' if upper else 'tril'}: expected a tensor with 2 or more "
                         f"dims, got shape {tuple(x.shape)}")
    return ShapedType(tuple(x.shape), x.dtype)


def _onnx_trilu(e, node):
    k = e.scalar(node.attrs["diagonal"], np.int64, "k")
    return [e.op("Trilu", [e.input(0), k], upper=int(bool(node.attrs["upper"])))]


def _from_onnx_trilu(b, xs, attrs):
    k = b.ints(xs[1], "k")[0] if len(xs) > 1 and xs[1] is not None else 0
    return b.op(TRILU, xs[0], diagonal=k, upper=bool(attrs.get("upper", 1)))


# A primitive rather than ``where(arange(n)[:, None] - arange(m) ...)``: one node instead of
# five, it needs no concrete matrix size (symbolic dims while tracing) and it is ONNX's Trilu.
TRILU = defop("trilu", lambda x, diagonal, upper: (np.triu if upper else np.tril)(x, diagonal),
              _infer_trilu, vjp=lambda g, out, x, diagonal, upper: _trilu(g, diagonal, upper),
              attrs=("diagonal", "upper"), saves="",
              onnx=_onnx_trilu,
              onnx_import={"Trilu": _from_onnx_trilu},
              doc="The upper or lower triangle of the last two dims from ``diagonal`` on.")


def _trilu(x, diagonal, upper):
    if isinstance(diagonal, bool) or not isinstance(diagonal, (int, np.integer)):
        raise TypeError(f"diagonal must be an int, got {diagonal!r}")
    _infer_trilu(x, diagonal, upper)   # eager dispatch runs no infer rule; NumPy takes 1-d
    return apply(TRILU, x, diagonal=int(diagonal), upper=upper)


def tril(input, diagonal=0):
    """The lower triangle of the last two dims: entries with ``col - row <= diagonal``
    kept, the rest zero (``diagonal`` > 0 keeps diagonals above the main one).

    >>> tril(ones(2, 3))
    tensor([[1., 0., 0.],
            [1., 1., 0.]])
    """
    return _trilu(input, diagonal, False)


def triu(input, diagonal=0):
    """The upper triangle of the last two dims: entries with ``col - row >= diagonal``
    kept, the rest zero (``triu(x, 1)`` is the strict upper triangle, a causal mask).

    >>> triu(ones(2, 3), 1)
    tensor([[0., 1., 1.],
            [0., 0., 1.]])
    """
    return _trilu(input, diagonal, True)


def nonzero(input, *, as_tuple=False):
    """Positions of the non-zero entries: an (n, ndim) int64 tensor, or with ``as_tuple``
    one 1-d tensor per dim. Data-dependent, so it runs eagerly only."""
    data = input._concrete("nonzero()")
    if as_tuple:
        return tuple(Tensor._make(p.astype(_INT64)) for p in np.nonzero(data))
    return Tensor._make(np.argwhere(data).astype(_INT64))


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each entry of ``input`` along ``dim`` (of the flattened input when None)
    ``repeats`` times: an int, or a 1-d int tensor with one count per entry (whose values
    must be known: eager only). With no ``repeats``, ``input`` holds the counts and the
    result repeats their indices, as ``torch.repeat_interleave``.

    >>> dg.tensor([1, 2]).repeat_interleave(2)
    tensor([1, 1, 2, 2])
    """
    if repeats is None:
        counts = input
        input, dim = creation.arange(counts.shape[0]), 0
        repeats = counts
    if dim is None:
        input, dim = shape_ops.reshape(input, (-1,)), 0
    d = normalize_dim(dim, input.ndim)
    if isinstance(repeats, Tensor) and repeats.ndim == 0:
        repeats = int(repeats._concrete("repeat_interleave(repeats=0-d tensor)"))
    if isinstance(repeats, int):   # a view of repeated slices: traces with symbolic dims
        shape = tuple(input.shape)
        wide = shape_ops.expand(shape_ops.unsqueeze(input, d + 1),
                                *shape[:d + 1], repeats, *shape[d + 1:])
        return shape_ops.flatten(wide, d, d + 1)
    counts = repeats._concrete("repeat_interleave(repeats=tensor)")
    if counts.ndim != 1 or counts.shape[0] != input.shape[d] or (counts < 0).any():
        raise ValueError(f"repeat_interleave: repeats must be {input.shape[d]} non-negative "
                         f"counts (one per entry of dim {d}), got {counts.tolist()}")
    index = np.repeat(np.arange(counts.shape[0]), counts)
    return index_select(input, d, creation.constant(index.astype(_INT64)))


def unfold(input, dimension, size, step):
    """``Tensor.unfold``: the windows of ``size`` entries, every ``step``, along
    ``dimension``, as a new last dim (the window count replaces ``dimension``).

    >>> dg.arange(5.0).unfold(0, 2, 2)
    tensor([[0., 1.],
            [2., 3.]])
    """
    d = normalize_dim(dimension, max(input.ndim, 1))
    length = input.shape[d] if input.ndim else 1
    if size > length or step <= 0:
        raise ValueError(f"unfold: size {size} must be at most the dim's length {length} and "
                         f"step {step} positive")
    count = (length - size) // step + 1
    index = (np.arange(count)[:, None] * step + np.arange(size)).reshape(-1)
    windows = index_select(input if input.ndim else shape_ops.reshape(input, (1,)), d,
                           creation.constant(index.astype(_INT64)))
    shape = tuple(windows.shape)
    windows = shape_ops.reshape(windows, shape[:d] + (count, size) + shape[d + 1:])
    return shape_ops.movedim(windows, d + 1, -1)


def _diagonal_bounds(shape, offset):
    """(first row, first column, length) of the ``offset`` diagonal of a matrix."""
    row, col = max(-offset, 0), max(offset, 0)
    return row, col, max(min(shape[0] - row, shape[1] - col), 0)


def _diagonal_kernel(x, offset):
    """The diagonals of the last two dims as a strided view of ``x`` (np.diagonal's is
    read-only): writes to it reach ``x``, as torch's view."""
    row, col, n = _diagonal_bounds(x.shape[-2:], offset)
    return as_strided(x[..., row:, col:], shape=x.shape[:-2] + (n,),
                      strides=x.strides[:-2] + (x.strides[-2] + x.strides[-1],),
                      writeable=x.flags.writeable)


def _infer_diagonal(x, offset):
    if any(not isinstance(d, (int, np.integer)) for d in x.shape[-2:]):
        raise ShapeError(f"diagonal: the matrix's shape {tuple(x.shape)} has a dynamic dim; "
                         "mark its dims static")
    n = _diagonal_bounds(tuple(x.shape[-2:]), offset)[2]
    return ShapedType(tuple(x.shape[:-2]) + (n,), x.dtype)


def _diagonal_positions(shape, offset):
    """The diagonal's (rows, columns) as constant index tensors."""
    row, col, n = _diagonal_bounds(shape, offset)
    at = np.arange(n, dtype=_INT64)
    return creation.constant(at + row), creation.constant(at + col)


def _diagonal_vjp(g, out, x, offset):
    """``g`` on the diagonals of zeros shaped like ``x`` (the matrices' dims moved first,
    so that one ``index_put`` writes every batch's)."""
    zeros = creation.zeros_like(shape_ops.movedim(x, (-2, -1), (0, 1)), dtype=g.dtype)
    written = index_put(zeros, _diagonal_positions(tuple(x.shape[-2:]), offset),
                        shape_ops.movedim(g, -1, 0))
    return shape_ops.movedim(written, (0, 1), (-2, -1))


def _onnx_diagonal(e, node):
    """A Gather of the diagonal's positions in the flattened matrices (static shape)."""
    *batch, rows, cols = node.inputs[0].shape
    row, col, n = _diagonal_bounds((rows, cols), node.attrs["offset"])
    flat = e.op("Reshape", [e.input(0), e.ints([*batch, rows * cols])])
    return [e.op("Gather", [flat, e.ints((row + np.arange(n)) * cols + col + np.arange(n))],
                 axis=len(batch))]


# A view, as torch's: ``w.diagonal().mul_(0.5)`` or ``.fill_(1.0)`` (a weight's
# initialisation under no_grad) writes into ``w`` (an advanced index's copy did not, silently)
DIAGONAL = defop("diagonal", _diagonal_kernel, _infer_diagonal, vjp=_diagonal_vjp,
                 attrs=("offset",), saves="", view=True, onnx=_onnx_diagonal,
                 doc="The ``offset`` diagonal of the last two dims' matrices (above the "
                     "main one for offset > 0), a view.")


def diagonal(input, offset=0, dim1=0, dim2=1):
    """The ``offset`` diagonal (above the main one for ``offset > 0``) of the matrices
    whose rows are dim ``dim1`` and columns dim ``dim2``, a view, as ``torch.diagonal``:
    the other dims first, then the diagonal's (the two dims moved last by a view).

    >>> dg.diagonal(dg.arange(9).reshape(3, 3), 1)
    tensor([1, 5])
    """
    if input.ndim < 2:
        raise ValueError(f"diagonal: input of shape {tuple(input.shape)} has fewer than 2 "
                         "dims")
    d1, d2 = normalize_dim(dim1, input.ndim), normalize_dim(dim2, input.ndim)
    if d1 == d2:
        raise ValueError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if (d1, d2) != (input.ndim - 2, input.ndim - 1):
        input = shape_ops.movedim(input, (d1, d2), (-2, -1))
    return apply(DIAGONAL, input, offset=int(offset))


_diagonal_of = diagonal   # (diag's argument ``diagonal`` hides the function, as in torch)


def diag(input, diagonal=0):
    """A 1-d tensor laid on the ``diagonal`` of a square matrix of zeros, or the diagonal
    of a matrix (``diagonal(input, diagonal)``), as ``torch.diag``.

    >>> dg.diag(dg.tensor([1.0, 2.0]))
    tensor([[1., 0.],
            [0., 2.]])
    """
    if input.ndim == 2:   # (a copy, as torch's: not the view ``diagonal`` gives)
        return _diagonal_of(input, diagonal).clone()
    if input.ndim != 1:
        raise ValueError(f"diag expects a 1-d or 2-d tensor, got shape {tuple(input.shape)}")
    return diag_embed(input, diagonal)


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Each vector of ``input``'s last dim laid on the ``offset`` diagonal of a square
    matrix of zeros whose rows and columns are the result's dims ``dim1`` and ``dim2``, as
    ``torch.diag_embed`` (``diag`` of a 1-d tensor is its 2-d case).

    >>> dg.diag_embed(dg.tensor([[1.0, 2.0]])).shape
    dualgraph.Size([1, 2, 2])
    """
    d1, d2 = normalize_dim(dim1, input.ndim + 1), normalize_dim(dim2, input.ndim + 1)
    if d1 == d2:
        raise ValueError(f"diag_embed: dim1 and dim2 are both dim {d1}; give two dims")
    k = abs(offset)
    n = input.shape[-1] + k
    mask = creation.constant(np.eye(n, k=offset, dtype=bool))
    # the entry for row i (offset >= 0) or column j (< 0) is input[..., i] / input[..., j]
    values = input
    if k:
        values = shape_ops.cat([input, creation.zeros(tuple(input.shape[:-1]) + (k,),
                                                      dtype=input.dtype)], -1)
    values = shape_ops.unsqueeze(values, -1 if offset >= 0 else -2)
    out = elementwise.where(mask, values, 0)
    return shape_ops.movedim(out, (-2, -1), (d1, d2))


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values of ``input`` (of its slices along ``dim``), sorted; with
    ``return_inverse`` also where each entry went, with ``return_counts`` how often each
    value occurs, as ``torch.unique``. Data-dependent, so it runs eagerly only.

    >>> dg.unique(dg.tensor([3, 1, 3]), return_counts=True)
    (tensor([1, 3]), tensor([1, 2]))
    """
    data = input._concrete("unique()")
    values, inverse, counts = np.unique(data, return_inverse=True, return_counts=True,
                                        axis=dim, equal_nan=False)   # (each NaN its own)
    out = [Tensor._make(values)]
    if return_inverse:
        shape = data.shape if dim is None else (data.shape[normalize_dim(dim, data.ndim)],)
        out.append(Tensor._make(inverse.reshape(shape).astype(_INT64)))
    if return_counts:
        out.append(Tensor._make(counts.astype(_INT64)))
    return out[0] if len(out) == 1 else tuple(out)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """``input`` with each run of equal consecutive values (slices along ``dim``) kept
    once, as ``torch.unique_consecutive``; ``return_inverse`` maps each entry to its run,
    ``return_counts`` gives each run's length. Data-dependent, so it runs eagerly only.

    >>> dg.unique_consecutive(dg.tensor([8, 8, 4, 8]), return_counts=True)
    (tensor([8, 4, 8]), tensor([2, 1, 1]))
    """
    data = input._concrete("unique_consecutive()")
    axis = 0 if dim is None else normalize_dim(dim, data.ndim)
    rows = data.reshape(-1) if dim is None else np.moveaxis(data, axis, 0)
    n = rows.shape[0]
    differs = (rows[1:] != rows[:-1]).reshape(max(n - 1, 0), -1).any(axis=1) if n > 1 \
        else np.zeros(0, dtype=bool)
    starts = np.flatnonzero(np.concatenate([[n > 0], differs]))
    values = rows[starts] if dim is None else np.moveaxis(rows[starts], 0, axis)
    out = [Tensor._make(np.ascontiguousarray(values))]
    if return_inverse:
        inverse = np.cumsum(np.concatenate([[0], differs])).astype(_INT64)[:n]
        out.append(Tensor._make(inverse.reshape(data.shape if dim is None else (n,))))
    if return_counts:
        out.append(Tensor._make(np.diff(np.append(starts, n)).astype(_INT64)))
    return out[0] if len(out) == 1 else tuple(out)


def one_hot(tensor, num_classes=-1):
    """``F.one_hot``: int64 indices -> int64 one-hot rows with ``num_classes`` columns (the
    largest index + 1 when -1)."""
    if tensor._data.dtype != _INT64:
        raise TypeError(f"one_hot is only applicable to int64 index tensors, got "
                        f"{tensor.dtype!r}")
    if num_classes == -1:
        data = tensor._concrete("one_hot(num_classes=-1)")
        num_classes = int(data.max()) + 1 if data.size else 0
    eye = creation.constant(np.eye(num_classes, dtype=_INT64))
    return index_dims(eye, [tensor], (0,), nonnegative=True)   # (a class of -1: an error)


# -- sorting --------------------------------------------------------------------------------------
def _argsort_kernel(x, dim, descending):
    if x.dtype == dtypes.bfloat16_np:
        x = x.astype(np.float32)
    if not descending:
        return np.argsort(x, axis=dim, kind="stable").astype(_INT64, copy=False)
    # Descending and stable (ties keep their order, NaN first as in torch): sort the
    # reversed array ascending, then reverse the order and map positions back.
    n = x.shape[dim]
    order = np.argsort(np.flip(x, dim), axis=dim, kind="stable")
    return (n - 1 - np.flip(order, dim)).astype(_INT64)


def _onnx_argsort(e, node):
    """argsort -> the indices of a TopK over the whole dim, sorted: among equal values
    ONNX's TopK puts the lower index first, as dualgraph's stable sort does (NaN's place
    is unspecified in ONNX; dualgraph counts NaN as largest)."""
    x, dim = node.inputs[0], node.attrs["dim"]
    size = x.shape[dim]
    k = (e.ints([size]) if isinstance(size, int)
         else e.op("Gather", [e.op("Shape", [e.input(0)]), e.ints([dim])]))
    _, indices = e.outputs("TopK", [e.input(0), k], 2, axis=dim,
                           largest=int(bool(node.attrs["descending"])), sorted=1)
    return [indices]


ARGSORT = defop("argsort", _argsort_kernel,
                lambda x, dim, descending: ShapedType(tuple(x.shape), _INT64),
                attrs=("dim", "descending"), saves="",
                onnx=_onnx_argsort,
                doc="Positions that sort x along dim (always stable; NaN counts as largest).")


def argsort(input, dim=-1, descending=False, stable=False):
    """The positions that sort ``input`` along ``dim`` (always stable, so ``stable`` only
    exists for torch's signature)."""
    if input.ndim == 0:
        return creation.zeros_like(input, dtype=dtypes.int64)
    d = normalize_dim(dim, input.ndim)
    return apply(ARGSORT, input, dim=d, descending=bool(descending))


SortResult = namedtuple("sort", ["values", "indices"])
TopKResult = namedtuple("topk", ["values", "indices"])


def sort(input, dim=-1, descending=False, stable=False):
    """``(values, indices)`` of ``input`` sorted along ``dim``; values carry gradients."""
    indices = argsort(input, dim, descending, stable)
    if input.ndim == 0:
        return SortResult(input, indices)
    return SortResult(gather(input, dim, indices), indices)


def _topk_kernel(x, k, dim, largest):
    """The first ``k`` of argsort's order along ``dim`` (stable: among equal values the
    lower position first) and the values there."""
    indices = np.ascontiguousarray(
        _argsort_kernel(x, dim, largest)[(slice(None),) * dim + (slice(0, k),)])
    return np.take_along_axis(x, indices, axis=dim), indices


def _infer_topk(x, k, dim, largest):
    shape = tuple(x.shape[:dim]) + (k,) + tuple(x.shape[dim + 1:])
    return ShapedType(shape, x.dtype), ShapedType(shape, _INT64)


def _onnx_topk(e, node):
    """topk -> TopK, sorted (the same order among equal values: ``_onnx_argsort``)."""
    a = node.attrs
    return list(e.outputs("TopK", [e.input(0), e.ints([a["k"]])], 2, axis=a["dim"],
                          largest=int(bool(a["largest"])), sorted=1))


# One op each way for what argsort, narrow and gather were: the values' gradient goes back
# to the positions they came from, as gather's does.
TOPK = defop("topk", _topk_kernel, _infer_topk,
             vjp=lambda g, out, x, k, dim, largest: apply(
                 SCATTER_ADD, creation.zeros_like(x, dtype=g[0].dtype), out[1], g[0],
                 dim=dim),
             attrs=("k", "dim", "largest"), num_outputs=2, saves="o", saved_outputs=(1,),
             differentiable_outputs=(0,), onnx=_onnx_topk,
             doc="The k largest (or smallest) entries of x along dim, sorted, and their "
                 "positions (stable: the lower position first among equal values).")


def topk(input, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (or smallest) entries along ``dim`` and their positions."""
    d = normalize_dim(dim, input.ndim)
    n = input.shape[d] if input.ndim else 1
    if not 0 <= k <= n:
        raise IndexError(f"topk: k={k} is out of range for dim {d} of size {n} (shape "
                         f"{tuple(input.shape)})")
    if input.ndim == 0:
        return TopKResult(input, argsort(input))
    return TopKResult(*apply(TOPK, input, k=int(k), dim=d, largest=bool(largest)))


KthvalueResult = namedtuple("kthvalue", ["values", "indices"])


def kthvalue(input, k, dim=-1, keepdim=False):
    """The ``k``-th smallest entry along ``dim`` (``k`` from 1) and its position, as
    ``torch.kthvalue``: the ``k - 1``-th of a stable sort, so its value carries the
    gradient (among equal values the position may be another of them than torch's)."""
    d = normalize_dim(dim, input.ndim) if input.ndim else 0
    n = input.shape[d] if input.ndim else 1
    if not 1 <= k <= n:
        raise IndexError(f"kthvalue: k={k} is out of range for dim {d} of size {n} (shape "
                         f"{tuple(input.shape)}); k counts from 1")
    values, indices = sort(input, d, stable=True)
    if input.ndim == 0:
        return KthvalueResult(values, indices)
    pick = (lambda t: shape_ops.narrow(t, d, k - 1, 1)) if keepdim else \
        (lambda t: shape_ops.select(t, d, k - 1))
    return KthvalueResult(pick(values), pick(indices))


def _cumulative_index_kernel(x, dim, largest):
    """Where the running max (``largest``) or min along ``dim`` was last attained: the
    latest of equal extremes, and a NaN's own position from it on, as torch's loop."""
    w = np.moveaxis(x, dim, -1)
    if w.dtype.kind == "b":
        w = w.view(np.uint8)
    running = (np.maximum if largest else np.minimum).accumulate(w, axis=-1)
    hit = w == running
    if w.dtype.kind == "f":
        hit |= np.isnan(w)
    positions = np.where(hit, np.arange(w.shape[-1]), 0)
    return row_major(np.moveaxis(np.maximum.accumulate(positions, axis=-1), -1, dim)
                     .astype(_INT64))


# Only the positions are a primitive: the values are a gather at them, whose gradient (a
# scatter-add to those positions) is torch's cummax backward.
CUMULATIVE_INDEX = defop("cumulative_index", _cumulative_index_kernel,
                         lambda x, dim, largest: ShapedType(tuple(x.shape), _INT64),
                         attrs=("dim", "largest"), saves="",
                         doc="Where the running max (min) along dim was last attained.")

CummaxResult = namedtuple("cummax", ["values", "indices"])
CumminResult = namedtuple("cummin", ["values", "indices"])


def _cumulative_extreme(input, dim, largest, result):
    if input.ndim == 0:
        return result(input, creation.zeros_like(input, dtype=dtypes.int64))
    d = normalize_dim(dim, input.ndim)
    indices = apply(CUMULATIVE_INDEX, input, dim=d, largest=largest)
    return result(gather(input, d, indices), indices)


def cummax(input, dim):
    """The running maximum along ``dim`` and where it was (last) attained, as
    ``torch.cummax``.

    >>> dg.cummax(dg.tensor([1.0, 3.0, 2.0]), 0).indices
    tensor([0, 1, 1])
    """
    return _cumulative_extreme(input, dim, True, CummaxResult)


def cummin(input, dim):
    """The running minimum along ``dim`` and where it was (last) attained, as
    ``torch.cummin``."""
    return _cumulative_extreme(input, dim, False, CumminResult)


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The ``q``-th quantiles of ``input`` along ``dim`` (of all its elements when None),
    as ``torch.quantile``: sorted values at position ``q * (n - 1)``, interpolated
    ``"linear"``-ly between the two neighbours (or ``"lower"``, ``"higher"``,
    ``"nearest"``, ``"midpoint"``). ``q`` is a float or a 1-D list or tensor of them (a
    leading dim of the result); a composite of sort, so it has a gradient and traces. A
    slice holding a NaN has the quantile NaN, as torch's."""
    return _quantile(input, q, dim, keepdim, interpolation, "quantile")


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """As :func:`quantile`, over the values of each slice that are not NaN (the position
    ``q * (count - 1)`` of each slice's own count; NaN where a slice is all NaN), as
    ``torch.nanquantile``: robust statistics of data with missing entries."""
    return _quantile(input, q, dim, keepdim, interpolation, "nanquantile")


def _quantile(input, q, dim, keepdim, interpolation, name):
    if not input.is_floating_point():
        raise TypeError(f"{name}: the input must be a float tensor, got {input.dtype}; "
                        "call .float() first")
    if isinstance(q, Tensor) and type(q._data) is np.ndarray:   # (checked where it has values)
        _check_quantiles(q._data)
    elif not isinstance(q, Tensor):
        _check_quantiles(q)
    if interpolation not in ("linear", "lower", "higher", "nearest", "midpoint"):
        raise ValueError(f"{name}: unknown interpolation {interpolation!r}")
    x, d = ((shape_ops.reshape(input, -1), 0) if dim is None
            else (input, normalize_dim(dim, input.ndim)))
    ordered = sort(x, d).values   # (NaN last)
    levels = q.ndim if isinstance(q, Tensor) else np.ndim(q)
    if name == "nanquantile":
        if not isinstance(q, Tensor):
            q = creation.tensor(np.asarray(q, dtype=np.float64), dtype=ordered.dtype)
        result = _nan_quantiles_at(ordered, d, q, interpolation)
    else:
        result = (_quantiles_at(ordered, d, q, interpolation) if isinstance(q, Tensor)
                  else _quantiles_of_numbers(ordered, d, q, interpolation))
        result = elementwise.where(red.any(elementwise.isnan(x), d), math.nan, result)
    if keepdim:   # (a 1 where each reduced dim was, after q's dim)
        lead = tuple(result.shape[:1]) if levels else ()
        kept = [1] * input.ndim if dim is None else [
            1 if i == d else size for i, size in enumerate(input.shape)]
        result = shape_ops.reshape(result, lead + tuple(kept))
    return result


def _check_quantiles(qs):
    if any(not 0.0 <= v <= 1.0 for v in np.atleast_1d(np.asarray(qs, dtype=np.float64))):
        raise ValueError(f"quantile: q must be in [0, 1], got {qs}")


def _quantiles_of_numbers(ordered, d, qs, interpolation):
    """Quantiles at Python numbers: each a select (or a lerp of two) at fixed positions."""
    values = [float(v) for v in np.atleast_1d(np.asarray(qs, dtype=np.float64))]
    n, out = ordered.shape[d], []
    real = dtypes.to_np(ordered.dtype).type   # (positions in the input's precision, as torch)
    for v in values:
        pos = real(v) * real(n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        if interpolation in ("lower", "higher", "nearest"):   # (the value there, as torch)
            at = {"lower": lo, "higher": hi}.get(interpolation, int(np.round(pos)))
            out.append(shape_ops.select(ordered, d, at))
            continue
        frac = 0.5 if interpolation == "midpoint" else float(pos - real(lo))
        below = shape_ops.select(ordered, d, lo)
        above = shape_ops.select(ordered, d, hi)
        out.append(below if frac == 0.0 or lo == hi else elementwise.lerp(below, above, frac))
    return shape_ops.stack(out) if np.ndim(qs) else out[0]


def _quantiles_at(ordered, d, q, interpolation):
    """Quantiles at a tensor of levels (0-d or 1-d), as torch computes them: positions
    ``q * (n - 1)`` in the input's dtype, the sorted values gathered below and above them
    and interpolated. Ops on ``q``, so a traced ``q`` (a computed ``linspace``) stays in
    the graph: the same numbers as the fixed positions of Python levels."""
    n = ordered.shape[d]
    pos = elementwise.cast_to(shape_ops.reshape(q, (-1,)), ordered.dtype) * (n - 1)
    rank = {"lower": elementwise.floor, "higher": elementwise.ceil,
            "nearest": elementwise.round}.get(interpolation, elementwise.floor)(pos)
    below = shape_ops.movedim(index_select(ordered, d, elementwise.cast_to(rank, dtypes.int64)),
                              d, 0)
    if interpolation in ("linear", "midpoint"):
        above = shape_ops.movedim(index_select(
            ordered, d, elementwise.cast_to(elementwise.ceil(pos), dtypes.int64)), d, 0)
        frac = pos - rank if interpolation == "linear" else creation.full_like(pos, 0.5)
        frac = shape_ops.reshape(frac, tuple(frac.shape) + (1,) * (below.ndim - 1))
        below = elementwise.lerp(below, above, frac)
    return below if q.ndim else shape_ops.squeeze(below, 0)



def _nan_quantiles_at(ordered, d, q, interpolation):
    """Quantiles of the non-NaN values of each slice (sorted, NaN last): torch's ranks
    ``q * (count - 1)`` per slice (0 where a slice is all NaN, whose value there is NaN),
    the values below and above them gathered and interpolated."""
    last = shape_ops.movedim(ordered, d, -1)
    count = red.sum(elementwise.logical_not(elementwise.isnan(last)), -1, keepdim=True)
    ranks = elementwise.cast_to(shape_ops.reshape(q, (-1,)), last.dtype) * (count - 1)
    ranks = elementwise.maximum(ranks, creation.zeros_like(ranks))
    rank = {"lower": elementwise.floor, "higher": elementwise.ceil,
            "nearest": elementwise.round}.get(interpolation, elementwise.floor)(ranks)
    below = gather(last, -1, elementwise.cast_to(rank, dtypes.int64))
    if interpolation in ("linear", "midpoint"):
        above = gather(last, -1, elementwise.cast_to(elementwise.ceil(ranks), dtypes.int64))
        frac = ranks - rank if interpolation == "linear" else creation.full_like(ranks, 0.5)
        below = elementwise.lerp(below, above, frac)
    below = shape_ops.movedim(below, -1, 0)
    return below if q.ndim else shape_ops.squeeze(below, 0)

# -- pad ------------------------------------------------------------------------------------
def _pad_pairs(x, pad):
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: got {pad}; give (left, right) pairs for at most {x.ndim} "
                         "dims, starting from the last dim")
    return {x.ndim - 1 - i: (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)}


def _pad_constant(x, pairs, value):
    # Negative pads crop: crop first, then write x into a tensor filled with `value`.
    crop = [None] * x.ndim
    for d, (lo, hi) in pairs.items():
        n = x.shape[d]
        if lo < 0 or hi < 0:
            crop[d] = (max(-lo, 0), n - max(-hi, 0), 1)
    x = shape_ops.slice_dims(x, crop)
    shape = list(x.shape)
    place = [None] * x.ndim
    for d, (lo, hi) in pairs.items():
        lo, hi = max(lo, 0), max(hi, 0)
        if lo or hi:
            place[d] = (lo, lo + shape[d], 1)
            shape[d] += lo + hi
    if all(p is None for p in place):
        return x
    base = creation.full(tuple(shape), value, dtype=x.dtype)
    return shape_ops.slice_update(base, x, place)


def _edge_positions(n, lo, hi, mode):
    """Source positions for padded positions -lo .. n+hi-1 of a dim of size n."""
    pos = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(pos, 0, n - 1)
    if mode == "circular":
        return pos % n
    period = 2 * (n - 1)   # reflect: mirror about the edge elements
    pos = np.abs(pos) % period if period else np.zeros_like(pos)
    return np.where(pos >= n, period - pos, pos)


def _pad_gather(x, pairs, mode):
    for d, (lo, hi) in sorted(pairs.items()):
        n = x.shape[d]
        limit = n - 1 if mode == "reflect" else n
        if lo < 0 or hi < 0 or max(lo, hi) > limit or n == 0:
            raise ValueError(f"pad: {mode} padding ({lo}, {hi}) of dim {d} needs pads in "
                             f"[0, {limit}] for a dim of size {n} (input shape "
                             f"{tuple(x.shape)})")
        if lo or hi:
            positions = creation.tensor(_edge_positions(n, lo, hi, mode))
            x = index_select(x, d, positions)
    return x


def pad(input, pad, mode="constant", value=None):
    """``F.pad``: ``pad`` lists (left, right) amounts from the last dim backwards. Modes:
    'constant' (fill with ``value``, default 0; negative pads crop), 'replicate',
    'reflect' and 'circular'."""
    pairs = _pad_pairs(input, pad)
    if mode == "constant":
        return _pad_constant(input, pairs, 0 if value is None else value)
    if mode in ("replicate", "reflect", "circular"):
        if value:
            raise ValueError(f"pad: value is only used by mode 'constant', not {mode!r}")
        return _pad_gather(input, pairs, mode)
    raise ValueError(f"pad: unknown mode {mode!r}; use 'constant', 'reflect', 'replicate' or "
                     "'circular'")


def bincount(input, weights=None, minlength=0):
    """How often each value of a 1-d non-negative integer tensor occurs (or the sum of its
    ``weights``), of length ``max(input) + 1`` or ``minlength``: int64, or the weights'
    dtype, as ``torch.bincount``. Eager only (its length is data)."""
    x = input._concrete("bincount()")
    if x.ndim != 1 or x.dtype.kind not in "iu" or (x.size and x.min() < 0):
        raise ValueError(f"bincount only supports 1-d non-negative integral inputs, got "
                         f"{input.dtype!r} of shape {tuple(input.shape)}")
    w = None if weights is None else weights._concrete("bincount()")
    out = np.bincount(x, w, int(minlength))
    return Tensor._make(out.astype(_INT64 if w is None else w.dtype))


def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """For each of ``values``, the index in the last dim of ``sorted_sequence`` where it
    would be inserted to keep it sorted (after equal entries with ``right`` or
    ``side='right'``), as ``torch.searchsorted``: counts of the smaller entries, so it
    traces into a graph (cost: entries x values). A count does not depend on the order of
    the entries, so ``sorter`` (the indices that sort an unsorted sequence) is checked,
    not applied: the index is the one in the sorted order, as torch's."""
    if sorter is not None and (tuple(sorter.shape) != tuple(sorted_sequence.shape)
                               or sorter.dtype != dtypes.int64):
        raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same "
                           f"size and sorter must be int64, got {tuple(sorter.shape)} "
                           f"{sorter.dtype} for {tuple(sorted_sequence.shape)}")
    right = right or side == "right"
    if not isinstance(values, Tensor):
        values = creation.tensor(values, dtype=sorted_sequence.dtype)
    seq = shape_ops.unsqueeze(sorted_sequence, -2) if sorted_sequence.ndim > 1 \
        else sorted_sequence
    below = seq <= shape_ops.unsqueeze(values, -1) if right \
        else seq < shape_ops.unsqueeze(values, -1)
    out = red.sum(below.to(dtypes.int64), -1)
    return out.to(dtypes.int32) if out_int32 else out


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each of ``input`` between the sorted 1-d ``boundaries``, as
    ``torch.bucketize``: ``searchsorted(boundaries, input, right=right)``."""
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


METHODS = {
    "__getitem__": getitem, "__setitem__": setitem,
    "gather": gather, "scatter": scatter, "scatter_add": scatter_add,
    "scatter_": inplace(scatter), "scatter_add_": inplace(scatter_add),
    "scatter_reduce": scatter_reduce, "scatter_reduce_": inplace(scatter_reduce),
    "index_select": index_select, "index_add": index_add, "index_add_": inplace(index_add),
    "index_put": index_put, "index_put_": inplace(index_put),
    "masked_fill": masked_fill, "masked_fill_": inplace(masked_fill),
    "masked_select": masked_select, "take_along_dim": take_along_dim,
    "tril": tril, "tril_": inplace(tril), "triu": triu, "triu_": inplace(triu),
    "topk": topk, "sort": sort, "quantile": quantile, "nanquantile": nanquantile,
    "argsort": argsort, "nonzero": nonzero,
    "repeat_interleave": repeat_interleave, "unfold": unfold, "unique": unique,
    "unique_consecutive": unique_consecutive,
    "diag": diag, "diagonal": diagonal, "bincount": bincount, "bucketize": bucketize,
    "diag_embed": diag_embed, "index_fill": index_fill, "index_fill_": inplace(index_fill),
    "index_copy": index_copy, "index_copy_": inplace(index_copy),
    "masked_scatter": masked_scatter, "masked_scatter_": inplace(masked_scatter),
    "kthvalue": kthvalue, "cummax": cummax, "cummin": cummin,
}
