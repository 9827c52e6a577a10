"""Collectives as functions that return new tensors and differentiate, as
``torch.distributed.nn.functional``: the gradient of ``all_gather`` is a reduce-scatter of
the output gradients, of ``all_reduce(sum)`` an all-reduce, of ``broadcast`` a reduce to
the source.

>>> import dualgraph.distributed.functional as F
>>> x = dg.ones(2, requires_grad=True)
>>> y = F.all_reduce(x)              # y == world size; y.sum().backward() works
"""
from __future__ import annotations

from ..ops import collective as _c
from ..ops.shape import stack

__all__ = ["all_reduce", "reduce", "broadcast", "all_gather", "all_gather_tensor",
           "reduce_scatter", "reduce_scatter_tensor"]


def all_reduce(tensor, op: str = "SUM", group=None):
    """The reduction of ``tensor`` over all ranks (a new tensor)."""
    return _c.all_reduce(tensor, op)


def reduce(tensor, dst: int, op: str = "SUM", group=None):
    """The reduction over all ranks on rank ``dst``; zeros on the other ranks."""
    return _c.reduce(tensor, dst, op)


def broadcast(tensor, src: int, group=None):
    """Rank ``src``'s ``tensor`` on every rank."""
    return _c.broadcast(tensor, src)


def all_gather(tensor, group=None) -> tuple:
    """Every rank's ``tensor``, as a tuple indexed by rank."""
    gathered = _c.all_gather(tensor)
    return tuple(gathered[r] for r in range(gathered.shape[0]))


def all_gather_tensor(tensor, group=None):
    """Every rank's ``tensor`` stacked along a new leading dim."""
    return _c.all_gather(tensor)


def reduce_scatter(input_list, op: str = "SUM", group=None):
    """The reduction over ranks of ``input_list[rank]``."""
    return _c.reduce_scatter(stack(list(input_list)), op)


def reduce_scatter_tensor(input, op: str = "SUM", group=None):
    """Block ``rank`` (of world size equal blocks along dim 0) of the reduction of
    ``input`` over ranks."""
    size = _c.world()[1]
    return _c.reduce_scatter(input.reshape(size, input.shape[0] // size,
                                           *input.shape[1:]), op).reshape(
        input.shape[0] // size, *input.shape[1:])
