"""Flatten nested Python structures of tensors (tuples, lists, dicts, namedtuples) into a
list of leaves and a spec that rebuilds them: how captured functions take and return
arbitrary structures while graphs see flat lists of values."""
from __future__ import annotations

from ..tensor import Tensor


def flatten(tree) -> tuple[list, object]:
    """Leaves in order and a spec; tensors and anything that isn't a container are leaves."""
    leaves: list = []
    spec = _flatten(tree, leaves)
    return leaves, spec


def _flatten(tree, leaves):
    if isinstance(tree, Tensor):
        leaves.append(tree)
        return "*"
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):   # namedtuple
        return ("namedtuple", type(tree), [_flatten(x, leaves) for x in tree])
    if isinstance(tree, (tuple, list)):
        return (type(tree).__name__, None, [_flatten(x, leaves) for x in tree])
    if isinstance(tree, dict):
        keys = list(tree)
        return ("dict", keys, [_flatten(tree[k], leaves) for k in keys])
    leaves.append(tree)
    return "*"


def unflatten(spec, leaves):
    """Rebuild the structure ``spec`` from ``leaves`` (consumed in order)."""
    it = iter(leaves)
    return _build(spec, it)


def _build(spec, it):
    if spec == "*":
        return next(it)
    kind, extra, children = spec
    items = [_build(c, it) for c in children]
    if kind == "namedtuple":
        return extra(*items)
    if kind == "tuple":
        return tuple(items)
    if kind == "list":
        return items
    return dict(zip(extra, items))
