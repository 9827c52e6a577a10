"""Nested Python structures (tuples, lists, namedtuples, dicts) flattened to a list of leaves
and a spec that rebuilds them: how captured functions and control-flow bodies take and
return arbitrary structures while graphs see flat lists of values. Anything that isn't a
container (a tensor, a number, None) is a leaf."""
from __future__ import annotations


def flatten(tree) -> tuple[list, object]:
    """``(leaves, spec)``; specs are nested tuples, so they hash and compare."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree, leaves):
    if isinstance(tree, (tuple, list)):
        return (type(tree), tuple(_flatten(x, leaves) for x in tree))
    if isinstance(tree, dict):
        keys = tuple(tree)
        return (dict, keys, tuple(_flatten(tree[k], leaves) for k in keys))
    leaves.append(tree)
    return None


def unflatten(spec, leaves):
    """Rebuild the structure ``spec`` from ``leaves`` (consumed in order)."""
    return _build(spec, iter(leaves))


def _build(spec, it):
    if spec is None:
        return next(it)
    if spec[0] is dict:
        return {k: _build(s, it) for k, s in zip(spec[1], spec[2])}
    kind, children = spec
    items = [_build(s, it) for s in children]
    return kind(*items) if hasattr(kind, "_fields") else kind(items)


def size(spec) -> int:
    """The number of leaves a structure ``spec`` holds."""
    if spec is None:
        return 1
    return sum(size(c) for c in (spec[2] if spec[0] is dict else spec[1]))
