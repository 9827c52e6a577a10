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
from .groups import group_peer, resolve

__all__ = ["all_reduce", "reduce", "broadcast", "all_gather", "all_gather_tensor",
           "reduce_scatter", "reduce_scatter_tensor"]


def all_reduce(tensor, op: str = "SUM", group=None):
    """The reduction of ``tensor`` over all ranks (of ``group``), a new tensor."""
    return _c.all_reduce(tensor, op, resolve(group))


def reduce(tensor, dst: int, op: str = "SUM", group=None):
    """The reduction over all ranks on global rank ``dst``; zeros on the other ranks."""
    return _c.reduce(tensor, group_peer(group, dst, "dst"), op, resolve(group))


def broadcast(tensor, src: int, group=None):
    """Global rank ``src``'s ``tensor`` on every rank."""
    return _c.broadcast(tensor, group_peer(group, src, "src"), resolve(group))


def all_gather(tensor, group=None) -> tuple:
    """Every rank's ``tensor``, as a tuple indexed by (group) rank."""
    gathered = _c.all_gather(tensor, resolve(group))
    return tuple(gathered[r] for r in range(gathered.shape[0]))


def all_gather_tensor(tensor, group=None):
    """Every rank's ``tensor`` stacked along a new leading dim."""
    return _c.all_gather(tensor, resolve(group))


def reduce_scatter(input_list, op: str = "SUM", group=None):
    """The reduction over ranks of ``input_list[rank]``."""
    return _c.reduce_scatter(stack(list(input_list)), op, resolve(group))


def reduce_scatter_tensor(input, op: str = "SUM", group=None):
    """Block ``rank`` (of group size equal blocks along dim 0) of the reduction of
    ``input`` over ranks."""
    key = resolve(group)
    size = _c.world(key)[1]
    return _c.reduce_scatter(input.reshape(size, input.shape[0] // size,
                                           *input.shape[1:]), op, key).reshape(
        input.shape[0] // size, *input.shape[1:])
