"""``dg.linalg``: the norms of ``torch.linalg`` (``vector_norm``, ``matrix_norm`` in the
Frobenius form, ``norm``), built on ``dg.norm``. Decompositions and solvers (``inv``,
``solve``, ``svd``, ...) are not implemented (docs/reference/missing.md).

>>> import dualgraph as dg
>>> dg.linalg.vector_norm(dg.tensor([3.0, 4.0])).item()
5.0
"""
from __future__ import annotations

import math

from .ops import reduce as red

__all__ = ["vector_norm", "matrix_norm", "norm"]


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The ``ord``-norm of ``x`` over ``dim`` (all dims, flattened, when None)."""
    return red.norm(x if dtype is None else x.to(dtype), ord, dim, keepdim)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """The Frobenius norm over the two ``dim``; other ``ord`` are not implemented."""
    if ord != "fro":
        raise NotImplementedError(f"dg.linalg.matrix_norm: ord={ord!r} is not implemented "
                                  f"(only 'fro'); it needs singular values")
    return vector_norm(A, 2, tuple(dim), keepdim, dtype=dtype)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """``vector_norm`` for an int ``dim`` or a flattened 2-norm, ``matrix_norm`` for two
    dims (or a 2-d input with a string ``ord``), as ``torch.linalg.norm``."""
    if isinstance(ord, str) or (dim is not None and not isinstance(dim, int)
                                and len(tuple(dim)) == 2):
        return matrix_norm(A, "fro" if ord is None else ord, (-2, -1) if dim is None else dim,
                           keepdim, dtype=dtype)
    if ord is not None and dim is None and A.ndim == 2 and ord not in (2, math.inf):
        return matrix_norm(A, ord, keepdim=keepdim, dtype=dtype)
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
