"""Nested Python structures (tuples, lists, namedtuples, dicts, dataclasses) flattened to a
list of leaves and a spec that rebuilds them: how captured functions and control-flow
bodies take and return arbitrary structures while graphs see flat lists of values.
Anything that isn't a container (a tensor, a number, None) is a leaf. A dataclass (a
model's output record, ``ModelOutput``-style) or a dict subclass (``OrderedDict``) is
rebuilt as its own class: a compiled module returns what the module returns. So is an
object of a class that sets ``_flattens_by_attributes`` (a distribution: its parameter
tensors and the attributes around them), flattened as its ``__dict__`` and rebuilt without
its constructor, as ``copy.copy`` rebuilds it: a compiled policy can return a
``Categorical``, and a step can take one as an argument whose tensors are graph inputs."""
from __future__ import annotations

import dataclasses


def flatten(tree) -> tuple[list, object]:
    """``(leaves, spec)``; specs are nested tuples, so they hash and compare."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree, leaves):
    if isinstance(tree, (tuple, list)):
        return (type(tree), tuple(_flatten(x, leaves) for x in tree))
    if _user_dataclass(tree):
        names = tuple(f.name for f in dataclasses.fields(tree))
        return (type(tree), names, tuple(_flatten(getattr(tree, k), leaves) for k in names))
    if _by_attributes(type(tree)):
        names = tuple(vars(tree))
        return (type(tree), names, tuple(_flatten(vars(tree)[k], leaves) for k in names))
    if isinstance(tree, dict):
        keys = tuple(tree)
        kind = dict if type(tree) is dict or not _rebuilds(type(tree)) else type(tree)
        return (kind, keys, tuple(_flatten(tree[k], leaves) for k in keys))
    leaves.append(tree)
    return None


def _user_dataclass(tree) -> bool:
    """A dataclass instance of the user's (dualgraph's own, such as a subgraph input's
    placeholder type, are leaves)."""
    return (dataclasses.is_dataclass(tree) and not isinstance(tree, type)
            and not type(tree).__module__.startswith("dualgraph."))


def _by_attributes(kind) -> bool:
    return isinstance(kind, type) and getattr(kind, "_flattens_by_attributes", False)


def _rebuilds(kind) -> bool:
    """A dict subclass whose constructor takes ``(key, value)`` pairs, as ``OrderedDict``'s
    does (a ``defaultdict``'s takes its factory first: rebuilt as a plain dict)."""
    try:
        return kind([(0, 0)]) == {0: 0}
    except Exception:   # (any constructor that can't: a plain dict then)
        return False


def unflatten(spec, leaves):
    """Rebuild the structure ``spec`` from ``leaves`` (consumed in order)."""
    return _build(spec, iter(leaves))


def _build(spec, it):
    if spec is None:
        return next(it)
    if spec[0] is dict:
        return {k: _build(s, it) for k, s in zip(spec[1], spec[2])}
    if len(spec) == 3:
        kind, names, children = spec
        values = {k: _build(s, it) for k, s in zip(names, children)}
        if dataclasses.is_dataclass(kind):
            return _record(kind, values)
        if _by_attributes(kind):
            obj = object.__new__(kind)
            obj.__dict__.update(values)
            return obj
        return kind(values.items())
    kind, children = spec
    items = [_build(s, it) for s in children]
    return kind(*items) if hasattr(kind, "_fields") else kind(items)


def _record(kind, values: dict):
    """An instance of the dataclass ``kind`` with the field values ``values``: made by its
    constructor (as the code that returned it made it), the fields it does not take set
    after."""
    fields = dataclasses.fields(kind)
    obj = kind(**{f.name: values[f.name] for f in fields if f.init})
    for f in fields:
        if not f.init:
            object.__setattr__(obj, f.name, values[f.name])
    return obj


def size(spec) -> int:
    """The number of leaves a structure ``spec`` holds."""
    if spec is None:
        return 1
    return sum(size(c) for c in (spec[2] if len(spec) == 3 else spec[1]))
