"""Tensors a trace made and left in Python state: ``self.state[p] = dg.zeros_like(p)``.

Tracing runs the function's Python once, so a tensor the function makes and keeps (an
optimiser's lazily created buffer, a module's cached attention mask) would hold a symbolic
value after the trace, and the Python branch that made it (``if p not in self.state``) ran
only because the state did not exist yet. :func:`created_state` finds such tensors in what
the function can reach (its closure and globals, the modules, optimisers and plain objects
they hold, their dicts, lists and tuples), so that the capture can compute them as outputs
and make them real tensors (capture/compile.py runs that graph once, then traces again).

>>> import dualgraph as dg
>>> from dualgraph.capture.trace import Tracer
>>> cache = {}
>>> with Tracer() as tracer:
...     cache["mask"] = dg.ones(2, 2).tril()
>>> [name for name, _ in created_state({"cache": cache}, tracer.graph)]
["cache['mask']"]
"""
from __future__ import annotations

import types

from ..graph.ir import Value
from ..tensor import Tensor

MAX_DEPTH = 6
MAX_ITEMS = 10_000   # longer containers (a dataset held in a list) are not looked into
_OPAQUE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType, type)


def created_state(roots: dict, graph, bound=(), names=None) -> list:
    """``[(name, tensor)]``: the tensors reachable from ``roots`` (name -> object) that hold
    a value of ``graph``, other than those whose ids are in ``bound`` (the graph's inputs,
    given back their storage when the trace ends). ``names``: id(tensor) -> name, for the
    tensors that key a dict (``opt.state[fc.weight]``)."""
    found, seen = {}, set(bound)
    names = names or {}

    def walk(obj, name, depth):
        if id(obj) in seen or depth > MAX_DEPTH:
            return
        seen.add(id(obj))
        if isinstance(obj, Tensor):
            if type(obj._data) is Value and obj._data in graph:
                found.setdefault(id(obj), (name, obj))
            return
        if isinstance(obj, dict):
            items = [(f"{name}[{_key(k, names)}]", v) for k, v in obj.items()]
        elif type(obj) in (list, tuple):
            items = [(f"{name}[{i}]", v) for i, v in enumerate(obj)]
        elif isinstance(obj, _OPAQUE) or not hasattr(obj, "__dict__"):
            return
        else:
            items = [(f"{name}.{k}", v) for k, v in vars(obj).items()]
        if len(items) > MAX_ITEMS:
            return
        for child_name, child in items:
            walk(child, child_name, depth + 1)

    for name, obj in roots.items():
        walk(obj, name, 0)
    return list(found.values())


def _key(k, names) -> str:
    return names.get(id(k), "<tensor>") if isinstance(k, Tensor) else repr(k)
