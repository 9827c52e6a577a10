"""Sparse tensors as programs use them for graph adjacency (``torch.sparse_coo_tensor``,
``torch.sparse.mm``, ``torch.spmm``, ``to_dense``): dualgraph has no sparse layout, so a
"sparse" tensor is an ordinary dense one with the same values (duplicates summed, as
``coalesce`` does) and the products are dense matmuls: the same numbers, with dense memory
and time.

>>> import dualgraph as dg
>>> a = dg.sparse_coo_tensor(dg.tensor([[0, 1, 1], [1, 0, 0]]), dg.tensor([1.0, 2.0, 3.0]))
>>> dg.sparse.mm(a, dg.ones(2, 1)).tolist()
[[1.0], [5.0]]
"""
from __future__ import annotations

from .ops import creation, index as index_ops, linalg, reduce as red
from .tensor import Tensor

__all__ = ["mm", "addmm", "sum"]


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """A dense tensor holding ``values`` at the columns of ``indices`` (ndim x nnz), zeros
    elsewhere; ``size`` defaults to the smallest that holds every index."""
    indices = indices if isinstance(indices, Tensor) else creation.tensor(indices)
    values = values if isinstance(values, Tensor) else creation.tensor(values, dtype=dtype)
    if dtype is not None:
        values = values.to(dtype)
    if indices.ndim != 2:
        raise ValueError(f"sparse_coo_tensor: indices must be (ndim, nnz), got shape "
                         f"{tuple(indices.shape)}")
    if size is None:
        size = tuple(int(m) + 1 for m in red.amax(indices, 1).tolist()) + \
            tuple(values.shape[1:])
    dense = creation.zeros(*size, dtype=values.dtype, device=device)
    dense = index_ops.index_put(dense, tuple(indices.unbind(0)), values, accumulate=True)
    return dense.requires_grad_(requires_grad) if requires_grad else dense


def mm(mat1, mat2):
    """``torch.sparse.mm``: a matrix product (dense here)."""
    return linalg.mm(mat1, mat2)


def addmm(mat, mat1, mat2, *, beta=1.0, alpha=1.0):
    """``torch.sparse.addmm``: ``beta * mat + alpha * mat1 @ mat2``."""
    return linalg.addmm(mat, mat1, mat2, beta=beta, alpha=alpha)


def sum(input, dim=None):
    """``torch.sparse.sum``: a sum (dense here)."""
    return red.sum(input) if dim is None else red.sum(input, dim)
