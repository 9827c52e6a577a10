"""torch functions that are exact compositions of other ops, so they get autodiff, tracing,
fusion and export from those: ``trapezoid`` / ``trapz`` / ``cumulative_trapezoid``,
``block_diag``, ``cartesian_prod``, ``combinations``, ``renorm``, ``put`` (``Tensor.put_``),
``index_reduce`` (``Tensor.index_reduce_``), ``cholesky_solve`` and ``cholesky_inverse``;
the products ``inner``, ``ger``, ``vdot``, ``addmv``, ``addr``, ``matrix_power``,
``diagflat``, ``dist``, ``cov`` and ``corrcoef``.

>>> import dualgraph as dg
>>> dg.trapezoid(dg.tensor([1.0, 2.0, 3.0]))
tensor(4.)
"""
from __future__ import annotations

import itertools

from .. import dtypes
from ..shapes import normalize_dim
from . import creation
from . import elementwise as ew
from . import index
from . import reduce as red
from . import shape as shape_ops
from .arrange import diff
from . import linalg
from .decompositions import _mT, inv, solve
from .inplace import inplace

__all__ = ["trapezoid", "trapz", "cumulative_trapezoid", "block_diag", "cartesian_prod",
           "combinations",
           "renorm", "put", "index_reduce", "cholesky_solve", "cholesky_inverse", "inner",
           "ger", "vdot", "addmv", "addr", "matrix_power", "diagflat", "dist", "cov",
           "corrcoef"]


# -- integration by the trapezoidal rule ---------------------------------------------------
def _trapezoids(y, x, dx, dim):
    """The areas of the trapezoids between neighbours along ``dim`` (its size one less),
    and ``dim`` normalised; widths ``dx`` (1 when None) or ``diff(x)``."""
    d = normalize_dim(dim, y.ndim)
    n = y.shape[d]
    if n == 0:   # (torch's: nothing to integrate, in y's own dtype)
        return y, d
    if not y.is_floating_point():
        y = y.to(dtypes.get_default_dtype())
    mean = (shape_ops.narrow(y, d, 1, n - 1) + shape_ops.narrow(y, d, 0, n - 1)) * 0.5
    if x is None:
        return mean * (1.0 if dx is None else dx), d
    if x.ndim == 1:
        if x.shape[0] != n:
            raise RuntimeError("trapezoid: There must be one `x` value for each sample "
                               f"point (x has {x.shape[0]}, y has {n} along dim {d})")
        widths = shape_ops.reshape(diff(x), (n - 1,) + (1,) * (y.ndim - d - 1))
    else:
        widths = diff(x, dim=d - y.ndim)
    return mean * widths, d


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The integral of ``y`` along ``dim`` by the trapezoidal rule, at sample points ``x``
    (1-D along ``dim``, or broadcasting with ``y``) or spaced ``dx`` (default 1) apart, as
    ``torch.trapezoid``; fewer than two points integrate to 0."""
    if x is not None and dx is not None:
        raise TypeError("trapezoid: pass either x or dx, not both")
    areas, d = _trapezoids(y, x, dx, dim)
    return red.sum(areas, d)


def trapz(y, x=None, *, dx=None, dim=-1):
    """The older name of :func:`trapezoid`, as ``torch.trapz``."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running integrals of :func:`trapezoid` (one fewer than the points along
    ``dim``), as ``torch.cumulative_trapezoid``."""
    if x is not None and dx is not None:
        raise TypeError("cumulative_trapezoid: pass either x or dx, not both")
    areas, d = _trapezoids(y, x, dx, dim)
    if y.shape[d] == 0:
        return areas
    return red.cumsum(areas, d)


# -- assembling tensors ---------------------------------------------------------------------
def block_diag(*tensors):
    """The tensors (each 0-, 1- or 2-D, read as a matrix) down the diagonal of one matrix of
    zeros, their dtypes promoted, as ``torch.block_diag``."""
    blocks = []
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {i} has {t.ndim} dimensions")
        blocks.append(shape_ops.reshape(t, (1, -1)) if t.ndim < 2 else t)
    if not blocks:
        return creation.zeros(1, 0)
    width, left, rows = sum(b.shape[1] for b in blocks), 0, []
    for b in blocks:   # (cat promotes their dtypes)
        cols = b.shape[1]
        rows.append(index.pad(b, (left, width - left - cols)))
        left += cols
    return shape_ops.cat(rows, 0)


def cartesian_prod(*tensors):
    """Every combination of one element of each 1-D tensor, one row each (the last tensor
    varying fastest), as ``torch.cartesian_prod``; one tensor is returned as it is."""
    for t in tensors:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")
    if len({t.dtype for t in tensors}) > 1:
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    if len(tensors) == 1:
        return tensors[0]
    sizes = tuple(t.shape[0] for t in tensors)
    k = len(tensors)
    columns = [shape_ops.reshape(shape_ops.expand(shape_ops.reshape(
        t, (1,) * i + (sizes[i],) + (1,) * (k - i - 1)), sizes), -1)
        for i, t in enumerate(tensors)]
    return shape_ops.stack(columns, 1)


def combinations(input, r=2, with_replacement=False):
    """The length-``r`` combinations of the 1-D ``input``'s elements, one row each in
    ``itertools.combinations`` order (``combinations_with_replacement`` with
    ``with_replacement``), as ``torch.combinations``: ``(count, r)``, gathered from
    ``input`` (so differentiable); ``r=0`` gives an empty 1-D tensor."""
    if input.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return creation.empty(0, dtype=input.dtype)
    choose = itertools.combinations_with_replacement if with_replacement else \
        itertools.combinations
    rows = [i for row in choose(range(input.shape[0]), r) for i in row]
    picked = index.index_select(input, 0, creation.tensor(rows, dtype=dtypes.int64))
    return shape_ops.reshape(picked, (len(rows) // r, r))


# -- norms, writes and solves -------------------------------------------------------------
def renorm(input, p, dim, maxnorm):
    """Each slice of ``input`` along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled to
    norm ``maxnorm`` (times ``maxnorm / (norm + 1e-7)``, as torch's), as ``torch.renorm``."""
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    d = normalize_dim(dim, input.ndim)
    others = tuple(i for i in range(input.ndim) if i != d)
    norm = red.norm(input, p, others, keepdim=True)
    factor = ew.where(ew.gt(norm, maxnorm), maxnorm / (norm + 1e-7), 1.0)
    return input * factor.to(input.dtype)


def put(input, index_, source, accumulate=False):
    """``input`` with ``source``'s elements written (added, with ``accumulate``) at the
    flat positions ``index_`` (negative counting from the end), as ``torch.put``."""
    flat = shape_ops.reshape(input, -1)
    written = index.index_put(flat, (shape_ops.reshape(index_, -1),),
                              shape_ops.reshape(source, -1), accumulate)
    return shape_ops.reshape(written, tuple(input.shape))


def index_reduce(input, dim, index_, source, reduce, *, include_self=True):
    """``input`` with slice ``i`` of ``source`` along ``dim`` combined into slice
    ``index_[i]`` by ``reduce`` ("prod", "mean", "amax" or "amin"; the input's own values
    taking part where ``include_self``), as ``torch.index_reduce``: ``scatter_reduce`` with
    the index spread over the slices."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax "
                           f"or amin but got {reduce}.")
    d = normalize_dim(dim, input.ndim)
    if index_.ndim > 1 or source.ndim and index_.numel() != source.shape[d]:
        raise IndexError(f"index_reduce(): index (shape {tuple(index_.shape)}) must be 1-D "
                         f"with one entry per slice of source (shape "
                         f"{tuple(source.shape)}) along dim {d}")
    spread = shape_ops.reshape(index_, (-1,) + (1,) * (source.ndim - d - 1))
    return index.scatter_reduce(input, d, shape_ops.expand(spread, tuple(source.shape)),
                                source, reduce, include_self=include_self)


def cholesky_solve(B, L, upper=False):
    """X with ``A X = B`` for ``A = L L^T`` (``U^T U`` with ``upper``), given the Cholesky
    factor (only its lower, or upper, triangle is read), as ``torch.cholesky_solve``."""
    if B.ndim < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {B.ndim} "
                           "dimensions instead")
    if L.ndim < 2:
        raise RuntimeError(f"u should have at least 2 dimensions, but has {L.ndim} "
                           "dimensions instead")
    lower = _mT(L) if upper else L
    # the lower triangle's values, with the gradient of every entry, as torch's (whose
    # formula treats the factor as a full matrix although its solves read one triangle)
    strict = index.triu(lower, 1)
    factor = index.tril(lower) + (strict - strict.detach())
    return solve(_mT(factor), solve(factor, B))


def cholesky_inverse(L, upper=False):
    """The inverse of ``A = L L^T`` (``U^T U`` with ``upper``) from its Cholesky factor, as
    ``torch.cholesky_inverse``."""
    eye = creation.eye(L.shape[-1], dtype=L.dtype)
    return cholesky_solve(shape_ops.expand(eye, tuple(L.shape)), L, upper)


# -- products -------------------------------------------------------------------------------
def inner(input, other):
    """Sums of products over the last dims of both (a product where one is 0-d), as
    ``torch.inner``: the shape is ``input.shape[:-1] + other.shape[:-1]``."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    return linalg.tensordot(input, other, ([input.ndim - 1], [other.ndim - 1]))


def vdot(input, other):
    """The dot product of two 1-D tensors (nothing to conjugate in real dtypes), as
    ``torch.vdot``."""
    return linalg.dot(input, other)


ger = linalg.outer


def _scaled_sum(input, product, beta, alpha):
    """``beta * input + alpha * product``, ``input`` ignored (its NaNs too) where beta is 0,
    as torch's addmm family."""
    product = product if alpha == 1 else product * alpha
    if beta == 0:
        return product
    return (input if beta == 1 else input * beta) + product


def addmv(input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)``, as ``torch.addmv``."""
    return _scaled_sum(input, linalg.mv(mat, vec), beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """``beta * input + alpha * outer(vec1, vec2)``, as ``torch.addr``."""
    return _scaled_sum(input, linalg.outer(vec1, vec2), beta, alpha)


def matrix_power(input, n):
    """``input`` (a square matrix or a batch) to the integer power ``n`` by repeated
    squaring (``n`` < 0: of its inverse; 0: the identity), as ``torch.matrix_power``."""
    if input.ndim < 2 or input.shape[-1] != input.shape[-2]:
        raise RuntimeError(f"matrix_power: expected a batch of square matrices, but got "
                           f"shape {tuple(input.shape)}")
    if n == 0:
        eye = creation.eye(input.shape[-1], dtype=input.dtype)
        return shape_ops.expand(eye, tuple(input.shape))
    base, n, result = (inv(input) if n < 0 else input), abs(int(n)), None
    while n:
        if n & 1:
            result = base if result is None else linalg.matmul(result, base)
        n >>= 1
        if n:
            base = linalg.matmul(base, base)
    return creation.clone(result) if result is input else result   # (a new tensor, as torch's)


def diagflat(input, offset=0):
    """A matrix with ``input``'s elements (flattened) on diagonal ``offset``, as
    ``torch.diagflat``."""
    return index.diag(shape_ops.reshape(input, -1), offset)


def dist(input, other, p=2):
    """The ``p``-norm of ``input - other`` (broadcast), as ``torch.dist``."""
    return red.norm(input - other, p)


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of the variables in ``input``'s rows (observations in its
    columns; a 1-D input is one variable, giving a 0-d variance), divided by the number of
    observations less ``correction``, as ``torch.cov``; ``fweights`` (integer repeat
    counts) and ``aweights`` (float importances) weight the observations, the divisor then
    ``sum(w) - correction * sum(w * aweights) / sum(w)`` (``w`` their product)."""
    if input.ndim > 2:
        raise ValueError(f"cov(): expected input to have two or fewer dimensions but got an "
                         f"input with {input.ndim} dimensions")
    x = shape_ops.reshape(_float(input), (1, -1)) if input.ndim < 2 else _float(input)
    w = _observation_weights(x.shape[1], fweights, aweights)
    if w is None:
        centred = x - red.mean(x, 1, keepdim=True)
        c = linalg.matmul(centred, _mT(centred)) / max(x.shape[1] - correction, 0)
    else:
        w = w.to(x.dtype)
        total = red.sum(w)
        centred = x - shape_ops.reshape(red.sum(x * w, 1) / total, (-1, 1))
        divisor = total - (correction * red.sum(w * aweights.to(x.dtype)) / total
                           if aweights is not None and correction else correction)
        c = linalg.matmul(centred, _mT(centred * w)) / ew.clamp(divisor, min=0)
    return shape_ops.reshape(c, ()) if input.ndim < 2 else c


def _observation_weights(n, fweights, aweights):
    """The product of ``cov``'s weights (None without any), after torch's checks of their
    shapes and dtypes."""
    for name, weights, floating in (("fweights", fweights, False),
                                    ("aweights", aweights, True)):
        if weights is None:
            continue
        if weights.ndim > 1 or weights.numel() != n:
            raise ValueError(f"cov(): expected {name} to have one dimension and {n} "
                             f"elements (the observations), got shape {tuple(weights.shape)}")
        if weights.is_floating_point() != floating:
            raise TypeError(f"cov(): expected {name} to have "
                            f"{'floating point' if floating else 'integral'} dtype but got "
                            f"{weights.dtype}")
    if fweights is None:
        return aweights
    return fweights if aweights is None else fweights * aweights


def corrcoef(input):
    """The Pearson correlation coefficients of the variables in ``input``'s rows, clipped to
    [-1, 1], as ``torch.corrcoef``."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = ew.sqrt(index.diag(c))
    return ew.clamp(c / shape_ops.reshape(d, (-1, 1)) / d, -1.0, 1.0)


def _float(x):
    return x if x.is_floating_point() else x.to(dtypes.get_default_dtype())


METHODS = {"renorm": renorm, "renorm_": inplace(renorm), "put": put, "put_": inplace(put),
           "index_reduce": index_reduce, "index_reduce_": inplace(index_reduce),
           "cholesky_solve": cholesky_solve, "cholesky_inverse": cholesky_inverse,
           "inner": inner, "ger": ger, "vdot": vdot, "addmv": addmv, "addmv_": inplace(addmv),
           "addr": addr, "addr_": inplace(addr), "matrix_power": matrix_power,
           "diagflat": diagflat, "dist": dist, "cov": cov, "corrcoef": corrcoef}
