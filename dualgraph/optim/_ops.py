"""In-place composites the optimisers need (torch has them as Tensor methods), built from
registry ops so they trace.

Every update in ``dualgraph.optim`` goes through these or through the in-place Tensor
methods (``add_``, ``mul_``, ...): never through writes into ``._data``, so the same
``step()`` runs eagerly and, captured, becomes graph nodes whose in-place writes are
functionalised.
"""
from __future__ import annotations

from ..ops.inplace import commit_inplace


def copy_(target, value):
    """``target.copy_(value)``."""
    return commit_inplace(target, value)


def lerp_(target, end, weight):
    """``target.lerp_(end, weight)``: ``target + weight * (end - target)``."""
    return commit_inplace(target, target + (end - target) * weight)


def addcmul_(target, t1, t2, value=1):
    """``target.addcmul_(t1, t2, value=value)``: ``target + value * t1 * t2``."""
    return commit_inplace(target, target + t1 * t2 * value)


def addcdiv_(target, t1, t2, value=1):
    """``target.addcdiv_(t1, t2, value=value)``: ``target + value * t1 / t2``."""
    return commit_inplace(target, target + t1 / t2 * value)
