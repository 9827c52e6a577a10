"""NumPy-style arrangements as compositions of the shape, index and arithmetic ops: the
stacks (``hstack``, ``vstack``, ``dstack``, ``column_stack``), ``atleast_Nd``,
``tensor_split`` and its ``h/v/dsplit``, ``fliplr``/``flipud``/``rot90``, ``ravel``,
``take``, ``as_strided``, ``diff``, ``cross``, ``kron`` and ``trace``, with torch's semantics.

Each is a composite, so it differentiates, traces, fuses and exports through the ops it is
made of; none is a new primitive.

>>> import dualgraph as dg
>>> dg.hstack([dg.tensor([1, 2]), dg.tensor([3])])
tensor([1, 2, 3])
"""
from __future__ import annotations

import numpy as np

from ..shapes import broadcast_shapes, normalize_dim
from ..tensor import Tensor
from . import creation, elementwise as ew, index, reduce as red, shape as shape_ops, views

__all__ = ["atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack", "row_stack",
           "dstack", "column_stack", "tensor_split", "hsplit", "vsplit", "dsplit",
           "fliplr", "flipud", "rot90", "ravel", "take", "as_strided", "diff", "cross", "kron",
           "trace"]


# -- atleast_Nd and the stacks -------------------------------------------------------------
def _atleast(tensors, pad):
    """One tensor in, one out; several (or one list) in, a tuple out, as torch's."""
    single = len(tensors) == 1 and isinstance(tensors[0], Tensor)
    items = tensors[0] if len(tensors) == 1 and not single else tensors
    out = tuple(pad(t) for t in items)
    return out[0] if single else out


def _at_least(x, ndim, where):
    """``x`` with dims of size 1 added by ``where[x.ndim]`` (a shape builder) below ndim."""
    if x.ndim >= ndim:
        return x
    return shape_ops.reshape(x, where[x.ndim](tuple(x.shape)))


_PAD_2D = {0: lambda s: (1, 1), 1: lambda s: (1,) + s}
_PAD_3D = {0: lambda s: (1, 1, 1), 1: lambda s: (1,) + s + (1,), 2: lambda s: s + (1,)}


def atleast_1d(*tensors):
    """Each tensor with at least one dim (a 0-d one becomes shape (1,)), as
    ``torch.atleast_1d``; several tensors give a tuple."""
    return _atleast(tensors, lambda x: _at_least(x, 1, {0: lambda s: (1,)}))


def atleast_2d(*tensors):
    """Each tensor with at least two dims: (n,) becomes (1, n), as ``torch.atleast_2d``."""
    return _atleast(tensors, lambda x: _at_least(x, 2, _PAD_2D))


def atleast_3d(*tensors):
    """Each tensor with at least three dims: (n,) becomes (1, n, 1) and (m, n) becomes
    (m, n, 1), as ``torch.atleast_3d`` (NumPy's rule)."""
    return _atleast(tensors, lambda x: _at_least(x, 3, _PAD_3D))


def _tensors(name, tensors):
    tensors = tuple(tensors)
    if not tensors:
        raise ValueError(f"{name} expects a non-empty sequence of tensors")
    return tensors


def hstack(tensors):
    """Join along dim 1 (dim 0 for 1-d tensors), as ``torch.hstack``."""
    tensors = atleast_1d(_tensors("hstack", tensors))
    return shape_ops.cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    """Join along dim 0 after making each at least 2-d, as ``torch.vstack``."""
    return shape_ops.cat(atleast_2d(_tensors("vstack", tensors)), 0)


row_stack = vstack


def dstack(tensors):
    """Join along dim 2 after making each at least 3-d, as ``torch.dstack``."""
    return shape_ops.cat(atleast_3d(_tensors("dstack", tensors)), 2)


def column_stack(tensors):
    """Join as columns: 0-d and 1-d tensors become (n, 1) columns, then join along dim 1,
    as ``torch.column_stack``."""
    tensors = tuple(shape_ops.reshape(t, (t.numel(), 1)) if t.ndim <= 1 else t
                    for t in _tensors("column_stack", tensors))
    return shape_ops.cat(tensors, 1)


# -- tensor_split and h/v/dsplit -----------------------------------------------------------
def _split_points(name, indices_or_sections, n):
    """The start of each part: ``sections`` near-equal parts (the first ``n % sections``
    one longer), or cuts at the given indices (clamped to [0, n], as slicing does)."""
    if isinstance(indices_or_sections, Tensor):
        if indices_or_sections.dtype.np.kind not in "iu" or indices_or_sections.ndim > 1:
            raise TypeError(f"{name}: a tensor of indices_or_sections must be a 0-d or 1-d "
                            f"integer tensor, got {indices_or_sections.dtype} of shape "
                            f"{tuple(indices_or_sections.shape)}")
        values = indices_or_sections.tolist()
        indices_or_sections = values if isinstance(values, list) else int(values)
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections < 1:
            raise ValueError(f"{name}: number of sections must be larger than 0, got "
                             f"{sections}")
        size, extra = divmod(n, sections)
        return [k * size + min(k, extra) for k in range(sections)] + [n]
    cuts = [int(i) for i in indices_or_sections]
    clamp = lambda i: min(max(i + n if i < 0 else i, 0), n)
    return [0] + [clamp(i) for i in cuts] + [n]


def tensor_split(input, indices_or_sections, dim=0):
    """Views of ``input`` split along ``dim`` into ``sections`` near-equal parts or at
    the given indices, as ``torch.tensor_split``.

    >>> [t.tolist() for t in dg.tensor_split(dg.arange(5), 2)]
    [[0, 1, 2], [3, 4]]
    """
    d = normalize_dim(dim, input.ndim)
    points = _split_points("tensor_split", indices_or_sections, input.shape[d])
    return tuple(shape_ops.narrow(input, d, start, max(stop, start) - start)
                 for start, stop in zip(points, points[1:]))


def _split_along(name, input, sections, dim, min_ndim):
    if input.ndim < min_ndim:
        raise ValueError(f"torch.{name} requires a tensor with at least {min_ndim} dimension"
                         f"{'s' if min_ndim > 1 else ''}, but got a tensor with "
                         f"{input.ndim} dimensions!")
    if isinstance(sections, (int, np.integer)):
        n = input.shape[dim]
        if sections == 0 or n % sections:
            raise ValueError(f"torch.{name} attempted to split along dimension {dim}, but "
                             f"the size of the dimension {n} is not divisible by the "
                             f"split_size {sections}!")
    return tensor_split(input, sections, dim)


def hsplit(input, indices_or_sections):
    """``tensor_split`` along dim 1 (dim 0 of a 1-d tensor); a number of sections must
    divide the dim, as ``torch.hsplit``."""
    return _split_along("hsplit", input, indices_or_sections, 1 if input.ndim > 1 else 0, 1)


def vsplit(input, indices_or_sections):
    """``tensor_split`` along dim 0 of a tensor of at least 2 dims, as ``torch.vsplit``."""
    return _split_along("vsplit", input, indices_or_sections, 0, 2)


def dsplit(input, indices_or_sections):
    """``tensor_split`` along dim 2 of a tensor of at least 3 dims, as ``torch.dsplit``."""
    return _split_along("dsplit", input, indices_or_sections, 2, 3)


# -- flips and rotations -------------------------------------------------------------------
def fliplr(input):
    """Reverse dim 1 (left-right), as ``torch.fliplr``; needs at least 2 dims."""
    if input.ndim < 2:
        raise ValueError(f"fliplr: input must be >= 2-d, got shape {tuple(input.shape)}")
    return shape_ops.flip(input, (1,))


def flipud(input):
    """Reverse dim 0 (up-down), as ``torch.flipud``; needs at least 1 dim."""
    if input.ndim < 1:
        raise ValueError("flipud: input must be >= 1-d, got a 0-d tensor")
    return shape_ops.flip(input, (0,))


def rot90(input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``dims``, from the first toward the
    second, as ``torch.rot90``."""
    dims = tuple(dims)
    if len(dims) != 2:
        raise ValueError(f"rot90: expected total rotation dims == 2, but got dims = "
                         f"{len(dims)}")
    if input.ndim < 2:
        raise ValueError(f"rot90: expected total dims >= 2, but got total dims = "
                         f"{input.ndim}")
    a, b = (normalize_dim(d, input.ndim) for d in dims)
    if a == b:
        raise ValueError(f"rot90: expected rotation dims to be different, got dim0 = "
                         f"{dims[0]} and dim1 = {dims[1]}")
    k = k % 4
    if k == 1:
        return shape_ops.transpose(shape_ops.flip(input, (b,)), a, b)
    if k == 2:
        return shape_ops.flip(input, (a, b))
    if k == 3:
        return shape_ops.transpose(shape_ops.flip(input, (a,)), a, b)
    return input.clone()


# -- flat access ----------------------------------------------------------------------------
def ravel(input):
    """The elements as a 1-d tensor in row-major order, as ``torch.ravel``."""
    return shape_ops.reshape(input, (-1,))


def take(input, index):
    """``input`` read as 1-d at ``index`` (negative indices count from the end): a tensor
    of ``index``'s shape, as ``torch.take``."""
    if not isinstance(index, Tensor) or index.dtype.np.kind not in "iu":
        raise TypeError(f"take(): index must be an integer (long) tensor, got "
                        f"{getattr(index, 'dtype', type(index).__name__)}")
    return ravel(input)[index]


def as_strided(input, size, stride, storage_offset=None):
    """The elements ``storage_offset + sum(i_k * stride[k])`` of ``input``'s row-major
    storage, in a tensor of ``size``, as ``torch.as_strided`` (sliding windows written as
    overlapping strides). Read as a gather of those positions, so gradients add up where
    windows overlap, eagerly and traced. Unlike torch's it is a copy, not a view: a write
    into it does not reach ``input``. ``input`` must be row-major (``.contiguous()``), and
    the positions must lie within its own elements (torch may read a base's storage around
    a view; that is refused, not guessed).

    >>> dg.arange(5.0).as_strided((3, 2), (1, 1))
    tensor([[0., 1.],
            [1., 2.],
            [2., 3.]])
    """
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or min(size + stride, default=0) < 0:
        raise ValueError(f"as_strided: size {size} and stride {stride} must be as long as "
                         "each other and non-negative")
    if not views.is_contiguous(input):
        raise NotImplementedError("as_strided of a non-contiguous tensor reads the storage "
                                  "of its base; call .contiguous() first")
    offset = 0
    if storage_offset is not None:   # absolute in the storage: eager tensors know where
        if not isinstance(input._data, np.ndarray):
            raise NotImplementedError("as_strided(storage_offset=) while tracing: a traced "
                                      "tensor's place in its storage is not known")
        offset = int(storage_offset) - input.storage_offset()
    positions = np.full(size, offset, dtype=np.int64)
    for k, (n, step) in enumerate(zip(size, stride)):
        positions += (np.arange(n, dtype=np.int64) * step).reshape(
            (n,) + (1,) * (len(size) - k - 1))
    if positions.size and (positions.min() < 0 or positions.max() >= input.numel()):
        raise NotImplementedError(f"as_strided: positions {positions.min()}..{positions.max()} "
                                  f"reach outside the tensor's {input.numel()} elements")
    return ravel(input)[creation.constant(positions)]


# -- differences, products ------------------------------------------------------------------
def diff(input, n=1, dim=-1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim`` (``x[1:] - x[:-1]``, repeated), with
    ``prepend``/``append`` joined first; booleans give ``!=``, as ``torch.diff``.

    >>> dg.diff(dg.tensor([1, 4, 9, 16]))
    tensor([3, 5, 7])
    """
    if input.ndim == 0:
        raise ValueError("diff expects input to be at least one-dimensional")
    d = normalize_dim(dim, input.ndim)
    parts = [p if p.ndim else shape_ops.expand(
                 p, tuple(input.shape[:d]) + (1,) + tuple(input.shape[d + 1:]))
             for p in (prepend, input, append) if p is not None]
    x = shape_ops.cat(parts, d) if len(parts) > 1 else input
    for _ in range(int(n)):
        length = x.shape[d]
        if length == 0:
            break
        high = shape_ops.narrow(x, d, 1, length - 1)
        low = shape_ops.narrow(x, d, 0, length - 1)
        x = ew.logical_xor(high, low) if x.dtype.np.kind == "b" else high - low
    return x


def cross(input, other, dim=None):
    """The cross product of 3-vectors along ``dim`` (inputs broadcast); without ``dim``
    the first dim of size 3, as ``torch.cross``."""
    if input.ndim != other.ndim:
        raise ValueError(f"cross: inputs must have the same number of dimensions, got "
                         f"shapes {tuple(input.shape)} and {tuple(other.shape)}")
    shape = broadcast_shapes(tuple(input.shape), tuple(other.shape))
    if dim is None:
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise ValueError(f"no dimension of size 3 in input (broadcast shape {shape}); "
                             "pass dim=")
    d = normalize_dim(dim, len(shape))
    if shape[d] != 3 or input.shape[d] != 3 or other.shape[d] != 3:
        raise ValueError(f"cross: inputs dimension {dim} must have length 3. Got "
                         f"{input.shape[d]} and {other.shape[d]}")
    input, other = (shape_ops.broadcast_to(t, shape) for t in (input, other))
    a = [shape_ops.select(input, d, i) for i in range(3)]
    b = [shape_ops.select(other, d, i) for i in range(3)]
    parts = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    return shape_ops.stack(parts, d)


def kron(input, other):
    """The Kronecker product, as ``torch.kron``: a block of ``other`` scaled by each element
    of ``input``; the shapes' fewer dims are padded with leading 1s."""
    ndim = max(input.ndim, other.ndim)
    a_shape = (1,) * (ndim - input.ndim) + tuple(input.shape)
    b_shape = (1,) * (ndim - other.ndim) + tuple(other.shape)
    a = shape_ops.reshape(input, tuple(s for n in a_shape for s in (n, 1)))
    b = shape_ops.reshape(other, tuple(s for n in b_shape for s in (1, n)))
    return shape_ops.reshape(a * b, tuple(m * n for m, n in zip(a_shape, b_shape)))


def trace(input):
    """The sum of the main diagonal of a matrix, as ``torch.trace`` (integers sum to int64)."""
    if input.ndim != 2:
        raise ValueError(f"trace: expected a matrix, but got tensor with dim "
                         f"{input.ndim}")
    return red.sum(index.diagonal(input))


METHODS = {
    "broadcast_to": shape_ops.broadcast_to, "tensor_split": tensor_split, "hsplit": hsplit,
    "vsplit": vsplit, "dsplit": dsplit, "fliplr": fliplr, "flipud": flipud, "rot90": rot90,
    "ravel": ravel, "take": take, "as_strided": as_strided, "diff": diff, "cross": cross,
    "kron": kron, "trace": trace,
}
