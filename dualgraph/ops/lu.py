"""LU factorisation with partial pivoting (``torch.linalg.lu_factor``, ``lu``, ``lu_solve``
and the older ``torch.lu`` / ``lu_unpack`` / ``lu_solve``), for square matrices.

One primitive computes the factors: ``linalg_lu_factor`` returns LAPACK getrf's packed
``LU`` (``L`` below the diagonal, its unit diagonal implied, ``U`` on and above) and its
1-based int32 row interchanges ``pivots``, and its VJP is torch's (``linalg_lu_backward``:
``P L^-T (tril(L^T gL, -1) + triu(gU U^T)) U^-T``), written with dualgraph ops so it
differentiates again. ``lu_pivots_to_permutation`` turns the interchanges into the
permutation they make (an int op without gradient). Unpacking and solving are
compositions: the permutation matrix by comparing that permutation with an ``arange``,
``L`` and ``U`` by ``tril``/``triu``, solves by ``solve_triangular``; their gradients
follow from those ops'.

>>> import dualgraph as dg
>>> a = dg.tensor([[1.0, 2.0], [3.0, 4.0]])
>>> LU, pivots = dg.linalg.lu_factor(a)
>>> pivots.tolist()
[2, 2]
>>> P, L, U = dg.lu_unpack(LU, pivots)
>>> (P @ L @ U).tolist()
[[1.0, 2.0], [3.0, 4.0]]
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..dispatch import apply
from ..shapes import ShapedType, ShapeError
from ..tensor import Tensor
from . import creation, decompositions as dec, index
from .opdef import defop

__all__ = ["lu_factor", "lu", "lu_solve", "lu_unpack"]

_INT32 = np.dtype(np.int32)
_INT64 = np.dtype(np.int64)


def _infer_lu_factor(a, *, check_errors):
    dec._check("lu_factor", a)
    return ShapedType(tuple(a.shape), a.dtype), ShapedType(tuple(a.shape[:-1]), _INT32)


def _lu_factor_kernel(a, *, check_errors):
    """Doolittle elimination with partial pivoting (the row of the largest magnitude, the
    first of equals, as LAPACK's idamax), vectorised over the batch. A zero column leaves
    its multipliers unscaled, as getrf does for a singular matrix; ``check_errors`` makes
    such a matrix an error instead (``torch.linalg.lu_factor``'s)."""
    n = a.shape[-1]
    lu = np.array(a, copy=True).reshape(-1, n, n)
    pivots = np.empty(lu.shape[:2], _INT32)
    rows = np.arange(lu.shape[0])
    for k in range(n):
        p = k + np.argmax(np.abs(lu[:, k:, k]), axis=1)
        pivots[:, k] = p + 1
        lu[rows, k], lu[rows, p] = lu[rows, p], lu[rows, k].copy()
        pivot = lu[:, k, k]
        lu[:, k + 1:, k] /= np.where(pivot == 0, 1, pivot)[:, None]
        lu[:, k + 1:, k + 1:] -= lu[:, k + 1:, k, None] * lu[:, None, k, k + 1:]
    zero = np.diagonal(lu, axis1=1, axis2=2) == 0
    if check_errors and zero.any():
        k = int(np.flatnonzero(zero.any(axis=0))[0])
        raise ValueError(f"linalg.lu_factor: U[{k},{k}] is zero: the matrix is singular "
                         f"(lu_solve would divide by zero); linalg.lu or "
                         f"linalg.lu_factor_ex factor it without this check")
    return lu.reshape(a.shape), pivots.reshape(a.shape[:-1])


def _unit_lower(LU):
    return index.tril(LU, -1) + dec._eye(LU)


def _lu_factor_vjp(g, out, a, *, check_errors):
    gLU = g[0]
    LU, pivots = out
    L, U = _unit_lower(LU), index.triu(LU)
    phi = index.tril(dec._mT(L) @ index.tril(gLU, -1), -1) + index.triu(index.triu(gLU)
                                                                         @ dec._mT(U))
    grad = dec.solve_triangular(dec._mT(U), phi, upper=False, left=False)
    grad = dec.solve_triangular(dec._mT(L), grad, upper=True, unitriangular=True)
    return _permutation_matrix(pivots, LU.dtype) @ grad


LU_FACTOR = defop("linalg_lu_factor", _lu_factor_kernel, _infer_lu_factor, _lu_factor_vjp,
                  attrs=("check_errors",), num_outputs=2, differentiable_outputs=(0,),
                  saves="o",
                  doc="(LU packed, int32 pivots) with A = P L U (LAPACK getrf's layout)")


def _infer_permutation(pivots):
    if pivots.ndim < 1 or np.dtype(getattr(pivots.dtype, "np", pivots.dtype)).kind not in "iu":
        raise ShapeError(f"lu_unpack: expected integer pivots (*, n), got {pivots.dtype} "
                         f"of shape {tuple(pivots.shape)}")
    return ShapedType(tuple(pivots.shape), _INT64)


def _permutation_kernel(pivots):
    """The row each position of ``P^T A`` holds: the interchanges applied in order."""
    n = pivots.shape[-1]
    flat = pivots.reshape(-1, n).astype(np.int64) - 1
    perm = np.broadcast_to(np.arange(n), flat.shape).copy()
    rows = np.arange(flat.shape[0])
    for k in range(n):
        perm[rows, k], perm[rows, flat[:, k]] = perm[rows, flat[:, k]], perm[rows, k].copy()
    return perm.reshape(pivots.shape)


PERMUTATION = defop("lu_pivots_to_permutation", _permutation_kernel, _infer_permutation,
                    saves="", doc="The permutation that LAPACK's 1-based row interchanges make")


def _permutation_matrix(pivots, dtype):
    """P with A = P L U: ``P[perm[i], i] = 1``."""
    perm = apply(PERMUTATION, pivots)
    n = perm.shape[-1]
    return (perm.unsqueeze(-2) == creation.arange(n).unsqueeze(-1)).to(dtype)


class _LUFactor(NamedTuple):
    LU: Tensor
    pivots: Tensor


class _PLU(NamedTuple):
    P: Tensor
    L: Tensor
    U: Tensor


def lu_factor(A, *, pivot=True, check_errors=True):
    """``(LU, pivots)`` of square matrices, as ``torch.linalg.lu_factor``: ``LU`` packs the
    unit lower ``L`` and upper ``U`` with ``A = P L U``; ``pivots`` are getrf's 1-based
    row interchanges (int32). A singular matrix is an error unless ``check_errors`` is
    off (``lu_factor_ex``, ``lu``, ``torch.lu`` factor it)."""
    if not pivot:
        raise NotImplementedError("lu_factor: pivot=False (LU without pivoting) is "
                                  "CUDA-only in torch; dualgraph has only pivot=True")
    dec._check("lu_factor", A)
    return _LUFactor(*apply(LU_FACTOR, A, check_errors=bool(check_errors)))


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """``(P, L, U)`` from ``lu_factor``'s output, as ``torch.lu_unpack`` (an empty tensor
    for a part not asked for)."""
    empty = LU_data.new_zeros((0,))
    P = _permutation_matrix(LU_pivots, LU_data.dtype) if unpack_pivots else empty
    if not unpack_data:
        return _PLU(P, empty, empty)
    return _PLU(P, _unit_lower(LU_data), index.triu(LU_data))


def lu(A, *, pivot=True):
    """``(P, L, U)`` with ``A = P L U``, as ``torch.linalg.lu`` (square matrices)."""
    return lu_unpack(*lu_factor(A, pivot=pivot, check_errors=False))


def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """X with ``A X = B`` (``X A = B`` with ``left=False``; ``A^T`` for ``A`` with
    ``adjoint``) from ``lu_factor``'s output, as ``torch.linalg.lu_solve``."""
    P, L, U = lu_unpack(LU, pivots)
    tri = dec.solve_triangular
    if left and not adjoint:       # U^-1 L^-1 P^T B
        return tri(U, tri(L, dec._mT(P) @ B, upper=False, unitriangular=True), upper=True)
    if left:                       # A^T X = B: P L^-T U^-T B
        return P @ tri(dec._mT(L), tri(dec._mT(U), B, upper=False), upper=True,
                       unitriangular=True)
    if not adjoint:                # X P L U = B: B U^-1 L^-1 P^T
        x = tri(L, tri(U, B, upper=True, left=False), upper=False, left=False,
                unitriangular=True)
        return x @ dec._mT(P)
    # X U^T L^T P^T = B: B P L^-T U^-T
    return tri(dec._mT(U), tri(dec._mT(L), B @ P, upper=True, left=False, unitriangular=True),
               upper=False, left=False)


def singular_info(LU):
    """LAPACK's ``info`` of each factorisation: the 1-based index of the first zero on
    ``U``'s diagonal, 0 where there is none (int32)."""
    zero = index.diagonal(LU, 0, -2, -1) == 0
    first = zero.to(_INT32).argmax(-1) + 1
    return (first * zero.any(-1)).to(_INT32)


def _torch_lu(A, pivot=True, get_infos=False):
    """``torch.lu`` / ``Tensor.lu``: ``(LU, pivots)``, with ``infos`` when asked (a
    singular matrix factors: torch's check here is of the arguments only)."""
    LU, pivots = lu_factor(A, pivot=pivot, check_errors=False)
    return (LU, pivots, singular_info(LU)) if get_infos else (LU, pivots)


def _torch_lu_solve(b, LU_data, LU_pivots):
    """``torch.lu_solve`` / ``Tensor.lu_solve``: the right-hand side first."""
    return lu_solve(LU_data, LU_pivots, b)


METHODS = {"lu": _torch_lu, "lu_solve": _torch_lu_solve}
