"""``dg.linalg``: ``torch.linalg``'s norms, decompositions and solvers.

The decompositions and solvers are registry ops (dualgraph/ops/decompositions.py: NumPy's
LAPACK forward, torch's gradients; dualgraph/ops/lu.py: the LU factorisation); ``det``,
``pinv``, ``lstsq``, ``matrix_rank``, ``solve_triangular`` and the matrix norms other than
Frobenius are compositions of them.

>>> import dualgraph as dg
>>> dg.linalg.vector_norm(dg.tensor([3.0, 4.0])).item()
5.0
>>> dg.linalg.solve(dg.tensor([[2.0, 0.0], [0.0, 4.0]]), dg.tensor([2.0, 2.0])).tolist()
[1.0, 0.5]
"""
from __future__ import annotations

import math
from typing import NamedTuple

from .ops import arrange, decompositions as dec, linalg as products, reduce as red
from .ops import index as index_ops
from .ops.compose import matrix_power  # noqa: F401
from .ops.decompositions import (cholesky, det, eigh, eigvalsh, inv, matrix_exp,  # noqa: F401
                                 matrix_rank, pinv, qr, slogdet, solve, solve_triangular,
                                 svd, svdvals)
from .ops.lu import lu, lu_factor, lu_solve, singular_info  # noqa: F401
from .tensor import Tensor

__all__ = ["vector_norm", "matrix_norm", "norm", "inv", "inv_ex", "solve", "det", "slogdet",
           "cholesky", "cholesky_ex", "qr", "eigh", "eigvalsh", "svd", "svdvals", "lstsq",
           "pinv", "matrix_exp", "matrix_rank", "solve_triangular", "multi_dot", "cross",
           "vecdot", "matmul", "diagonal", "matrix_power", "lu", "lu_factor", "lu_factor_ex",
           "lu_solve"]


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The ``ord``-norm of ``x`` over ``dim`` (all dims, flattened, when None)."""
    return red.norm(x if dtype is None else x.to(dtype), ord, dim, keepdim)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """The ``ord`` norm of the matrices over the two ``dim``: 'fro', 'nuc' (sum of the
    singular values), 2 and -2 (the largest and smallest), 1, -1, inf and -inf (the
    largest or smallest column or row sum of absolute values), as torch's."""
    A = A if dtype is None else A.to(dtype)
    dim = tuple(d % A.ndim for d in dim)
    if ord == "fro":
        return vector_norm(A, 2, dim, keepdim)
    moved = A.movedim(dim, (-2, -1))
    if ord in ("nuc", 2, -2):
        s = dec.svdvals(moved)
        out = s.sum(-1) if ord == "nuc" else s.max(-1).values if ord == 2 else s.min(-1).values
    elif ord in (1, -1, math.inf, -math.inf):
        sums = moved.abs().sum(-2 if ord in (1, -1) else -1)
        out = sums.max(-1).values if ord > 0 else sums.min(-1).values
    else:
        raise ValueError(f"dg.linalg.matrix_norm: ord must be 'fro', 'nuc', 2, -2, 1, -1, "
                         f"inf or -inf, got {ord!r}")
    if keepdim:
        for d in sorted(dim):
            out = out.unsqueeze(d)
    return out


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """``vector_norm`` for an int ``dim`` or a flattened 2-norm, ``matrix_norm`` for two
    dims (or a 2-d input with a string ``ord``), as ``torch.linalg.norm``."""
    if isinstance(ord, str) or (dim is not None and not isinstance(dim, int)
                                and len(tuple(dim)) == 2):
        return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim,
                           keepdim, dtype=dtype)
    if ord is not None and dim is None and A.ndim == 2:
        return matrix_norm(A, ord, keepdim=keepdim, dtype=dtype)
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


class _InvEx(NamedTuple):
    inverse: Tensor
    info: Tensor


class _CholeskyEx(NamedTuple):
    L: Tensor
    info: Tensor


def inv_ex(A, *, check_errors=False):
    """``(inverse, info)``: as ``inv`` (a singular matrix raises here too)."""
    out = inv(A)
    return _InvEx(out, red.sum(out, (-2, -1)).long() * 0)


def cholesky_ex(A, *, upper=False, check_errors=False):
    """``(L, info)``: as ``cholesky`` (a matrix that is not positive-definite raises)."""
    out = cholesky(A, upper=upper)
    return _CholeskyEx(out, red.sum(out, (-2, -1)).long() * 0)


class _LUFactorEx(NamedTuple):
    LU: Tensor
    pivots: Tensor
    info: Tensor


def lu_factor_ex(A, *, pivot=True, check_errors=False):
    """``(LU, pivots, info)``: as ``lu_factor``, a singular matrix factored (a zero on
    ``U``'s diagonal, at ``info``, 1-based, as LAPACK's) unless ``check_errors``."""
    LU, pivots = lu_factor(A, pivot=pivot, check_errors=check_errors)
    return _LUFactorEx(LU, pivots, singular_info(LU))


class _Lstsq(NamedTuple):
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


def lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares solution of ``A X = B`` (the minimum-norm one where ``A`` lacks
    full rank), ``pinv(A) @ B``, as ``torch.linalg.lstsq`` with its CPU default driver
    'gelsy': ``residuals`` and ``singular_values`` are empty, ``rank`` is counted."""
    vector = B.ndim == A.ndim - 1
    b = B.unsqueeze(-1) if vector else B
    solution = products.matmul(pinv(A, rtol=rcond), b)
    empty = A.new_zeros((0,))
    return _Lstsq(solution.squeeze(-1) if vector else solution, empty,
                  matrix_rank(A, rtol=rcond), empty)


def multi_dot(tensors):
    """The product of a list of matrices (the first may be a vector, and the last)."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise ValueError("multi_dot(): expected at least 2 tensors but got "
                         f"{len(tensors)}")
    out = tensors[0]
    for t in tensors[1:]:
        out = products.matmul(out, t)
    return out


def cross(input, other, *, dim=-1):
    """The cross product of 3-vectors along ``dim`` (the last by default; batch dims
    broadcast), as ``torch.linalg.cross``."""
    if input.ndim != other.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    return arrange.cross(input, other, dim=dim)


def vecdot(x, y, *, dim=-1):
    """The dot products of the vectors along ``dim`` (batch dims broadcast), as
    ``torch.linalg.vecdot`` (real tensors: no conjugation to do)."""
    return red.sum(x * y, dim)


def matmul(input, other):
    """``torch.linalg.matmul``: :func:`dualgraph.matmul`."""
    return products.matmul(input, other)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """The diagonals of the matrices of ``A`` (the last two dims by default), as
    ``torch.linalg.diagonal``: a view, as ``A.diagonal``."""
    return index_ops.diagonal(A, offset, dim1, dim2)
