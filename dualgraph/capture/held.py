"""Where the tensors a graph reads by identity are held: guarded there, or read from there.

A graph reads the tensors the function is not passed (parameters, state, globals) by
identity (capture/trace.py). A module's own tensors are guarded by the module's facts
(capture/guards.py); a tensor held by a plain object, a global, a closure variable or a
list or dict the function reaches (a hand-written layer's ``self.weight``, ``params[0]``)
is guarded here: each place that held it when the trace began, and still holds it after,
must hold it at every call, else the call traces again, so ``layer.weight = new`` done
outside the function is seen, never the old tensor's values.

A place the graph itself fills anew at every call with a tensor computed from the one there
before (``self.running_mean = 0.9 * self.running_mean + 0.1 * mean`` under ``no_grad``:
capture/compile.py's ``_stores``) is *read* from the place instead: the graph's input is
whatever tensor is there when the call starts (the graph's own, or one the user put there
outside the function, of the same shape and dtype; of sizes that fit the dims the graph has
symbolic, a cache grown at every call: capture/autodims.py's ``PlaceDims``), as eager reads
it; and a place that held no tensor when traced (a cache of a new sequence) must hold the
same then (:attr:`Held.unset`). A global or closure
variable the step rebinds (``global h; h = 0.9 * h + x``, ``nonlocal``) is such a place too
(:func:`rebound_roots`): the module's globals dict under its name, or the closure cell.

>>> import dualgraph as dg
>>> class Layer:
...     pass
>>> layer = Layer()
>>> layer.w = dg.ones(2)
>>> found = tensor_places({"layer": layer}, {}, ())
>>> [name for name, _, _ in found[id(layer.w)]]
['layer.w']
"""
from __future__ import annotations

from ..tensor import Tensor
from .escape import _name, _walk, made_here
from .pyvalues import fact
from .scope import code_owner

CELL = object()   # the key of a closure cell's place


def tensor_places(roots: dict, sources: dict, skip) -> dict:
    """``{id(tensor): [(name, container, key)]}``: the places reachable from ``roots``
    (name -> object) that hold a tensor; ``sources`` (root name -> (container, key)) says
    where a root itself is held (``fn.__globals__``, a closure cell), ``skip`` the ids of
    objects not looked into (the modules and optimisers other guards cover)."""
    found: dict = {}

    def leaf(path, obj, container, key):
        if isinstance(obj, Tensor):
            if container is None:   # (a root: a global or closure variable)
                if path not in sources:
                    return
                container, key = sources[path]
            found.setdefault(id(obj), []).append((path, container, key))

    _walk(roots, leaf, skip, leaf=leaf)
    return {i: [(_name(p, {}), c, k) for p, c, k in places] for i, places in found.items()}


def root_sources(fn) -> dict:
    """Root name -> (container, key) for the closure variables and globals of ``fn``
    (capture/scope.py's ``scope_of`` names them)."""
    fn = code_owner(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    sources = {name: (fn.__globals__, name) for name in code.co_names}
    cells = getattr(fn, "__closure__", None) or ()
    sources.update({name: (cell, CELL) for name, cell in zip(code.co_freevars, cells)})
    return sources


def held(container, key):
    """What ``container`` holds under ``key`` now (None where nothing is)."""
    try:
        return container.cell_contents if key is CELL else container[key]
    except (KeyError, IndexError, ValueError, TypeError):
        return None


def store(container, key, value) -> None:
    """Put ``value`` in ``container`` under ``key`` (a closure cell's: its contents)."""
    if key is CELL:
        container.cell_contents = value
    else:
        container[key] = value


def rebound_roots(fn, tracer, before: dict) -> list:
    """``[(name, tensor, container, key, old)]`` for the globals and closure variables of
    ``fn`` that its traced call rebound to a tensor it made (``global h; h = 0.9 * h +
    x``), ``old`` what they held before (``before``: capture/scope.py's ``scope_of`` then;
    UNBOUND where nothing): state it keeps, as an attribute it rebinds."""
    found = []
    for name, (container, key) in root_sources(fn).items():
        t = held(container, key)
        if made_here(t, tracer):
            found.append((name, t, container, key, before.get(name, UNBOUND)))
    return found


UNBOUND = object()   # what a variable held before a trace that first bound it


def put_back(rebound: list) -> None:
    """Give the places of :func:`rebound_roots` what they held before an aborted trace."""
    for _, _, container, key, old in rebound:
        if old is not UNBOUND:
            store(container, key, old)
        elif key is CELL:
            del container.cell_contents
        else:
            container.pop(key, None)


class Held:
    """The identity guards and place reads of one graph. ``guards``: ``[(name, container,
    key, tensor, its requires_grad as traced)]``; ``reads``: ``{binding position: (name,
    container, key)}``; ``unset``: ``[(name, container, key, fact)]``, places it stores in
    that held no tensor when it was traced, and the guard fact (capture/pyvalues.py) of
    what they held (``self.k = k if self.k is None else cat(...)`` took the branch of a
    new sequence: a tensor there later takes the other)."""

    def __init__(self, guards=(), reads=None, unset=()):
        self.guards = list(guards)
        self.reads = dict(reads or {})
        self.unset = list(unset)

    def __bool__(self):
        return bool(self.guards or self.reads or self.unset)

    def changed(self) -> str | None:
        """Why the graph no longer fits, if a guarded place holds another tensor now."""
        for name, container, key, traced in self.unset:
            if fact(held(container, key)) != traced:
                return f"{name} holds {_what(held(container, key))} now, not as traced"
        for name, container, key, t, required in self.guards:
            if held(container, key) is not t:
                return (f"{name} was assigned anew outside the function (the graph read "
                        "the tensor held there when it was traced)")
            if t.requires_grad != required:   # (its gradient is in the graph, or not)
                return f"{name}.requires_grad changed to {t.requires_grad}"
        return None


def guards_for(before: dict, bindings) -> list:
    """The identity guards of a trace: for each tensor the graph reads by identity, the
    places (``before``: :func:`tensor_places` when the trace began) that still hold it."""
    out = []
    for b in bindings:
        if b.kind != "captured":
            continue
        for name, container, key in before.get(id(b.tensor), ()):
            if held(container, key) is b.tensor:
                out.append((name, container, key, b.tensor, b.tensor.requires_grad))
    return out


def _what(value) -> str:
    return "a tensor" if isinstance(value, Tensor) else repr(value)[:40]
